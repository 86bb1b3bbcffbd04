"""What each pytest-xdist worker did when, from a PODS_TEST_TIMELINE file (tests/conftest.py):

    PODS_TEST_TIMELINE=/tmp/tl.tsv python -m pytest -q -n 3
    python scripts/test_timeline.py /tmp/tl.tsv [--png timeline.png] [--top 10]

Prints, per worker, its busy seconds, its units (a module, or tests/slurm/'s two) in the order it ran them and
when it went idle; then the suite's span, the share of worker-seconds busy, and the slowest units and tests."""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository's tests/ (its xdist units)
from tests.conftest import xdist_unit  # noqa: E402


def read(path: Path) -> list[tuple[str, float, float, str]]:
    rows = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        parts = line.split("\t")
        if len(parts) != 4:
            raise SystemExit(
                f"{path}:{n}: expected worker, start, end, node id (tab-separated); got {line!r}"
            )
        rows.append((parts[0], float(parts[1]), float(parts[2]), parts[3]))
    if not rows:
        raise SystemExit(f"{path}: no tests recorded")
    return rows


def units_by_worker(rows):
    """{worker: [(unit, start, end, seconds in its tests)]} in the order each worker ran its units."""
    out: dict[str, list] = defaultdict(list)
    for worker, start, end, nodeid in sorted(rows, key=lambda r: r[1]):
        unit = xdist_unit(nodeid)
        units = out[worker]
        if units and units[-1][0] == unit:
            u, s, _, busy = units[-1]
            units[-1] = (u, s, end, busy + end - start)
        else:
            units.append((unit, start, end, end - start))
    return dict(out)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("timeline", type=Path)
    ap.add_argument("--png", type=Path, help="draw each worker's units over time")
    ap.add_argument("--top", type=int, default=10)
    a = ap.parse_args(argv)
    rows = read(a.timeline)
    t0 = min(r[1] for r in rows)
    t1 = max(r[2] for r in rows)
    span = t1 - t0
    by_worker = units_by_worker(rows)
    busy_all = 0.0
    for worker in sorted(by_worker):
        units = by_worker[worker]
        busy = sum(u[3] for u in units)
        busy_all += busy
        print(f"## {worker}: busy {busy:.0f} s, idle from {units[-1][2] - t0:.0f} s of {span:.0f} s")
        for unit, s, e, b in units:
            if b >= 10:
                print(f"  {s - t0:7.0f} -> {e - t0:7.0f} s  {b:6.0f} s  {unit}")
        short = [u for u in units if u[3] < 10]
        if short:
            print(f"  ... and {len(short)} units under 10 s each ({sum(u[3] for u in short):.0f} s in all)")
    print(
        f"\nspan {span:.0f} s; {len(by_worker)} workers busy {busy_all:.0f} of {span * len(by_worker):.0f} worker-s "
        f"({busy_all / (span * len(by_worker)):.0%})"
    )
    per_unit: dict[str, float] = defaultdict(float)  # a unit runs on one worker: its busy seconds there
    for units in by_worker.values():
        for unit, _, _, busy in units:
            per_unit[unit] += busy
    print(f"\nslowest {a.top} units:")
    for unit, sec in sorted(per_unit.items(), key=lambda kv: -kv[1])[: a.top]:
        print(f"  {sec:7.1f} s  {unit}")
    print(f"\nslowest {a.top} tests:")
    for _, s, e, nodeid in sorted(rows, key=lambda r: r[1] - r[2])[: a.top]:
        print(f"  {e - s:7.1f} s  {nodeid}")
    if a.png:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        workers = sorted(by_worker)
        fig, ax = plt.subplots(figsize=(12, 1 + 0.8 * len(workers)))
        for i, worker in enumerate(workers):
            for unit, s, e, _ in by_worker[worker]:
                ax.broken_barh([(s - t0, e - s)], (i - 0.4, 0.8), edgecolor="k", linewidth=0.3)
                if e - s >= 0.04 * span:
                    ax.text(s - t0 + 2, i, Path(unit.rstrip("/")).name[:28], va="center", fontsize=7)
        ax.set_yticks(range(len(workers)), workers)
        ax.set_xlabel("seconds since the first test started")
        fig.tight_layout()
        fig.savefig(a.png, dpi=120)
        print(f"wrote {a.png}")


if __name__ == "__main__":
    main()
