"""Pre-registered checks that a setting can time a learning curve (results/headline_v2/PLAN.md).

A time-to-peak comparison means something only on the rising part of the baseline's curve. A pilot runs
candidate settings (e.g. learning rates) with GRPO 16/16 and PODS 64/16, and a candidate passes when:
  (i)   at the first checkpoint after 0, GRPO's mean curve has covered at most 40% of its rise from start
        to peak (peak = the maximum over T > 0 in the window);
  (ii)  GRPO's mean-curve peak lies in the second half of the window (T > x_max / 2);
  (iii) at n=16, at least 30% of groups have zero reward variance (mean over GRPO's runs and steps 3+);
  (iv)  a PODS 64/16 step costs at most 1.15x a GRPO 16/16 step (mean timing/step, steps 3+); headline v3
        reads it at 1.35x (the paper's own ratio) on runs timed alone on a GPU (`alone=`), where given;
  (v)   GRPO's mean curve rises visibly: peak (over T > 0) minus start is at least 0.05. Without it a flat
        curve passes (i) and (ii) on noise (pilot 1 of results/headline_v2 did: rises of 0.003-0.011).
Among passing candidates the one with the largest GRPO rise (peak - start) is chosen: the most signal
against the same eval noise. Curves are read as `pods.compare --rule paper` reads them (nearest eval).
"""

from __future__ import annotations

import json
import statistics as st
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from omegaconf import OmegaConf

from pods.analysis.curves import build_curves
from pods.analysis.errors import CompareError
from pods.analysis.load import find_run_dirs, load_runs, read_jsonl
from pods.analysis.peak import mean_curve

GRPO, PODS = "none-n16-m16", "max_variance-n64-m16"


@dataclass(frozen=True)
class Criteria:
    max_first_rise: float = 0.40  # (i)
    peak_after: float = 0.5  # (ii) fraction of the window the peak must lie beyond
    min_zero_var: float = 0.30  # (iii)
    max_step_ratio: float = 1.15  # (iv)
    min_rise: float = 0.05  # (v) peak minus start of GRPO's mean curve


def rise_at_first_checkpoint(grid: np.ndarray, curve: np.ndarray) -> float:
    """Share of the start-to-peak rise covered at the first checkpoint T > 0 (peak over T > 0)."""
    after = grid > 0
    start, first, top = curve[0], curve[after][0], np.nanmax(curve[after])
    return float((first - start) / (top - start)) if top > start else np.nan


def peak_time(grid: np.ndarray, curve: np.ndarray) -> float:
    """The first checkpoint T > 0 at which the curve is at its maximum over T > 0."""
    after = np.flatnonzero(grid > 0)
    return float(grid[after[np.nanargmax(curve[after])]])


def late_mean(records: list[dict], key: str, skip: int = 2) -> float:
    """Mean of `key` over a run's train records after the first `skip` (they carry warm-ups)."""
    vals = [r[key] for r in records if r.get("kind") == "train" and r.get(key) is not None][skip:]
    return st.mean(vals) if vals else np.nan


def train_records(run_dirs: list[Path], variant: str) -> list[list[dict]]:
    """The metrics records of each run of `variant` (named in its run_info.json)."""
    variant_of = lambda d: json.loads((d / "run_info.json").read_text()).get("variant")  # noqa: E731
    return [read_jsonl(d / "metrics.jsonl") for d in run_dirs if variant_of(d) == variant]


def step_ratio(run_dirs: list[Path]) -> float:
    """PODS 64/16's mean step time over GRPO 16/16's (each run's mean over steps 3+); nan without both."""
    recs = {v: train_records(run_dirs, v) for v in (GRPO, PODS)}
    if not recs[GRPO] or not recs[PODS]:
        return np.nan
    step = lambda rs: st.mean(late_mean(r, "timing/step") for r in rs)  # noqa: E731
    return step(recs[PODS]) / step(recs[GRPO])


