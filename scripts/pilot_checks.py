"""The pilot's pre-registered checks (results/headline_v2/PLAN.md), one row per candidate setting:

    python scripts/pilot_checks.py /tmp/pilot --grid-step 16 --x-max 240 > results/headline_v2/pilot/checks.md

Candidates are told apart by a config key of each run (default optim.lr); see pods/analysis/pilot.py.
Headline v3 (results/headline_v3/PLAN.md) reads (iv) at 1.35x on runs timed alone:

    python scripts/pilot_checks.py /tmp/pilot --key model.path --grid-step 10 --x-max 240 \
        --max-step-ratio 1.35 --alone /tmp/alone
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from pods.analysis.pilot import Criteria, check_candidate, group_by_config, to_markdown


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("sweep", type=Path)
    p.add_argument("--grid-step", type=float, required=True, help="checkpoint spacing, seconds")
    p.add_argument("--x-max", type=float, required=True, help="the budget, seconds")
    p.add_argument("--key", default="optim.lr", help="config key that tells candidates apart")
    p.add_argument("--max-step-ratio", type=float, default=Criteria.max_step_ratio, help="(iv)'s bound")
    p.add_argument("--alone", type=Path, help="runs timed alone on a device, same --key: (iv) is read there")
    args = p.parse_args()
    crit = dataclasses.replace(Criteria(), max_step_ratio=args.max_step_ratio)
    groups = group_by_config(args.sweep, args.key)
    alone = group_by_config(args.alone, args.key) if args.alone else None
    rows = {
        k: check_candidate(v, args.grid_step, args.x_max, crit, None if alone is None else alone.get(k, []))
        for k, v in sorted(groups.items())
    }
    print(to_markdown(rows, args.key, crit, args.x_max, alone=alone is not None))


if __name__ == "__main__":
    main()
