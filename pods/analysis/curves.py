"""Put every run on one checkpoint grid, then compare (see load.py for reading runs).

Grid policy (explicit, because it moves the headline):
- The grid is shared by all variants: with `grid_step`, the checkpoint times
  0, step, 2*step, ... (in the x column's unit); without it, the union of every
  eval's x. The window [x_min, x_max] (the budget) keeps only the checkpoints
  inside it; every peak, final and time is read on those checkpoints only.
- The value of a run at checkpoint t is read by the rule's time_read:
  "nearest" (the paper's): the eval nearest in time to t, however far it lies (as
  the authors' scripts read); on a tie the earlier eval wins. The eval may lie
  outside the window: it stands for checkpoint t.
  "at-or-before": the last eval with x <= t (none before a run's first eval).
  "interpolate": the straight line between the evals that bracket t; outside a
  run's evals, its first or last eval.
- max_gap (opt-in, off in every preset rule): a checkpoint whose eval lies more
  than max_gap from it has no value (NaN), so nothing is carried across a gap or
  past a run's end. For "interpolate" the nearer bracketing eval counts.
- A mean curve is defined where every seed has a value (peak.mean_curve); without
  max_gap that is every checkpoint (after the first eval, for "at-or-before").
- T = 0 is plotted but never scored (peak.after_start).
"""

import numpy as np
import pandas as pd

from pods.analysis.errors import CompareError
from pods.analysis.load import (  # noqa: F401 - the loaders lived here once; old imports keep working
    DEFAULT_METRIC,
    DEFAULT_NAME_PATTERN,
    X_AXES,
    axis_for_column,
    find_run_dirs,
    load_runs,
    load_wandb_csv,
    parse_run_name,
)
from pods.analysis.peak import Curves, Summary, after_start, make_rule, peak, pick_baseline, summarize_curves

_EPS = 1e-9
_SECONDS = ("train_time", "train/clock", "_runtime", "Relative Time (Process)", "Relative Time (Wall)")


def x_unit(x_label: str) -> str:
    """The unit of an x column, as summaries and --help state it."""
    if x_label in _SECONDS:
        return f"seconds of {x_label}"
    if x_label == "step":
        return "optimizer steps"
    if x_label == "rollouts":
        return "rollouts"
    return f"units of the x column '{x_label}'"


def make_grid(
    x: np.ndarray,
    grid_step: float | None = None,
    x_min: float | None = None,
    x_max: float | None = None,
) -> np.ndarray:
    """Checkpoint times in [x_min, x_max]: the union of all x, or 0, step, 2*step, ...
    up to the last one within half a step of the latest eval."""
    x = np.asarray(x, dtype=float)
    lo = -np.inf if x_min is None else x_min
    hi = np.inf if x_max is None else x_max
    if grid_step is None:
        grid = np.unique(x)
        return grid[(grid >= lo - _EPS) & (grid <= hi + _EPS)]
    k_lo = max(0, int(np.ceil(lo / grid_step - _EPS))) if np.isfinite(lo) else 0
    k_hi = int(np.floor(np.max(x) / grid_step + 0.5 + _EPS))
    if np.isfinite(hi):
        k_hi = min(k_hi, int(np.floor(hi / grid_step + _EPS)))
    return grid_step * np.arange(k_lo, k_hi + 1, dtype=float)


