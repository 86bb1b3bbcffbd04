"""GRESO's own measures (results/greso_v1/PLAN.md), per variant against the baseline (dynamic sampling), from
runs' metrics.jsonl: the paper rule's threshold (0.99 x the baseline's mean-curve peak over T > 0) and the first
checkpoint T* at which each variant's mean curve reaches it; the rollouts generated and the generation seconds up
to T* (each run's training records with train_time <= T*, mean over seeds) and over the whole window; the share of
drawn prompts skipped before rollout; the effective-prompt ratio (groups kept after dynamic sampling's
zero-variance drop / groups rolled out); and the paired final gap against the baseline (each run's mean of its
last three checkpoints, paired by seed; mean and 95% bootstrap interval over pairs, 2,000 resamples, seed 0).

    python scripts/greso_reads.py /tmp/gv1/confirm --baseline dynamic_sampling+none-n16-m16 --grid-step 10 --x-max 360
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pods.analysis.curves import build_curves  # noqa: E402
from pods.analysis.load import find_run_dirs, load_runs, run_label  # noqa: E402
from pods.analysis.peak import after_start, mean_curve, peak, time_to_threshold  # noqa: E402
from pods.tracking import read_metrics  # noqa: E402


def upto(run: Path, t_max: float) -> dict:
    """Totals of a run's training records with train_time <= t_max."""
    train = [
        r for r in read_metrics(run / "metrics.jsonl") if r["kind"] == "train" and r["train_time"] <= t_max
    ]
    total = lambda k: float(sum(r.get(k, 0) for r in train))  # noqa: E731
    drawn, skipped = total("prefilter/prompts_drawn"), total("prefilter/skipped")
    rolled = drawn - skipped
    return {"rollouts": total("rollout/rollouts"), "generation s": total("timing/generation"),
            "skipped share": skipped / drawn if drawn else float("nan"),
            "effective ratio": 1 - total("dynamic_sampling/dropped_zero_var") / rolled if rolled else float("nan")}  # fmt: skip


def run_dirs_by_name(runs: list[Path]) -> dict[str, Path]:
    """Each run dir under the name the curves give it: run_info.json's `name` (the directory's own name is the
    launcher's, e.g. `seed-6105_arm-...`), else the directory's name, as pods.analysis.load reads it; a name
    held by two dirs is refused (the totals would come from one of them)."""
    out: dict[str, Path] = {}
    for d in runs:
        name = run_label(d)
        if name in out:
            sys.exit(f"two run dirs hold run {name!r}: {out[name]} and {d}; read one of them")
        out[name] = d
    return out


def paired_gap(
    base: dict[str, float], var: dict[str, float], seed: int = 0
) -> tuple[float, float, float, int]:
    """Mean of var - base over the seeds both have, and its 95% bootstrap interval; with the number of pairs."""
    keys = sorted(set(base) & set(var))
    d = np.array([var[k] - base[k] for k in keys])
    if len(d) == 0:
        return float("nan"), float("nan"), float("nan"), 0
    boot = d[np.random.default_rng(seed).integers(0, len(d), (2000, len(d)))].mean(1)
    lo, hi = np.quantile(boot, [0.025, 0.975], method="inverted_cdf")
    return float(d.mean()), float(lo), float(hi), len(d)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("dirs", nargs="+", type=Path)
    p.add_argument("--baseline", default="dynamic_sampling+none-n16-m16")
    p.add_argument("--grid-step", type=float, default=10)
    p.add_argument("--x-max", type=float, default=360)
    p.add_argument("--x", default="train_time")
    a = p.parse_args()
    runs = [d for x in a.dirs for d in find_run_dirs(x)]
    by_name = run_dirs_by_name(runs)  # before the curves: a run held by two dirs is this read's refusal
    curves = build_curves(load_runs(runs), a.x, "nearest", a.grid_step, 0.0, a.x_max)
    if a.baseline not in curves:
        sys.exit(f"no {a.baseline} runs in {' '.join(map(str, a.dirs))}; variants: {', '.join(curves)}")
    base = curves[a.baseline]
    thr = 0.99 * float(peak(after_start(base.grid, mean_curve(base.values))))
    finals = {v: {re.sub(r".*-s(\d+)$", r"\1", n): float(c.values[i, -3:].mean()) for i, n in enumerate(c.runs)}
              for v, c in curves.items()}  # fmt: skip
    print(f"Threshold {thr:.4f} (0.99 x {a.baseline}'s mean-curve peak over T > 0); T* = first checkpoint its mean "
          "curve reaches it; totals are means over seeds.\n")  # fmt: skip
    print(
        "| variant | seeds | T* s | rollouts to T* | generation s to T* | rollouts (window) | generation s "
        "(window) | skipped before rollout | effective-prompt ratio | final gap vs baseline [95% CI] (pairs) |"
    )
    print("|" + "---|" * 10)
    for v, c in curves.items():
        t = float(time_to_threshold(c.grid, after_start(c.grid, mean_curve(c.values)), thr))
        lost = [n for n in c.runs if n not in by_name]
        if lost:
            sys.exit(f"{v}: no run dir found for run(s) {', '.join(lost)}; the totals would be nan")
        at = [upto(by_name[n], t) for n in c.runs] if np.isfinite(t) else []
        whole = [upto(by_name[n], float("inf")) for n in c.runs]
        mean = lambda rows, k: float(np.mean([r[k] for r in rows])) if rows else float("nan")  # noqa: E731
        gap = paired_gap(finals[a.baseline], finals[v])
        gap_s = "-" if v == a.baseline else f"{gap[0]:+.4f} [{gap[1]:+.4f}, {gap[2]:+.4f}] ({gap[3]})"
        print(f"| {v} | {len(c.runs)} | {t:g} | {mean(at, 'rollouts'):,.0f} | {mean(at, 'generation s'):.1f} | "
              f"{mean(whole, 'rollouts'):,.0f} | {mean(whole, 'generation s'):.1f} | {mean(whole, 'skipped share'):.1%} "
              f"| {mean(whole, 'effective ratio'):.3f} | {gap_s} |")  # fmt: skip


if __name__ == "__main__":
    main()
