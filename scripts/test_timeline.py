"""What each pytest-xdist worker did when, from a PODS_TEST_TIMELINE file (tests/conftest.py):

    PODS_TEST_TIMELINE=/tmp/tl.tsv python -m pytest -q -n 4
    python scripts/test_timeline.py /tmp/tl.tsv [--png timeline.png] [--top 10]

Prints, per worker, its busy seconds, its units (a module, or tests/slurm/'s two) in the order it ran them and
when it went idle; then the suite's span, the share of worker-seconds busy, and the slowest units and tests.
Where the lines carry CPU seconds (the worker's own and its waited-for child processes'), also the CPU each unit
cost; where they carry outcomes, their counts and every test that failed or errored, with when and on which
worker; where <timeline>.load exists (the machine's busy cores every few seconds), the busy cores per minute and
the units running then."""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository's tests/ (its xdist units)
from tests.conftest import xdist_unit  # noqa: E402

OUTCOMES = ("passed", "failed", "skipped", "error")


def read(path: Path) -> tuple[list[tuple[str, float, float, str]], dict[str, float], dict[str, str]]:
    """The rows (worker, start, end, node id) and, where the lines carry them, each test's CPU seconds and
    outcome."""
    rows, cpu, outcome = [], {}, {}
    for n, line in enumerate(path.read_text().splitlines(), 1):
        parts = line.split("\t")
        try:
            if len(parts) not in (4, 6, 7) or (len(parts) == 7 and parts[6] not in OUTCOMES):
                raise ValueError
            rows.append((parts[0], float(parts[1]), float(parts[2]), parts[3]))
            if len(parts) >= 6:
                cpu[parts[3]] = float(parts[4]) + float(parts[5])
            if len(parts) == 7:
                outcome[parts[3]] = parts[6]
        except ValueError:
            raise SystemExit(
                f"{path}:{n}: expected worker, start, end, node id[, own CPU s, children's CPU s[, outcome: "
                f"{'/'.join(OUTCOMES)}]] (tab-separated); got {line!r}"
            ) from None
    if not rows:
        raise SystemExit(f"{path}: no tests recorded")
    return rows, cpu, outcome


def read_load(path: Path) -> list[tuple[float, float]]:
    """(time, busy cores) samples of <timeline>.load; [] if there is no such file."""
    if not path.exists():
        return []
    out = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        try:
            t, busy = line.split("\t")
            out.append((float(t), float(busy)))
        except ValueError:
            raise SystemExit(f"{path}:{n}: expected time, busy cores (tab-separated); got {line!r}") from None
    return out


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
    rows, cpu, outcome = read(a.timeline)
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
    if cpu:
        unit_cpu: dict[str, float] = defaultdict(float)
        for nodeid, c in cpu.items():
            unit_cpu[xdist_unit(nodeid)] += c
        total = sum(unit_cpu.values())
        print(
            f"\nCPU seconds (the workers' own and their waited-for processes'): {total:.0f} in all; costliest {a.top} units:"
        )
        for unit, c in sorted(unit_cpu.items(), key=lambda kv: -kv[1])[: a.top]:
            print(f"  {c:7.1f} CPU-s in {per_unit[unit]:6.1f} s  {unit}")
    if outcome:
        bad = [(r[2], r[0], r[3]) for r in rows if outcome.get(r[3]) in ("failed", "error")]
        counts = ", ".join(f"{sum(o == k for o in outcome.values())} {k}" for k in OUTCOMES)
        print(f"\noutcomes: {counts}")
        for end, worker, nodeid in sorted(bad):
            print(f"  {outcome[nodeid]} at {end - t0:.0f} s on {worker}: {nodeid}")
    load = read_load(a.timeline.with_name(a.timeline.name + ".load"))
    if load:
        print("\nbusy cores per minute (the machine's, all processes), and the units running then:")
        for m in range(int(span // 60) + 1):
            lo, hi = t0 + 60 * m, t0 + 60 * (m + 1)
            got = [b for t, b in load if lo < t <= hi]
            if not got:
                continue
            running = sorted({xdist_unit(r[3]) for r in rows if r[1] < hi and r[2] > lo and r[2] - r[1] >= 5})
            print(f"  {60 * m:5d} s  {sum(got) / len(got):4.2f}  {', '.join(running)[:150]}")
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
