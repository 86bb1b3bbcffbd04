"""Every seed's learning curve, one panel per arm (results/headline_v4/PLAN.md), so a reader sees at a glance
whether any run takes off:

    python scripts/plot_seed_curves.py /tmp/hv4r/A /tmp/hv4r/B /tmp/hv4r/C --grid-step 10 --x-max 300 \
        --out results/headline_v4/confirm/seed_curves.png

Each run is read on the checkpoint grid as `pods.compare` reads it (nearest eval); thin lines are seeds (one
colour per call when several sweeps are given), the thick black line the arm's mean curve over all of them.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from pods.analysis.curves import build_curves  # noqa: E402
from pods.analysis.load import find_run_dirs, load_runs  # noqa: E402


def arm_curves(
    sweeps: list[Path], grid_step: float, x_max: float
) -> dict[str, list[tuple[int, np.ndarray, np.ndarray]]]:
    """variant -> [(sweep index, grid, (S, G) values)], one entry per sweep holding that variant."""
    out: dict[str, list] = {}
    for i, sweep in enumerate(sweeps):
        runs = find_run_dirs(sweep)
        if not runs:
            raise SystemExit(f"no run dir under {sweep}")
        for variant, c in build_curves(
            load_runs(runs), "train_time", "nearest", grid_step, 0.0, x_max
        ).items():
            out.setdefault(variant, []).append((i, c.grid, c.values))
    return out


def plot(curves: dict, labels: list[str], out: Path, metric: str = "eval/accuracy") -> None:
    arms = sorted(curves, key=lambda v: (v != "none-n16-m16", v))  # GRPO 16/16 first
    cols = min(len(arms), 3)
    rows = -(-len(arms) // cols)
    fig, axes = plt.subplots(
        rows, cols, figsize=(5 * cols, 3.6 * rows), sharex=True, sharey=True, squeeze=False
    )
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, arm in zip(axes.flat, arms, strict=False):
        all_vals = []
        for i, grid, vals in curves[arm]:
            for k, v in enumerate(vals):
                ax.plot(
                    grid,
                    v,
                    color=colours[i % len(colours)],
                    lw=0.8,
                    alpha=0.6,
                    label=labels[i] if k == 0 else None,
                )
            all_vals.append(vals)
        grid = curves[arm][0][1]
        ax.plot(grid, np.concatenate(all_vals).mean(axis=0), color="black", lw=2.2, label="mean")
        ax.set_title(f"{arm} ({sum(len(v) for v in all_vals)} seeds)", fontsize=10)
        ax.grid(alpha=0.3)
    for ax in axes.flat[len(arms) :]:
        ax.set_visible(False)
    for ax in axes[-1]:
        ax.set_xlabel("training clock (s)")
    for ax in axes[:, 0]:
        ax.set_ylabel(metric)
    axes.flat[0].legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("sweeps", type=Path, nargs="+", help="one directory of runs per call")
    p.add_argument("--grid-step", type=float, required=True)
    p.add_argument("--x-max", type=float, required=True)
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    labels = [s.name for s in args.sweeps]
    if len(set(labels)) < len(labels):  # calls unpacked as <call>/confirm: name them by their call
        labels = [f"{s.parent.name}/{s.name}" for s in args.sweeps]
    plot(arm_curves(args.sweeps, args.grid_step, args.x_max), labels, args.out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
