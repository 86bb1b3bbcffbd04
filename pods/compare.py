"""Turn sweeps, W&B exports or long tables into the PODS time-to-peak table and plots.

    python -m pods.compare outputs/multirun/2025-06-01/12-00-00 --out results/gsm8k
    python -m pods.compare export.csv --metric eval/accuracy --grid-step 120 --x-max 1800
    python -m pods.compare evals.jsonl --rule strict

Inputs may mix run dirs, sweep dirs (run dirs up to 3 levels down), W&B panel
exports (*.csv) and long tables (*.csv, *.jsonl, *.json with run or variant+seed,
x, value). Prints the Markdown table and writes summary.md, summary.csv and
<metric>_vs_{time,step,rollouts}.png into --out. A row is one experiment: runs
that differ only in the seed (run_info.json's defining config, else config.yaml;
by name for W&B exports and long tables), labelled by the keys rows of one variant
differ in; --pool and --allow-copies read more as one (pods/analysis/groups.py). The default rule is the paper's
as its authors' scripts read runs: each checkpoint T takes the eval nearest to it
however far it lies, seeds are averaged at each T, the threshold is 99% of the
baseline's mean-curve maximum over T > 0 in the window, a time is the first T > 0
at or above it. --rule strict, --threshold, --reference, --time-read and --max-gap
say otherwise, and every output names the rule, the grid and its unit, the window,
the max gap and the runs it used.
A bad or ambiguous input is refused in one line on stderr, exit 2.
"""

import argparse
import re
import sys
import time
from pathlib import Path

from pods.analysis.curves import X_AXES, build_curves, summarize
from pods.analysis.errors import CompareError
from pods.analysis.load import DEFAULT_NAME_PATTERN, load_inputs
from pods.analysis.peak import REFERENCES, RULES, TIME_READS
from pods.analysis.report import to_markdown, write_report

UNIT_HELP = (
    "in the unit of the x column: seconds for run dirs' train_time, steps for --x step, "
    "the CSV's own x column otherwise (W&B's eval/time and train/clock are seconds: 2 min = 120)"
)


class Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit 2, as for every other bad input
        self.exit(2, f"{self.prog}: error: {message}\n")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = Parser(prog="python -m pods.compare", description=__doc__.split("\n")[0])
    p.add_argument("paths", nargs="+", help="run dirs, sweep dirs, W&B panel exports or long tables")
    p.add_argument("--out", help="output dir (default: a new ./compare-<date>-<time>)")
    p.add_argument(
        "--metric", help="metric to compare (default eval/accuracy for run dirs; a file's only metric)"
    )
    p.add_argument("--x", choices=X_AXES, help="x axis (default: train_time if present)")
    p.add_argument("--rule", choices=sorted(RULES), default="paper", help="preset rule")
    p.add_argument("--threshold", type=float, help="fraction of the baseline peak to reach")
    p.add_argument("--reference", choices=REFERENCES, help="read times on mean or per-seed curves")
    p.add_argument(
        "--time-read",
        choices=TIME_READS,
        help="how a checkpoint is read from evals: nearest eval (paper; ties: the earlier), "
        "last eval at-or-before (strict), or interpolate",
    )
    p.add_argument(
        "--max-gap",
        type=float,
        help=f"opt-in cutoff, {UNIT_HELP}: a checkpoint whose eval lies farther than this has no value "
        "(default: none, the authors' read; the summary states it)",
    )
    p.add_argument(
        "--grid-step", type=float, help=f"checkpoint spacing, {UNIT_HELP} (default: every eval's x)"
    )
    p.add_argument("--x-min", type=float, help=f"start of the window, {UNIT_HELP}")
    p.add_argument("--x-max", type=float, help=f"end of the window (the budget), {UNIT_HELP}")
    p.add_argument(
        "--baseline",
        help="variant to beat (default: the one whose runs' config.yaml is plain GRPO: no prefilter, no "
        "dynamic sampling, no down-sampling, n == m; refused, with the list, when none or several are)",
    )
    p.add_argument("--n-boot", type=int, default=2000, help="bootstrap resamples (0: none)")
    p.add_argument("--seed", type=int, default=0, help="seed of the bootstrap")
    p.add_argument("--x-col", help="x column of CSV exports and long tables (default: the first column / x)")
    p.add_argument(
        "--name-pattern",
        default=DEFAULT_NAME_PATTERN,
        help="regex with a seed group (and optionally variant) for run names; default: a seed token "
        "anywhere (-s3, _seed3, seed-3), the variant is the name without it",
    )
    p.add_argument(
        "--pool",
        type=lambda v: tuple(k.strip() for k in v.split(",") if k.strip()),
        default=(),
        metavar="KEY,...",
        help="read runs that differ only in these config keys (and the seed) as one experiment, and rows on "
        "eval sets that differ in them as comparable (default: none; the header names the keys and values)",
    )
    p.add_argument(
        "--allow-copies",
        action="store_true",
        help="keep runs that are one experiment's seed twice (a copied run dir) as two seeds (refused by "
        "default; the header names them)",
    )
    p.add_argument("--band", choices=("minmax", "std"), default="minmax", help="seed band")
    args = p.parse_args(argv)
    if args.n_boot < 0:
        p.error(f"--n-boot {args.n_boot}: give 0 or more")
    return args


def default_out() -> Path:
    """A new folder under the current directory, never one that exists."""
    base = Path.cwd() / f"compare-{time.strftime('%Y%m%d-%H%M%S')}"
    out, k = base, 1
    while out.exists():
        k += 1
        out = base.with_name(f"{base.name}-{k}")
    return out


def run(args: argparse.Namespace) -> int:
    df = load_inputs(args.paths, args.metric, args.x_col, args.name_pattern, args.pool, args.allow_copies)
    summary = summarize(
        df,
        x=args.x,
        rule=args.rule,
        threshold=args.threshold,
        reference=args.reference,
        time_read=args.time_read,
        max_gap=args.max_gap,
        baseline=args.baseline,
        n_boot=args.n_boot,
        seed=args.seed,
        grid_step=args.grid_step,
        x_min=args.x_min,
        x_max=args.x_max,
    )
    # the other axes only get plots, of the evals inside the window on the main axis
    lo, hi = args.x_min if args.x_min is not None else -float("inf"), args.x_max
    inside = df[(df[summary.x] >= lo) & (df[summary.x] <= (hi if hi is not None else float("inf")))]
    others = [a for a in X_AXES if a in df and a != summary.x]
    for a in [a for a in others if df[a].isna().any()]:
        summary.warnings.append(f"no plot against {a}: {int(df[a].isna().sum())} eval record(s) lack it")
    others = [a for a in others if df[a].notna().all()]
    extra = {a: build_curves(inside, a, summary.rule.time_read, max_gap=None) for a in others}
    out = Path(args.out) if args.out else default_out()
    written = write_report(summary, out, extra, args.band)
    print(to_markdown(summary))
    print("wrote " + ", ".join(str(p) for p in written))
    return 0


def main(argv: list[str] | None = None) -> int:
    try:
        args = parse_args(argv)
    except SystemExit as e:  # --help, or a bad option already reported in one line
        return int(e.code or 0)
    try:
        return run(args)
    except (CompareError, OSError, ValueError, KeyError, re.error) as e:
        message = e.args[0] if isinstance(e, KeyError) and e.args else str(e)
        print(f"python -m pods.compare: error: {' '.join(str(message).split())}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
