"""Fuzz the reward stage: adversarial completions through build_reward, each one timed on its own.

The corpus mixes known bombs (power towers, huge factorials, 10^6-digit numbers, brace nests, LaTeX
repetition, Python payloads, NUL bytes, lone surrogates, 1 MB lines, thousands of tags) in several
wrappers, random token soups, random numbers and ordinary right/wrong answers. It is run twice: with
the default deadlines, and with the worker's own alarm off, so that every slow input is stopped by the
parent killing the worker (the path that covers C code no signal reaches). Writes results/reward_fuzz.md.

    python scripts/fuzz_rewards.py --n 20000 --timeout_s 1.0
    python scripts/fuzz_rewards.py --batch   # one reward call on 64 completions that each hit the limit

`--batch` times whole batches the way the trainer calls the reward (one call per generation round):
64 distinct power towers, the same tower 64 times, and 512 completions (8 x 64) of which 64 are towers.
Writes results/reward_batch.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

GOLDS = ["-4", "560", "\\frac{1}{2}", "72", "x^2+1", "1,000", "0", "\\sqrt{2}", "3.5"]
WRAPS = [
    "@",
    "<answer>@</answer>",
    "<think>let me see</think>\n<answer>@</answer>",
    "so the answer is \\boxed{@}.",
    "<answer>$@$</answer>",
]
SOUP = ["\\frac{", "}", "{", "^", "^{", "!", "\\sqrt{", "(", ")", "10", "9", "2", "x", "=", ",", ".", "-", "+", " ",
        "\n", "\\boxed{", "<answer>", "</answer>", "<think>", "</think>", "\\left(", "\\right)", "\\text{", "$",
        "\\", "\\pi", "\\infty", "\\cdot", "\\int", "\\sum_{", "\\binom{", "\\begin{pmatrix}", "&", "\\\\",
        "\\end{pmatrix}", "\\underbrace{", "__import__('os')", "\x00", "\ud800", "π", "∞", "%", "\\%", "\\$"]  # fmt: skip


def bombs(marker: str) -> list[str]:
    """Inputs known to hang, blow up or exploit naive graders. `marker` is a file a payload would create."""
    cmd = f"touch {marker}"
    return [
        "9" * 100_000, "9" * 1_000_000, "10^10^10^10", "10^{10^{10^{10}}}", "9^{9^{9^{9}}}", "2**2**2**2**2**2",
        "1000000!", "(10^{10})!", "\\binom{10^{9}}{5 \\cdot 10^{8}}", "\\sqrt{2}^{10^{9}}", "10^{10000000}",
        "\\sum_{i=1}^{10^{12}} i", "\\prod_{i=1}^{10^{9}} i", "\\int_0^{10^9} x^{10^9} dx", "x^{" * 60 + "2" + "}" * 60,
        "\\frac{" * 5000, "{" * 10_000, "(" * 5000 + ")" * 5000, "\\left(" * 2000, "\\underbrace{" * 2000,
        "\\frac{1}{" * 100 + "2" + "}" * 100, "\\underbrace{x}_{a}" * 500, "\\sqrt{" * 40 + "2" + "}" * 40,
        f"__import__('os').system('{cmd}')", f"$__import__('os').system('{cmd}')$", f"\\text{{__import__('os').system('{cmd}')}}",
        f"import os; os.system('{cmd}')", f"exec(\"import os; os.system('{cmd}')\")", "().__class__.__bases__[0].__subclasses__()",
        f"lambda: __import__('subprocess').run('{cmd}', shell=True)", f"eval(compile('open(\"{marker}\", \"w\")', 'x', 'exec'))",
        "\x00" * 1000, "1\x002", "\ud800\udfff\ud800", "\udcff" * 100, "a" * 1_000_000, "<answer>1</answer>" * 10_000,
        "<answer>" * 100_000, "</answer>" * 100_000, "\\boxed{" * 50_000, "<think>" * 50_000 + "<answer>1</answer>",
        "\u202e\u200b\ufeff" * 1000, "1" + "0" * 300, "-" * 1000 + "4", "1,000," * 40, "$" * 5000,
    ]  # fmt: skip


def adversarial_corpus(n: int, seed: int = 0, marker: str = "/tmp/pods_pwned") -> list[tuple[str, str, str]]:
    """(kind, completion, gold) triples: every bomb in every wrapper, then random cases up to n."""
    rng = random.Random(seed)
    out = [("bomb", w.replace("@", b), rng.choice(GOLDS)) for b in bombs(marker) for w in WRAPS]
    makers = [_soup, _number, _honest]
    while len(out) < n:
        out.append(rng.choice(makers)(rng))
    return out[:n]


def _soup(rng: random.Random) -> tuple[str, str, str]:
    body = "".join(rng.choice(SOUP) for _ in range(rng.randint(1, 80)))
    return "soup", rng.choice(WRAPS).replace("@", body), rng.choice(GOLDS)


def _number(rng: random.Random) -> tuple[str, str, str]:
    x = rng.choice(
        [rng.randint(-(10**6), 10**6), rng.random() * 10 ** rng.randint(-5, 30), 10 ** rng.randint(0, 400)]
    )
    text = rng.choice(["{:,}", "{}", "${}", "{}%", "-{}"]).format(x)
    return "number", f"<answer>{text}</answer>", rng.choice([str(x), rng.choice(GOLDS)])


def _honest(rng: random.Random) -> tuple[str, str, str]:
    gold = rng.choice(GOLDS)
    pred = rng.choice([gold, gold.replace(",", ""), "7", "\\frac{2}{4}", "1+x^2", "\\boxed{" + gold + "}"])
    return "honest", f"<think>{'step ' * rng.randint(0, 200)}</think><answer>{pred}</answer>", gold


def time_each(reward, corpus: list[tuple[str, str, str]]) -> dict:
    """Grade one completion per call and time it. Returns per-kind seconds and outcome counts."""
    secs: dict[str, list[float]] = {}
    counts = {"completions": 0, "correct": 0, "timeouts": 0, "errors": 0}
    for kind, completion, gold in corpus:
        t0 = time.perf_counter()
        out = reward([completion], [gold])
        secs.setdefault(kind, []).append(time.perf_counter() - t0)
        counts["completions"] += 1
        counts["correct"] += out.correct[0]
        counts["timeouts"] += out.n_timeouts
        counts["errors"] += out.n_errors
    return {"secs": secs, "counts": counts}


def _row(name: str, xs: list[float]) -> str:
    q = sorted(xs)
    p99 = q[min(len(q) - 1, int(0.99 * len(q)))]
    return f"| {name} | {len(q)} | {statistics.median(q) * 1e3:.2f} | {p99 * 1e3:.1f} | {q[-1] * 1e3:.1f} |"


def render(runs: dict[str, dict], args: argparse.Namespace, pwned: bool) -> str:
    lines = [
        "# Reward fuzz: grading time per completion",
        "",
        f"`python scripts/fuzz_rewards.py --n {args.n} --timeout_s {args.timeout_s} --seed {args.seed}` on "
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}.",
        f"Each completion is graded alone (`reward([c], [gold])`, accuracy + format) and timed; the bound to hold "
        f"is timeout_s = {args.timeout_s} s. Exploit payloads created the marker file: **{pwned}**.",
    ]
    for name, run in runs.items():
        c = run["counts"]
        every = [s for xs in run["secs"].values() for s in xs]
        lines += ["", f"## {name}", "", ", ".join(f"{k}: {v}" for k, v in c.items()), ""]
        lines += ["| kind | n | median ms | p99 ms | worst ms |", "|---|---|---|---|---|"]
        lines += [_row(k, xs) for k, xs in sorted(run["secs"].items())] + [_row("**all**", every)]
    return "\n".join(lines) + "\n"


def tower(i: int) -> str:
    return f"<answer>10^{{10^{{10^{{{10 + i}}}}}}}</answer>"


def time_batches(reward) -> list[tuple[str, int, float, int]]:
    """(case, completions, seconds, timeouts) for each batch, through one reward call per batch."""
    honest = [(f"<think>ok</think><answer>{g}</answer>", g) for g in GOLDS]
    mixed = [(tower(i), "5") for i in range(64)] + [honest[i % len(honest)] for i in range(448)]
    cases = {
        "64 distinct towers": [(tower(i), "5") for i in range(64)],
        "64 copies of one tower": [(tower(0), "5")] * 64,
        "512 = 8 x 64 rollouts, 64 of them distinct towers": mixed,
    }
    rows = []
    for name, pairs in cases.items():
        t0 = time.perf_counter()
        out = reward([c for c, _ in pairs], [g for _, g in pairs])
        rows.append((name, len(pairs), time.perf_counter() - t0, out.n_timeouts))
    return rows


def render_batches(rows, args, label: str) -> str:
    lines = [
        f"## {label}",
        "",
        f"`python scripts/fuzz_rewards.py --batch --timeout_s {args.timeout_s}"
        + (f" --batch_timeout_s {args.batch_timeout_s}" if args.batch_timeout_s is not None else "")
        + f"` on {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} CPUs, Python {platform.python_version()}.",
        "",
        "| batch | completions | seconds | timeouts |",
        "|---|---|---|---|",
    ]
    lines += [f"| {n} | {k} | {s:.1f} | {t} |" for n, k, s, t in rows]
    return "\n".join(lines) + "\n"


def main() -> None:
    from pods.reward import build_reward

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=20_000)
    ap.add_argument("--timeout_s", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None)
    ap.add_argument("--batch", action="store_true", help="time whole batches of slow completions instead")
    ap.add_argument("--label", default="this checkout", help="--batch: heading of the table")
    ap.add_argument("--batch_timeout_s", type=float, default=None, help="--batch: reward.batch_timeout_s")
    args = ap.parse_args()
    if args.batch:
        cfg = SimpleNamespace(name="batch", weights={"accuracy": 1.0, "format": 0.1}, timeout_s=args.timeout_s,
                              max_chars=4096, max_answer_chars=256)  # fmt: skip
        if args.batch_timeout_s is not None:
            cfg.batch_timeout_s = args.batch_timeout_s
        reward = build_reward(cfg)
        text = render_batches(time_batches(reward), args, args.label)
        reward.close()
        out = Path(args.out or "results/reward_batch.md")
        out.parent.mkdir(parents=True, exist_ok=True)
        with out.open("a") as f:
            f.write(text + "\n")
        print(text)
        return
    args.out = args.out or "results/reward_fuzz.md"
    marker = Path(tempfile.mkdtemp()) / "pwned"
    corpus = adversarial_corpus(args.n, args.seed, str(marker))
    cfg = SimpleNamespace(name="fuzz", weights={"accuracy": 1.0, "format": 0.1}, timeout_s=args.timeout_s,
                          max_chars=4096, max_answer_chars=256)  # fmt: skip
    runs = {}
    reward = build_reward(cfg)
    runs[f"default deadlines, {len(corpus)} completions"] = time_each(reward, corpus)
    reward.grader.soft_fraction = None  # no alarm in the worker: the parent must kill it every time
    runs["worker alarm off (every slow input killed by the parent), bombs only"] = time_each(
        reward, [x for x in corpus if x[0] == "bomb"]
    )
    reward.close()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(render(runs, args, marker.exists()))
    print(Path(args.out).read_text())


if __name__ == "__main__":
    main()
