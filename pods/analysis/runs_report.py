"""Before/after table for a set of runs: eval accuracy at step 0, at the end and at its peak, per run and
mean over runs, with the training clock and wall time. Used for README's default-run numbers:

    for s in 0 1 2; do python -m pods.train seed=$s hydra.run.dir=outputs/default/s$s; done
    python scripts/report_runs.py outputs/default/s0 outputs/default/s1 outputs/default/s2 > results/default_run.md
    python -m pods.analysis.runs_report outputs/default/s0 ...   # the same
"""

from __future__ import annotations

import platform
import statistics
import sys
from pathlib import Path

from pods.tracking import read_metrics


def row(run: Path) -> dict:
    recs = read_metrics(run / "metrics.jsonl")
    evals = [r for r in recs if r["kind"] == "eval"]
    acc = [r["eval/accuracy"] for r in evals]
    return {
        "run": run.name,
        "before": acc[0],
        "after": acc[-1],
        "peak": max(acc),
        "steps": evals[-1]["step"],
        "clock": evals[-1]["train_time"],
        "wall": recs[-1]["wall_time"] - recs[0]["wall_time"],
    }


def main(argv: list[str] | None = None) -> None:
    """Print the table for the run dirs in argv (default: the command line)."""
    rows = [row(Path(p)) for p in (sys.argv[1:] if argv is None else argv)]
    print(f"# Default run (`python -m pods.train`), {len(rows)} seeds\n")
    print(
        f"Machine: {platform.machine()}, {platform.processor() or 'cpu'}, Python {platform.python_version()}.\n"
    )
    print(
        "| run | eval acc before | after | peak | steps | training clock s | wall s (first to last record) |"
    )
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['run']} | {r['before']:.3f} | {r['after']:.3f} | {r['peak']:.3f} | {r['steps']} | "
            f"{r['clock']:.0f} | {r['wall']:.0f} |"
        )
    mean = {k: statistics.mean(r[k] for r in rows) for k in ("before", "after", "peak")}
    print(f"| **mean** | {mean['before']:.3f} | {mean['after']:.3f} | {mean['peak']:.3f} | | | |")
    print(f"\nMean change after - before: {100 * (mean['after'] - mean['before']):+.1f} points absolute.")


if __name__ == "__main__":
    main()
