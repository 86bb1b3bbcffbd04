"""Time-to-threshold speedups read block by block (pods/analysis/blocks.py), for sweeps whose blocks do not
share a starting point (e.g. one GPU call each, each building its own policy). Exploratory beside
`pods.compare`, which pools all seeds:

    python scripts/blocked_compare.py --block confirm1=/tmp/confirm1 --block confirm2=/tmp/confirm2 \
        --baseline none-n16-m16 --grid-step 16 --x-min 0 --x-max 240 > blocked.md
"""

from __future__ import annotations

import argparse
import sys

from pods.analysis.blocks import blocked_summary, gaps_markdown, to_markdown
from pods.analysis.curves import build_curves
from pods.analysis.errors import CompareError
from pods.analysis.load import load_inputs
from pods.analysis.peak import RULES, make_rule


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument(
        "--block",
        action="append",
        required=True,
        metavar="NAME=PATH",
        help="a block: its name and a sweep dir (repeat; at least two)",
    )
    p.add_argument("--baseline", required=True, help="the variant to beat (a run-group name)")
    p.add_argument("--rule", choices=sorted(RULES), default="paper")
    p.add_argument("--x", default="train_time", choices=("train_time", "step", "rollouts"))
    p.add_argument("--grid-step", type=float)
    p.add_argument("--x-min", type=float)
    p.add_argument("--x-max", type=float)
    p.add_argument("--n-boot", type=int, default=2000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--sign-flip", action="store_true", help="exact sign-flip p of the paired gaps")
    args = p.parse_args(argv)
    try:
        pairs = [b.split("=", 1) for b in args.block]
        if any(len(x) != 2 or not x[0] for x in pairs):
            raise CompareError("--block takes NAME=PATH")
        rule = make_rule(args.rule, None, None, None, None)
        blocks = {
            name: build_curves(
                load_inputs([path]),
                args.x,
                rule.time_read,
                args.grid_step,
                args.x_min,
                args.x_max,
                rule.max_gap,
            )
            for name, path in pairs
        }
        rows = blocked_summary(blocks, args.baseline, rule, args.n_boot, args.seed)
    except CompareError as e:
        print(f"blocked_compare: error: {e}", file=sys.stderr)
        return 2
    print(to_markdown(rows, args.baseline, rule, args.n_boot, args.seed))
    print(gaps_markdown(blocks, args.baseline, args.sign_flip), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
