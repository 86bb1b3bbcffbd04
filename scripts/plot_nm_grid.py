"""Speedup against n (at m=16) and m (at n=64) from `pods.compare` summaries (summary.csv), as the PODS
paper's n/m ablation plots it. Run groups must be named <selector>-n<N>-m<M> (pods' run names).

    python scripts/plot_nm_grid.py results/headline_v2/grid/paper/summary.csv \
        --extra "results/headline_v2/confirm1/paper/summary.csv:other call" --out nm_grid.png

--extra adds points from another summary (drawn hollow, labelled), e.g. a point that ran in another call.
"""

from __future__ import annotations

import argparse
import re

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

NAME = re.compile(r"^(?P<sel>.+)-n(?P<n>\d+)-m(?P<m>\d+)$")


def points(csv: str, selector: str) -> pd.DataFrame:
    df = pd.read_csv(csv)
    rows = []
    for _, r in df.iterrows():
        hit = NAME.match(str(r["variant"]))
        if hit and hit["sel"] == selector and r["variant"] != r["baseline"]:
            # a variant that never reaches the threshold has no time (NaN in the CSV): speedup 0
            sp = 0.0 if pd.isna(r["speedup"]) else r["speedup"]
            rows.append(
                {
                    "n": int(hit["n"]),
                    "m": int(hit["m"]),
                    "speedup": sp,
                    "lo": r["speedup_lo"],
                    "hi": r["speedup_hi"],
                }
            )
    return pd.DataFrame(rows, columns=["n", "m", "speedup", "lo", "hi"])


def draw(ax, df: pd.DataFrame, key: str, hollow: bool, label: str) -> None:
    df = df.sort_values(key)
    y = df["speedup"].to_numpy(float)
    err = np.array([np.clip(y - df["lo"], 0, None), np.clip(df["hi"] - y, 0, None)])
    ax.errorbar(
        df[key],
        y,
        yerr=err,
        fmt="o" if not hollow else "s",
        mfc="none" if hollow else None,
        capsize=4,
        linestyle="-" if not hollow else "none",
        label=label,
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("summary")
    p.add_argument("--extra", action="append", default=[], help="CSV:label (hollow points)")
    p.add_argument("--selector", default="max_variance")
    p.add_argument("--m-fixed", type=int, default=16)
    p.add_argument("--n-fixed", type=int, default=64)
    p.add_argument("--out", required=True)
    args = p.parse_args()
    main_pts = points(args.summary, args.selector)
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    for ax, key, fixed, other in ((axes[0], "n", args.m_fixed, "m"), (axes[1], "m", args.n_fixed, "n")):
        draw(ax, main_pts[main_pts[other] == fixed], key, False, "this call")
        for spec in args.extra:
            path, _, label = spec.partition(":")
            ex = points(path, args.selector)
            ex = ex[ex[other] == fixed]
            if len(ex):
                draw(ax, ex, key, True, label or path)
        ax.axhline(1.0, color="grey", lw=0.8, ls="--")
        ax.set_xscale("log", base=2)
        ax.set_xlabel(f"{key} ({other} = {fixed})")
        ax.set_title(f"speedup vs {key}; 0 = never reached")
    axes[0].set_ylabel("time-to-threshold speedup over GRPO 16/16 (95% CI)")
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(args.out, dpi=120)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
