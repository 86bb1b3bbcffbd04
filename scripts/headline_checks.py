"""The headline's checks of its setting, per variant, from a sweep's run directories (results/headline/PLAN.md):
mean over seeds of the start accuracy, peak and final eval accuracy, the share of zero-variance groups
among all generated ones, steps, and per-step phase seconds over steps 3 onward (the first steps carry
warm-ups), rows trained per step and the one-time compile seconds.

    python scripts/headline_checks.py /tmp/sweep > results/headline/checks.md
"""

from __future__ import annotations

import json
import statistics as st
import sys
from collections import defaultdict
from pathlib import Path


def run_row(d: Path) -> tuple[str, dict]:
    recs = [json.loads(x) for x in (d / "metrics.jsonl").read_text().splitlines() if x.strip()]
    variant = json.loads((d / "run_info.json").read_text())["variant"]
    train, evals = [r for r in recs if r["kind"] == "train"], [r for r in recs if r["kind"] == "eval"]
    late = train[2:]
    mean = lambda k: st.mean(r.get(k) or 0.0 for r in late)  # noqa: E731
    return variant, {
        "start": evals[0]["eval/accuracy"],
        "peak": max(e["eval/accuracy"] for e in evals),
        "final": evals[-1]["eval/accuracy"],
        "zero_var": mean("selector/all_zero_var_frac"),
        "steps": len(train),
        "step_s": mean("timing/step"),
        "generation_s": mean("timing/generation"),
        "update_s": mean("timing/update"),
        "reward_s": mean("timing/reward"),
        "rows": mean("update/rows"),
        "compile_s": sum(r.get("timing/compile", 0.0) for r in train),
    }


def main() -> None:
    by_variant = defaultdict(list)
    for d in sorted(p for p in Path(sys.argv[1]).iterdir() if (p / "metrics.jsonl").exists()):
        v, row = run_row(d)
        by_variant[v].append(row)
    keys = list(next(iter(by_variant.values()))[0])
    print("| variant | seeds | " + " | ".join(keys) + " |")
    print("|---|---|" + "---|" * len(keys))
    for v, rows in sorted(by_variant.items()):
        cells = [f"{st.mean(r[k] for r in rows):.3f}" for k in keys]
        print(f"| {v} | {len(rows)} | " + " | ".join(cells) + " |")
    print("\nMeans over seeds; per-step seconds, rows and zero_var over steps 3 onward.")


if __name__ == "__main__":
    main()
