"""Fuzz the reward stage: adversarial completions through build_reward, each one timed on its own.

The corpus and the timers are bench/fuzz.py (CI runs a smaller corpus in tests/reward/test_fuzz.py);
this script runs them at scale and writes the tables. The corpus is run twice: with
the default deadlines, and with the worker's own alarm off, so that every slow input is stopped by the
parent killing the worker (the path that covers C code no signal reaches). Writes results/reward_fuzz.md.

    PYTHONPATH=. python scripts/fuzz_rewards.py --n 20000 --timeout_s 1.0
    PYTHONPATH=. python scripts/fuzz_rewards.py --batch   # one reward call on 64 completions that each hit the limit

`--batch` times whole batches the way the trainer calls the reward (one call per generation round):
64 distinct power towers, the same tower 64 times, and 512 completions (8 x 64) of which 64 are towers.
Writes results/reward_batch.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
from pathlib import Path


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
    from bench.fuzz import adversarial_corpus, fuzz_reward_fields, time_batches, time_each
    from pods.config import RewardConfig
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
        reward = build_reward(RewardConfig(**fuzz_reward_fields(args.timeout_s, args.batch_timeout_s)))
        reward.grader.wait_ready()  # the workers start on first need: keep their start out of the timings
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
    runs = {}
    reward = build_reward(RewardConfig(**fuzz_reward_fields(args.timeout_s)))
    reward.grader.wait_ready()  # the workers start on first need: keep their start out of the timings
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
