"""Check results/README.md against HEAD: the files and commands each entry names exist, and which entries'
code changed since their commit (the rule: bench/results_index.py). Prints a table; exits 1 when an entry's
files are gone or it says current but is stale.

    PYTHONPATH=. python scripts/check_results_index.py [--index results/README.md]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bench.results_index import check, git, report


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--index", default="results/README.md")
    args = ap.parse_args()
    index = Path(args.index).resolve()
    repo = Path(git(index.parent, "rev-parse", "--show-toplevel").strip())
    entries = check(index, repo)
    print(report(entries), end="")
    problems = [e for e in entries if e.problem]
    for e in problems:
        print(f"{e.path}: the index says {e.status!r}; at HEAD: {e.verdict}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
