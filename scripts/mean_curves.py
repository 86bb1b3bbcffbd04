"""Each variant's mean curve over seeds on a checkpoint grid (the paper rule's read: the eval nearest each
checkpoint), as a Markdown table: the tables in results/headline_v2/README.md.

    python scripts/mean_curves.py /tmp/hv2/confirm1 --grid-step 16 --x-max 240 --variants none-n16-m16 max_variance-n64-m16
"""

from __future__ import annotations

import argparse

from pods.analysis.curves import build_curves
from pods.analysis.load import load_inputs


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("sweep")
    p.add_argument("--grid-step", type=float, required=True)
    p.add_argument("--x-min", type=float, default=0.0)
    p.add_argument("--x-max", type=float, required=True)
    p.add_argument("--variants", nargs="*", help="run groups to print (default: all)")
    a = p.parse_args()
    curves = build_curves(
        load_inputs([a.sweep]), "train_time", "nearest", a.grid_step, a.x_min, a.x_max, None
    )
    names = a.variants or sorted(curves)
    grid = next(iter(curves.values())).grid
    print("| variant | seeds | " + " | ".join(f"{t:g}" for t in grid) + " |")
    print("|---|---|" + "---|" * len(grid))
    for v in names:
        c = curves[v]
        print(f"| {v} | {len(c.runs)} | " + " | ".join(f"{x:.3f}" for x in c.values.mean(0)) + " |")


if __name__ == "__main__":
    main()
