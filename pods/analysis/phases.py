"""Where the compute went: per variant (mean over seeds), steps, rollouts, prompts skipped before rollout, and
seconds per phase, from each run's metrics.jsonl. The table behind GRESO's claim (less rollout time).

    python scripts/phase_totals.py outputs/multirun/cpu_greso > results/cpu_greso/phases.md
    python -m pods.analysis.phases outputs/multirun/cpu_greso     # the same
"""

from __future__ import annotations

import re
import statistics
import sys
from collections import defaultdict
from pathlib import Path

from pods.tracking import read_metrics

# column -> the stage's timer; the columns keep the words of the tables already committed (results/*/phases.md),
# which regenerate byte for byte from runs that logged timing/filter, timing/selection and rollout/* for what is
# now prefilter/prompts_drawn and dynamic_sampling/dropped_zero_var (read_metrics reads them under today's names)
PHASES = {"filter": "prefilter", "generation": "generation", "reward": "reward", "selection": "selector",
          "update": "update"}  # fmt: skip


def run_totals(run: Path) -> dict:
    train = [r for r in read_metrics(run / "metrics.jsonl") if r["kind"] == "train"]
    out = {
        "steps": len(train),
        "train clock s": train[-1]["train_time"] if train else 0.0,
        "rollouts": sum(r.get("rollout/rollouts", 0) for r in train),
        "prompts drawn": sum(r.get("prefilter/prompts_drawn", 0) for r in train),
        "skipped before rollout": sum(r.get("prefilter/skipped", 0) for r in train),
        "zero-var groups dropped": sum(r.get("dynamic_sampling/dropped_zero_var", 0) for r in train),
    }
    for column, timer in PHASES.items():
        out[f"{column} s"] = sum(r.get(f"timing/{timer}", 0.0) for r in train)
    out["s/step"] = out["train clock s"] / max(len(train), 1)
    out["generation ms/rollout"] = 1e3 * out["generation s"] / max(out["rollouts"], 1)
    lengths = [r["completions/mean_length"] for r in train if "completions/mean_length" in r]
    out["mean completion tokens"] = sum(lengths) / max(len(lengths), 1)
    return out


def main(argv: list[str] | None = None) -> None:
    """Print the table for the sweep dirs in argv (default: the command line)."""
    args = sys.argv[1:] if argv is None else argv
    runs = [d for a in args for d in sorted(Path(a).glob("**/metrics.jsonl"))]
    groups: dict[str, list[dict]] = defaultdict(list)
    for m in runs:
        groups[re.sub(r"-s\d+$", "", m.parent.name)].append(run_totals(m.parent))
    if not groups:
        sys.exit("no metrics.jsonl found under " + " ".join(args))
    cols = list(next(iter(groups.values()))[0])
    print("| variant | seeds | " + " | ".join(cols) + " |")
    print("|---|---|" + "---|" * len(cols))
    for name, rows in groups.items():
        cells = [f"{statistics.mean(r[c] for r in rows):,.2f}" for c in cols]
        print(f"| {name} | {len(rows)} | " + " | ".join(cells) + " |")
    print("\nMeans over seeds of per-run totals; seconds are training-clock phase times (eval excluded).")


if __name__ == "__main__":
    main()