def nearest_index(x: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Index of the x (increasing) nearest to each t; on a tie the earlier x."""
    if len(x) == 1:
        return np.zeros(len(t), dtype=int)
    i = np.clip(np.searchsorted(x, t), 1, len(x) - 1)
    return np.where(t - x[i - 1] <= x[i] - t + _EPS, i - 1, i)  # _EPS: a grid step like 0.1 is inexact


def sample_run(
    x: np.ndarray, y: np.ndarray, grid: np.ndarray, time_read: str, max_gap: float | None = None
) -> np.ndarray:
    """One run's evals (x increasing, unique) read at every checkpoint -> (G,).

    NaN where the read finds no eval: before the first eval for "at-or-before", and,
    with max_gap, wherever the eval read lies more than max_gap from the checkpoint.
    """
    out = np.full(len(grid), np.nan)
    if time_read == "interpolate":
        vals, used = np.interp(grid, x, y), x[nearest_index(x, grid)]  # held at the end evals
    elif time_read == "at-or-before":
        i = np.searchsorted(x, grid + _EPS, side="right") - 1
        vals, used = (
            np.where(i >= 0, y[np.maximum(i, 0)], np.nan),
            np.where(i >= 0, x[np.maximum(i, 0)], np.nan),
        )
    elif time_read == "nearest":
        i = nearest_index(x, grid)
        vals, used = y[i], x[i]
    else:
        raise CompareError(f"unknown time read {time_read!r}")
    ok = ~np.isnan(used)
    if max_gap is not None:
        ok &= np.abs(used - grid) <= max_gap + _EPS
    out[ok] = vals[ok]
    return out


def default_axis(df: pd.DataFrame) -> str:
    """train_time if the table has it, else step, else rollouts (an axis some records lack is still the
    default: check_axis then refuses it, naming them, rather than fall back to another)."""
    for axis in X_AXES:
        if axis in df:
            return axis
    raise CompareError(f"the table has no x axis; expected one of {X_AXES}")


def check_axis(df: pd.DataFrame, x: str) -> None:
    """Refuse an x axis that some eval records lack (an eval appended by another script without train_time),
    naming the runs and the axes every record has: the axis never changes without being asked."""
    if x not in df:
        raise CompareError(
            f"x axis {x!r} is not in the table; choose --x from: {', '.join(df.attrs.get('x_labels', {}))}"
        )
    lacking = df[df[x].isna()]
    if lacking.empty:
        return
    runs = lacking.groupby("run", sort=True).size()
    shown = ", ".join(f"{run!r} ({k} of {int((df.run == run).sum())})" for run, k in runs.head(5).items())
    more = f" and {len(runs) - 5} more runs" if len(runs) > 5 else ""
    full = [a for a in X_AXES if a in df and df[a].notna().all()]
    alt = (
        f"pass --x {' or --x '.join(full)} (every record has it), or" if full else "no other axis is either:"
    )
    raise CompareError(
        f"{len(lacking)} eval record(s) have no {x}: runs {shown}{more}; {alt} leave those records out"
    )


def window_text(x_min: float | None, x_max: float | None) -> str:
    lo = "-inf" if x_min is None else f"{x_min:g}"
    hi = "inf" if x_max is None else f"{x_max:g}"
    return f"[{lo}, {hi}]"


def build_curves(
    df: pd.DataFrame,
    x: str | None = None,
    time_read: str = "nearest",
    grid_step: float | None = None,
    x_min: float | None = None,
    x_max: float | None = None,
    max_gap: float | None = None,
) -> dict[str, Curves]:
    """Every variant's seeds on one shared grid (see the module docstring)."""
    x = x or default_axis(df)
    check_axis(df, x)
    grid = make_grid(df[x].to_numpy(), grid_step, x_min, x_max)
    if len(grid) == 0:
        raise CompareError(
            f"no checkpoint in the window {window_text(x_min, x_max)} (evals span "
            f"{df[x].min():g} to {df[x].max():g})"
        )
    curves = {}
    for variant, vdf in df.groupby("variant", sort=True):
        runs, rows = [], []
        for run, rdf in vdf.groupby("run", sort=True):
            rdf = rdf.sort_values(x, kind="stable").drop_duplicates(x, keep="last")
            row = sample_run(rdf[x].to_numpy(float), rdf["value"].to_numpy(float), grid, time_read, max_gap)
            if np.isnan(row).all():
                gap = "" if max_gap is None else f" within the max gap {max_gap:g}"
                raise CompareError(
                    f"run {run!r} has no eval{gap} for any checkpoint in the window "
                    f"{window_text(x_min, x_max)} (its evals span {rdf[x].min():g} to {rdf[x].max():g})"
                )
            runs.append(str(run))
            rows.append(row)
        values = np.stack(rows)  # (S, G)
        finals = np.array([r[~np.isnan(r)][-1] for r in rows])
        curves[str(variant)] = Curves(grid, values, runs, peak(after_start(grid, values)), finals)
    return curves


def check_grid_step(df: pd.DataFrame, x: str, grid_step: float | None, unit: str) -> None:
    """Refuse a step that is not a positive number, or far finer than the evals (e.g. 2
    meant as minutes on a seconds axis): most checkpoints would repeat one eval."""
    if grid_step is None:
        return
    if not (np.isfinite(grid_step) and grid_step > 0):
        raise CompareError(f"--grid-step {grid_step:g}: give a positive number of {unit}")
    gaps = [np.diff(np.unique(r[x].to_numpy(float))) for _, r in df.groupby("run")]
    gaps = np.concatenate(gaps) if gaps else np.array([])
    typical = float(np.median(gaps)) if gaps.size else np.nan
    if np.isfinite(typical) and grid_step < typical / 4:
        raise CompareError(
            f"--grid-step {grid_step:g} is in {unit}, but evals are about {typical:.4g} apart: "
            "most checkpoints would repeat one eval; give the step in that unit"
        )


def summarize(
    df: pd.DataFrame,
    x: str | None = None,
    rule: str = "paper",
    threshold: float | None = None,
    reference: str | None = None,
    time_read: str | None = None,
    max_gap: float | None = None,
    baseline: str | None = None,
    n_boot: int = 2000,
    seed: int = 0,
    grid_step: float | None = None,
    x_min: float | None = None,
    x_max: float | None = None,
) -> Summary:
    """The PODS comparison of a tidy table: a preset rule (RULES) plus overrides.

    grid_step, x_min and x_max are in the unit of the x axis' source column (x_unit).
    """
    r = make_rule(rule, threshold, reference, time_read, max_gap)
    x = x or default_axis(df)
    check_axis(df, x)
    x_label = df.attrs.get("x_labels", {}).get(x, x)
    check_grid_step(df, x, grid_step, x_unit(x_label))
    if any(v is not None and np.isnan(v) for v in (x_min, x_max)):
        raise CompareError("--x-min and --x-max take numbers (or inf), not nan")
    if x_min is not None and x_max is not None and x_min > x_max:
        raise CompareError(f"--x-min {x_min:g} is after --x-max {x_max:g}")
    curves = build_curves(df, x, r.time_read, grid_step, x_min, x_max, r.max_gap)
    baseline = baseline or pick_baseline(list(curves), df.attrs.get("plain", {}))
    summary = summarize_curves(curves, r, baseline, n_boot, seed)
    summary.warnings = [*df.attrs.get("warnings", []), *summary.warnings]
    summary.grouping = list(df.attrs.get("grouping", []))
    summary.metric = df.attrs.get("metric", "value")
    summary.x, summary.x_label = x, x_label
    summary.grid_step, summary.x_min, summary.x_max = grid_step, x_min, x_max
    return summary
