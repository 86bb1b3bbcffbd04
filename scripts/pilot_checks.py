"""The pilot's pre-registered checks (results/headline_v2/PLAN.md), one row per candidate setting:

    python scripts/pilot_checks.py /tmp/pilot --grid-step 16 --x-max 240 > results/headline_v2/pilot/checks.md

Candidates are told apart by a config key of each run (default optim.lr); see pods/analysis/pilot.py.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from pods.analysis.pilot import Criteria, check_candidate, group_by_config, to_markdown


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("sweep", type=Path)
    p.add_argument("--grid-step", type=float, required=True, help="checkpoint spacing, seconds")
    p.add_argument("--x-max", type=float, required=True, help="the budget, seconds")
    p.add_argument("--key", default="optim.lr", help="config key that tells candidates apart")
    args = p.parse_args()
    crit = Criteria()
    groups = group_by_config(args.sweep, args.key)
    rows = {k: check_candidate(v, args.grid_step, args.x_max, crit) for k, v in sorted(groups.items())}
    print(to_markdown(rows, args.key, crit, args.x_max))


if __name__ == "__main__":
    main()
