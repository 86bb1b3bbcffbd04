"""Turn sweeps (or W&B CSV exports) into the PODS time-to-peak table and plots.

    python -m pods.compare outputs/multirun/2025-06-01/12-00-00 --out results/gsm8k
    python -m pods.compare export.csv --x-col eval/time --rule strict

Inputs may mix run dirs, sweep dirs (run dirs up to 3 levels down) and *.csv
exports. Prints the Markdown table and writes summary.md, summary.csv and
<metric>_vs_{time,step,rollouts}.png into --out. The default rule is the
paper's (99% of the baseline's mean-curve peak, times read on the checkpoint
grid); --rule strict, --threshold, --reference and --time-read say otherwise,
and every output names the rule it used.
"""

import argparse
from pathlib import Path

import pandas as pd

from pods.analysis.curves import (
    DEFAULT_METRIC,
    DEFAULT_NAME_PATTERN,
    X_AXES,
    build_curves,
    load_runs,
    load_wandb_csv,
    summarize,
)
from pods.analysis.peak import REFERENCES, RULES, TIME_READS
from pods.analysis.report import to_markdown, write_report


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m pods.compare", description=__doc__.split("\n")[0])
    p.add_argument("paths", nargs="+", help="run dirs, sweep dirs or W&B panel CSV exports")
    p.add_argument("--out", help="output dir (default: <first input>/compare)")
    p.add_argument(
        "--metric", help=f"metric to compare (default {DEFAULT_METRIC}; for a CSV, its only metric)"
    )
    p.add_argument("--x", choices=X_AXES, help="x axis (default: train_time if present)")
    p.add_argument("--rule", choices=sorted(RULES), default="paper", help="preset rule")
    p.add_argument("--threshold", type=float, help="fraction of the baseline peak to reach")
    p.add_argument("--reference", choices=REFERENCES, help="read times on mean or per-seed curves")
    p.add_argument("--time-read", choices=TIME_READS, help="how a time is read from evals")
    p.add_argument(
        "--grid-step",
        type=float,
        help="checkpoint spacing on the x axis (default: the union of eval x values)",
    )
    p.add_argument("--baseline", help="variant to beat (default: 'none*' or '*grpo*', else first)")
    p.add_argument("--n-boot", type=int, default=2000, help="bootstrap resamples (0: none)")
    p.add_argument("--seed", type=int, default=0, help="seed of the bootstrap")
    p.add_argument("--x-col", help="time column of CSV exports (default: the first column)")
    p.add_argument(
        "--name-pattern",
        default=DEFAULT_NAME_PATTERN,
        help="regex with variant and seed groups for CSV run names (and run dirs without run_info.json)",
    )
    p.add_argument("--band", choices=("minmax", "std"), default="minmax", help="seed band")
    return p.parse_args(argv)


def load_inputs(args: argparse.Namespace) -> pd.DataFrame:
    """One tidy table from every input; CSVs and run dirs may be mixed."""
    csvs = [p for p in args.paths if p.endswith(".csv")]
    dirs = [p for p in args.paths if not p.endswith(".csv")]
    frames = [load_wandb_csv(p, args.metric, args.x_col, args.name_pattern) for p in csvs]
    if dirs:
        frames.append(load_runs(dirs, args.metric or DEFAULT_METRIC, args.name_pattern))
    if len(frames) == 1:
        return frames[0]
    df = pd.concat(frames, ignore_index=True)  # axes some input lacks become NaN: drop them
    df = df.dropna(axis=1, how="any")
    labels = {k: v for f in frames for k, v in f.attrs["x_labels"].items() if k in df}
    df.attrs = {"metric": frames[0].attrs["metric"], "x_labels": labels}
    return df


def default_out(first: str) -> Path:
    path = Path(first)
    return (path.parent if path.is_file() else path) / "compare"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    df = load_inputs(args)
    summary = summarize(
        df,
        x=args.x,
        rule=args.rule,
        threshold=args.threshold,
        reference=args.reference,
        time_read=args.time_read,
        baseline=args.baseline,
        n_boot=args.n_boot,
        seed=args.seed,
        grid_step=args.grid_step,
    )
    # the other axes only get plots; --grid-step is in units of the main axis
    others = [a for a in X_AXES if a in df and a != summary.x]
    extra = {a: build_curves(df, a, summary.rule.time_read) for a in others}
    out = Path(args.out) if args.out else default_out(args.paths[0])
    written = write_report(summary, out, extra, args.band)
    print(to_markdown(summary))
    print("wrote " + ", ".join(str(p) for p in written))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
