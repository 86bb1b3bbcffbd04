"""Adversarial completions for the reward stage, and timers that grade them one call at a time.

The corpus mixes known bombs (power towers, huge factorials, 10^6-digit numbers, brace nests, LaTeX
repetition, Python payloads, NUL bytes, lone surrogates, 1 MB lines, thousands of tags) in several
wrappers, random token soups, random numbers and ordinary right/wrong answers. tests/reward/test_fuzz.py
runs it on every CI run; scripts/fuzz_rewards.py runs it at scale and writes results/reward_fuzz.md.
"""

from __future__ import annotations

import random
import time

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


def fuzz_reward_fields(timeout_s: float, batch_timeout_s: float | None = None) -> dict:
    """The reward settings every fuzz run grades with, as fields of pods.config.RewardConfig: accuracy + 0.1
    format, the other limits at their defaults (`build_reward(RewardConfig(**fuzz_reward_fields(1.0)))`)."""
    fields = dict(name="fuzz", weights={"accuracy": 1.0, "format": 0.1}, timeout_s=timeout_s)
    if batch_timeout_s is not None:
        fields["batch_timeout_s"] = batch_timeout_s
    return fields
