"""GRESO v1's pilot read (results/greso_v1/PLAN.md): for each dynamic-sampling run, its training-set size, how
many times it drew each prompt on average, and criteria (i)-(iii) (pods/analysis/seeds.py: size_passes); the
chosen size is the smallest whose every seed passes. GRESO runs are listed with their skip share (not a gate).

    python scripts/greso_pilot_checks.py /tmp/gv1/pilot --grid-step 10 --x-max 360 --chosen-env chosen.env
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from omegaconf import OmegaConf  # noqa: E402

from pods.analysis.curves import build_curves  # noqa: E402
from pods.analysis.load import find_run_dirs, load_runs  # noqa: E402
from pods.analysis.phases import run_totals  # noqa: E402
from pods.analysis.seeds import size_passes  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("pilot", type=Path)
    p.add_argument("--grid-step", type=float, default=10)
    p.add_argument("--x-max", type=float, default=360)
    p.add_argument("--x", default="train_time")
    p.add_argument("--chosen-env", type=Path)
    a = p.parse_args()
    rows, by_size = [], defaultdict(list)
    for d in find_run_dirs(a.pilot):
        cfg = OmegaConf.load(d / "config.yaml")
        size, greso = int(cfg.dataset.train_size), cfg.prefilter.name == "greso"
        curve = next(iter(build_curves(load_runs([d]), a.x, "nearest", a.grid_step, 0.0, a.x_max).values()))
        tot = run_totals(d)
        row = size_passes(curve.values[0], tot["prompts drawn"], size)
        row.update(name=d.name, size=size, greso=greso, steps=tot["steps"],
                   skipped=tot["skipped before rollout"] / max(tot["prompts drawn"], 1))  # fmt: skip
        rows.append(row)
        if not greso:
            by_size[size].append(row["passes"])
    mark = lambda ok: "yes" if ok else "**no**"  # noqa: E731
    print("| run | N | steps | draws per prompt | (i) >= 3 | start | end | rise | noise | (ii) rises | fall | "
          "(iii) fall <= noise | passes | skipped before rollout |")  # fmt: skip
    print("|" + "---|" * 14)
    for r in sorted(rows, key=lambda r: (r["greso"], r["size"], r["name"])):
        gate = lambda k, r=r: "-" if r["greso"] else mark(r[k])  # noqa: E731
        print(f"| {r['name']} | {r['size']:,} | {r['steps']:,} | {r['visits']:.1f} | {gate('revisits')} | "
              f"{r['start']:.3f} | {r['end']:.3f} | {r['rise']:+.3f} | {r['noise']:.4f} | {gate('rises')} | "
              f"{r['fall']:.3f} | {gate('holds')} | {gate('passes')} | {r['skipped']:.0%} |")  # fmt: skip
    passing = sorted(s for s, ok in by_size.items() if ok and all(ok))
    print()
    if not passing:
        print("Chosen: none (no size passes (i)-(iii) in every seed): nothing confirmatory runs (PLAN.md).")
        return
    print(f"Chosen: N = {passing[0]:,} (the smallest size whose every dynamic-sampling seed passes).")
    if a.chosen_env:
        a.chosen_env.write_text(f"TRAIN_SIZE={passing[0]}\n")


if __name__ == "__main__":
    main()