def check_candidate(
    run_dirs: list[Path], grid_step: float, x_max: float, crit: Criteria, alone: list[Path] | None = None
) -> dict:
    """The five numbers, their pass/fail, and GRPO's rise for one candidate's runs. With `alone` (runs of
    the same candidate, each alone on a device), (iv) is read on those; `alone=[]` means not measured, so
    (iv) fails."""
    curves = build_curves(load_runs(run_dirs), "train_time", "nearest", grid_step, 0.0, x_max)
    if GRPO not in curves or PODS not in curves:
        raise CompareError(f"a candidate needs {GRPO} and {PODS} runs; found {', '.join(curves)}")
    g = curves[GRPO]
    mc = mean_curve(g.values)
    grpo_rec = train_records(run_dirs, GRPO)
    row = {
        "grpo_seeds": len(g.runs),
        "pods_seeds": len(curves[PODS].runs),
        "start": float(mc[0]),
        "peak": float(np.nanmax(mc[g.grid > 0])),
        "first_rise": rise_at_first_checkpoint(g.grid, mc),
        "peak_time": peak_time(g.grid, mc),
        "zero_var": st.mean(late_mean(r, "selector/all_zero_var_frac") for r in grpo_rec),
        "step_ratio": step_ratio(run_dirs if alone is None else alone),
    }
    row["rise"] = row["peak"] - row["start"]
    row["i"] = bool(row["first_rise"] <= crit.max_first_rise)
    row["ii"] = bool(row["peak_time"] > crit.peak_after * x_max)
    row["iii"] = bool(row["zero_var"] >= crit.min_zero_var)
    row["iv"] = bool(row["step_ratio"] <= crit.max_step_ratio)  # nan (not measured) fails
    row["v"] = bool(row["rise"] >= crit.min_rise)
    row["passes"] = all(row[k] for k in ("i", "ii", "iii", "iv", "v"))
    return row


def group_by_config(sweep: Path, key: str) -> dict[str, list[Path]]:
    """Run dirs under `sweep` grouped by the value of a config key (from each run's config.yaml)."""
    groups: dict[str, list[Path]] = {}
    for d in find_run_dirs(sweep):
        cfg = OmegaConf.load(d / "config.yaml")
        groups.setdefault(str(OmegaConf.select(cfg, key)), []).append(d)
    if not groups:
        raise CompareError(f"no run dir under {sweep}")
    return groups


def choose(rows: dict[str, dict]) -> str | None:
    """The passing candidate with the largest GRPO rise, or None."""
    passing = {k: r for k, r in rows.items() if r["passes"]}
    return max(passing, key=lambda k: passing[k]["rise"]) if passing else None


def to_markdown(rows: dict[str, dict], key: str, crit: Criteria, x_max: float, alone: bool = False) -> str:
    where = " (alone)" if alone else ""
    head = (
        f"| {key} | GRPO/PODS seeds | GRPO start | GRPO peak | (i) rise at 1st checkpoint <= "
        f"{crit.max_first_rise:g} | (ii) peak time > {crit.peak_after * x_max:g} | (iii) zero-var >= "
        f"{crit.min_zero_var:g} | (iv) PODS/GRPO step{where} <= {crit.max_step_ratio:g} | (v) rise >= "
        f"{crit.min_rise:g} | passes |"
    )
    lines = [head, "|" + "---|" * 10]
    mark = lambda ok: "yes" if ok else "**no**"  # noqa: E731
    for k, r in rows.items():
        lines.append(
            f"| {k} | {r['grpo_seeds']}/{r['pods_seeds']} | {r['start']:.3f} | {r['peak']:.3f} | "
            f"{r['first_rise']:.2f} {mark(r['i'])} | {r['peak_time']:g} {mark(r['ii'])} | "
            f"{r['zero_var']:.3f} {mark(r['iii'])} | {r['step_ratio']:.3f} {mark(r['iv'])} | "
            f"{r['rise']:.3f} {mark(r['v'])} | {mark(r['passes'])} |"
        )
    chosen = choose(rows)
    lines.append("")
    lines.append(f"Chosen (largest GRPO rise among passing candidates): {chosen or 'none passes'}")
    return "\n".join(lines)
