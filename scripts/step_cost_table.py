"""The short table of scripts/device/step_cost.sh (or of any folder of scripts/bench_step_cost.py outputs):
GRPO 16/16 against PODS 64/16 per setting and variant (step and generation ms, PODS/GRPO), then the rows sweep.

    python scripts/step_cost_table.py /tmp/step_cost_run/step_cost            # pairs, then the sweep
    python scripts/step_cost_table.py /tmp/step_cost_run/step_cost --packed   # packed runs by part
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

PARTS = ["step", "generation", "prefill", "decode", "tail", "detokenize", "gen. other", "reward", "update"]


def runs_in(folder: Path) -> dict[str, list[dict]]:
    """{setting name: [mean parts of each process]} of every results.json under folder."""
    out: dict[str, list[dict]] = {}
    for f in sorted(folder.rglob("results.json")):
        for run in json.loads(f.read_text()).get("runs", []):
            out.setdefault(run["name"], []).append(run["mean"])
    return out


def mean(ms: list[dict], key: str) -> float:
    return statistics.fmean(m.get(key, 0.0) for m in ms)


def pair_rows(root: Path) -> list[str]:
    lines = ["| setting | GRPO step ms | PODS step ms | PODS/GRPO | GRPO gen ms | PODS gen ms | gen ratio |",
             "|---|---|---|---|---|---|---|"]  # fmt: skip
    for sub in sorted(p for p in root.iterdir() if p.is_dir()):
        runs = runs_in(sub)
        if not {"grpo16", "pods64"} <= runs.keys():
            continue
        g, p = runs["grpo16"], runs["pods64"]
        gs, ps, gg, pg = mean(g, "step"), mean(p, "step"), mean(g, "generation"), mean(p, "generation")
        lines.append(f"| {sub.name} | {1e3 * gs:.1f} | {1e3 * ps:.1f} | {ps / gs:.2f} | {1e3 * gg:.1f} | "
                     f"{1e3 * pg:.1f} | {pg / gg:.2f} |")  # fmt: skip
    return lines


def sweep_rows(root: Path) -> list[str]:
    found = {}
    for sub in sorted(p for p in root.iterdir() if p.is_dir()):
        for name, ms in runs_in(sub).items():
            if name.startswith("n") and name[1:].isdigit():
                found[(sub.name, int(name[1:]))] = ms
            elif name in ("grpo16", "pods64") and sub.name.startswith(("alone", "cpu")):
                found[(sub.name, 16 if name == "grpo16" else 64)] = ms
    if not found:
        return []
    lines = ["", "| folder | n | " + " | ".join(f"{p} ms" for p in PARTS) + " | decode steps |",
             "|---|---|" + "---|" * (len(PARTS) + 1)]  # fmt: skip
    for (folder, n), ms in sorted(found.items()):
        cells = [f"{1e3 * mean(ms, p):.1f}" for p in PARTS] + [f"{mean(ms, 'decode steps'):.0f}"]
        lines.append(f"| {folder} | {n} | " + " | ".join(cells) + " |")
    return lines


def packed_rows(root: Path) -> list[str]:
    """Each packed variant's parts, mean over its processes (each process's steps after its warm-up)."""
    lines = ["| folder | setting | procs | " + " | ".join(f"{p} ms" for p in PARTS) + " |",
             "|---|---|---|" + "---|" * len(PARTS)]  # fmt: skip
    for sub in sorted(p for p in root.iterdir() if p.is_dir() and p.name.startswith("packed")):
        for name, ms in sorted(runs_in(sub).items()):
            cells = [f"{1e3 * mean(ms, p):.1f}" for p in PARTS]
            lines.append(f"| {sub.name} | {name} | {len(ms)} | " + " | ".join(cells) + " |")
    return lines


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    root = Path(args[0] if args else "results/step_cost")
    rows = packed_rows(root) if "--packed" in sys.argv else pair_rows(root) + sweep_rows(root)
    print("\n".join(rows))


if __name__ == "__main__":
    main()
