"""The reads of headline v3's README that no other script prints: per call, each arm's step cost shared and
alone (mean `timing/step` and `timing/generation` over steps 3 onward; PODS/GRPO ratios), and the per-run
take-off table (which runs reached 0.70 in the window, when, and the others' final accuracy), with each run's
final eval completion length split by whether it took off.

    for c in A B; do mkdir -p /tmp/hv3r/alone$c && tar xzf results/headline_v3/confirm$c/alone.tgz -C /tmp/hv3r/alone$c; done
    mkdir -p /tmp/hv3r/pilot && tar xzf results/headline_v3/pilot/pilot.tgz -C /tmp/hv3r/pilot   # and confirm.tgz -> /tmp/hv3r/A, /B
    python scripts/headline_v3_reads.py --call A=/tmp/hv3r/A,/tmp/hv3r/aloneA/alone \\
        --call B=/tmp/hv3r/B,/tmp/hv3r/aloneB/alone --pilot /tmp/hv3r/pilot/pilot > results/headline_v3/confirm/reads.md

With `--sweep NAME=DIR` instead (calls without runs timed alone: phases 3 and 4), only the take-off table, for
every variant in each sweep:

    python scripts/headline_v3_reads.py --sweep A=/tmp/hv3r/AA/arms --sweep B=/tmp/hv3r/AB/arms > results/headline_v3/arms/takeoff.md
"""

from __future__ import annotations

import argparse
import json
import statistics as st
from pathlib import Path

from pods.analysis.load import find_run_dirs, read_jsonl
from pods.analysis.pilot import GRPO, PODS, late_mean, train_records

TAKEOFF = 0.70


def arm_mean(dirs: list[Path], arm: str, key: str) -> float:
    """Mean over the arm's runs of each run's mean `key` over steps 3 onward."""
    return st.mean(late_mean(r, key) for r in train_records(dirs, arm))


def step_costs(name: str, shared: Path, alone: Path) -> str:
    cells = [name]
    for where in (shared, alone):
        dirs = find_run_dirs(where)
        g, p = arm_mean(dirs, GRPO, "timing/step"), arm_mean(dirs, PODS, "timing/step")
        gg, pg = arm_mean(dirs, GRPO, "timing/generation"), arm_mean(dirs, PODS, "timing/generation")
        cells += [f"{g:.3f} / {p:.3f} s", f"{p / g:.3f}", f"{pg / gg:.3f}"]
    return "| " + " | ".join(cells) + " |"


def runs(sweep: Path, arm: str) -> list[tuple[str, float | None, float, float]]:
    """(run, time it first reached TAKEOFF or None, final accuracy, final eval mean length) per run of arm."""
    out = []
    for d in find_run_dirs(sweep):
        if json.loads((d / "run_info.json").read_text()).get("variant") != arm:
            continue
        ev = [r for r in read_jsonl(d / "metrics.jsonl") if r.get("kind") == "eval"]
        up = next((r["train_time"] for r in ev if r["eval/accuracy"] >= TAKEOFF), None)
        out.append((d.name, up, ev[-1]["eval/accuracy"], ev[-1]["eval/mean_length"]))
    return out


def variants(sweep: Path) -> list[str]:
    return sorted({json.loads((d / "run_info.json").read_text())["variant"] for d in find_run_dirs(sweep)})


def takeoff_table(cols: str, groups: list[tuple[str, str, list, bool]], lengths_of: str) -> None:
    """The take-off table, a row per (name, arm, its runs, whether their lengths count), then the final eval
    lengths of the counted runs split by take-off."""
    print(f"Runs that took off (reached {TAKEOFF:.2f}) within the window:\n")
    print(f"| {cols} | runs | took off | time to 0.70 of those (s, sorted) | final accuracy of the others |")
    print("|---|---|---|---|---|---|")
    lengths: dict[bool, list[float]] = {True: [], False: []}
    for name, arm, rs, counted in groups:
        for r in rs if counted else []:
            lengths[r[1] is not None].append(r[3])
        up = sorted(int(r[1]) for r in rs if r[1] is not None)
        rest = ", ".join(f"{r[2]:.2f}" for r in rs if r[1] is None)
        print(f"| {name} | {arm} | {len(rs)} | {len(up)}/{len(rs)} | {', '.join(map(str, up))} | {rest} |")
    print(f"\nFinal eval mean completion length (tokens), {lengths_of}:\n")
    for took in (True, False):
        if vals := lengths[took]:
            label = "took off" if took else "did not"
            print(f"- {label}: {len(vals)} runs, {min(vals):.1f}-{max(vals):.1f} (mean {st.mean(vals):.1f})")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--call", action="append", default=[], metavar="NAME=SHARED,ALONE")
    p.add_argument("--sweep", action="append", default=[], metavar="NAME=DIR", help="take-off table only")
    p.add_argument("--pilot", type=Path, help="the pilot's sweep (its shipped build's runs are read)")
    p.add_argument("--pilot-build", default="b7")
    a = p.parse_args()
    if bool(a.call) == bool(a.sweep):
        p.error("give --call (with runs timed alone) or --sweep (take-off table only), not both")
    if a.sweep:
        sweeps = {x.split("=", 1)[0]: Path(x.split("=", 1)[1]) for x in a.sweep}
        groups = [(n, arm, runs(sw, arm), True) for n, sw in sweeps.items() for arm in variants(sw)]
        takeoff_table("sweep | variant", groups, "every run")
        return
    calls = {c.split("=", 1)[0]: [Path(x) for x in c.split("=", 1)[1].split(",")] for c in a.call}
    print("Step cost, mean over steps 3 onward (GRPO 16/16 / PODS 64/16):\n")
    print(
        "| call | shared: GRPO / PODS | ratio | generation ratio | alone: GRPO / PODS | ratio | generation ratio |"
    )
    print("|---|---|---|---|---|---|---|")
    for name, (shared, alone) in calls.items():
        print(step_costs(name, shared, alone))
    pilot = f"pilot ({a.pilot_build})"  # its shipped build's runs only; their lengths are not counted
    groups = [
        (pilot, arm, [r for r in runs(a.pilot, arm) if f"cands-{a.pilot_build}_" in r[0]], False)
        for arm in ((GRPO, PODS) if a.pilot else ())
    ]
    groups += [(n, arm, runs(shared, arm), True) for n, (shared, _) in calls.items() for arm in (GRPO, PODS)]
    print()
    takeoff_table("call | arm", groups, "confirmatory calls, both arms")


if __name__ == "__main__":
    main()
