"""Load runs into one tidy table, then put them on a shared grid.

The tidy table has one row per eval of one run:
    run, variant, seed, <x axes: train_time, step, rollouts where known>, value
with df.attrs["metric"] and df.attrs["x_labels"] ({axis: source column}).
Inputs are pods run dirs (metrics.jsonl + run_info.json), sweep dirs holding
them, or W&B panel CSV exports.

Grid policy (explicit, because it moves the headline):
- The grid is shared by all variants: the union of every eval's x, or, with
  `grid_step`, the checkpoint grid 0, step, 2*step, ... For runs on the same
  checkpoint grid (the normal case) both are just that grid.
- A run covers the grid points from its first eval's nearest checkpoint to its
  last eval's nearest checkpoint, and is NaN outside (no extrapolation).
- Inside that span the value at grid time t is read by the rule's time_read:
  "grid" snaps each eval to its nearest checkpoint and carries it forward to
  checkpoints without one; "at-or-before" takes the last eval with x <= t;
  "interpolate" draws straight lines between evals.
- Mean curves need every seed (peak.mean_curve), so they end with the shortest run.
"""

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd

from pods.analysis.peak import Curves, Summary, make_rule, summarize_curves

X_AXES = ("train_time", "step", "rollouts")
DEFAULT_METRIC = "eval/accuracy"
DEFAULT_NAME_PATTERN = r"(?P<variant>.+)-s(?P<seed>\d+)$"
_COLUMNS = ["run", "variant", "seed", *X_AXES, "value"]


def parse_run_name(name: str, pattern: str = DEFAULT_NAME_PATTERN) -> tuple[str, str]:
    """(variant, seed) from a run name; a name without a seed is its own variant."""
    m = re.search(pattern, name)
    if m is None or m.groupdict().get("seed") is None:
        return name, "0"
    variant = m.groupdict().get("variant") or (name[: m.start()] + name[m.end() :])
    return variant, m.group("seed")


def find_run_dirs(path: Path, max_depth: int = 3) -> list[Path]:
    """`path` if it is a run dir, else run dirs (holding metrics.jsonl) below it."""
    if (path / "metrics.jsonl").is_file():
        return [path]
    if max_depth == 0 or not path.is_dir():
        return []
    children = sorted(p for p in path.iterdir() if p.is_dir())
    return [run for child in children for run in find_run_dirs(child, max_depth - 1)]


def read_jsonl(path: Path) -> list[dict]:
    """Records of a jsonl file, skipping a torn last line from a killed run."""
    records = []
    for line in path.read_text().splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return records


def read_run(run_dir: Path, metric: str, name_pattern: str) -> pd.DataFrame:
    """The evals of one pods run dir that carry `metric`."""
    info_path = run_dir / "run_info.json"
    info = json.loads(info_path.read_text()) if info_path.is_file() else {}
    name = str(info.get("name", run_dir.name))
    if "variant" in info:
        variant, seed = str(info["variant"]), str(info.get("seed", 0))
    else:
        variant, seed = parse_run_name(name, name_pattern)
    recs = [r for r in read_jsonl(run_dir / "metrics.jsonl") if r.get(metric) is not None]
    cols = {a: [r.get(a, np.nan) for r in recs] for a in X_AXES}
    frame = pd.DataFrame({**cols, "value": [r[metric] for r in recs]}, dtype=float)
    return frame.assign(run=name, variant=variant, seed=seed)[_COLUMNS]


def _finish(frames: list[pd.DataFrame], metric: str, x_labels: dict[str, str]) -> pd.DataFrame:
    """Concatenate, drop NaN values and axes that some run lacks, tag with attrs."""
    df = pd.concat(frames, ignore_index=True).dropna(subset=["value"])
    missing = [a for a in X_AXES if a not in df or df[a].isna().any()]
    df = df[[c for c in _COLUMNS if c in df and c not in missing]]
    df.attrs = {"metric": metric, "x_labels": {a: x_labels[a] for a in x_labels if a in df}}
    return df


def load_runs(
    paths: str | Path | list,
    metric: str = DEFAULT_METRIC,
    name_pattern: str = DEFAULT_NAME_PATTERN,
) -> pd.DataFrame:
    """Tidy table of every run dir found in `paths` (run dirs or sweep dirs)."""
    paths = [paths] if isinstance(paths, (str, Path)) else paths
    run_dirs = [d for p in paths for d in find_run_dirs(Path(p))]
    if not run_dirs:
        raise FileNotFoundError(f"no run dir (with metrics.jsonl) in {[str(p) for p in paths]}")
    frames, seen = [], {}
    for d in run_dirs:
        frame = read_run(d, metric, name_pattern)
        if frame.empty:
            continue
        name = frame.run.iat[0]
        seen[name] = seen.get(name, 0) + 1
        if seen[name] > 1:  # the same name in two sweeps: keep both runs apart
            frame["run"] = f"{name}#{seen[name]}"
        frames.append(frame)
    if not frames:
        raise ValueError(f"none of the {len(run_dirs)} runs found logged {metric!r}")
    return _finish(frames, metric, {a: a for a in X_AXES})


def axis_for_column(column: str) -> str:
    """Which x axis a W&B time column stands for: step, rollouts, else train_time."""
    low = column.lower()
    if "rollout" in low:
        return "rollouts"
    return "step" if low.lstrip("_").endswith("step") else "train_time"


def load_wandb_csv(
    path: str | Path,
    metric: str | None = None,
    x_col: str | None = None,
    name_pattern: str = DEFAULT_NAME_PATTERN,
) -> pd.DataFrame:
    """Tidy table from a W&B panel export: `x_col` plus `<run> - <metric>` columns.

    Args:
        metric: which `<run> - <metric>` columns to read; default the file's only metric.
        x_col: the x column; default the first column. It becomes the axis named by
            `axis_for_column` (e.g. `eval/time` -> train_time, `Step` -> step).
        name_pattern: regex with `variant` and `seed` groups for run names.
    """
    raw = pd.read_csv(path)
    x_col = x_col or str(raw.columns[0])
    if x_col not in raw:
        raise KeyError(f"x column {x_col!r} not in {path}; columns: {list(raw.columns)[:8]}...")
    by_metric: dict[str, list[tuple[str, str]]] = {}
    for col in raw.columns:
        if col != x_col and " - " in col and not col.endswith(("__MIN", "__MAX")):
            run, m = col.rsplit(" - ", 1)
            by_metric.setdefault(m, []).append((run, col))
    if metric is None and len(by_metric) == 1:
        metric = next(iter(by_metric))
    if metric not in by_metric:
        raise ValueError(f"pick a metric in {path} (got {metric!r}); found: {sorted(by_metric)}")
    axis, frames = axis_for_column(x_col), []
    for run, col in by_metric[metric]:
        variant, seed = parse_run_name(run, name_pattern)
        xy = raw[[x_col, col]].apply(pd.to_numeric, errors="coerce").dropna()
        frame = pd.DataFrame({axis: xy[x_col], "value": xy[col]}, dtype=float)
        frames.append(frame.assign(run=run, variant=variant, seed=seed))
    return _finish(frames, metric, {axis: x_col})


def make_grid(x: np.ndarray, grid_step: float | None = None) -> np.ndarray:
    """The shared grid: union of all x, or checkpoints 0, step, ... covering max x."""
    if grid_step is None:
        return np.unique(x)
    return grid_step * np.arange(round(float(np.max(x)) / grid_step) + 1)


def snap(x: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """Index of the nearest grid point of each x (ties go to the earlier one)."""
    if len(grid) == 1:
        return np.zeros(len(x), dtype=int)
    i = np.clip(np.searchsorted(grid, x), 1, len(grid) - 1)
    return np.where(x - grid[i - 1] <= grid[i] - x, i - 1, i)


def sample_run(x: np.ndarray, y: np.ndarray, grid: np.ndarray, time_read: str) -> np.ndarray:
    """One run's evals (x increasing, unique) read at every grid point -> (G,)."""
    k = snap(x, grid)
    span = np.zeros(len(grid), dtype=bool)
    span[k[0] : k[-1] + 1] = True
    out = np.full(len(grid), np.nan)
    if time_read == "interpolate":
        out[span] = np.interp(grid[span], x, y)
    elif time_read == "at-or-before":
        i = np.searchsorted(x, grid, side="right") - 1
        ok = span & (i >= 0)
        out[ok] = y[i[ok]]
    else:  # "grid": the last eval snapped to each checkpoint, carried forward
        last = np.r_[k[1:] != k[:-1], True]
        out[k[last]] = y[last]
        filled = np.maximum.accumulate(np.where(np.isnan(out), 0, np.arange(len(grid))))
        out = np.where(span, out[filled], np.nan)
    return out


def default_axis(df: pd.DataFrame) -> str:
    """train_time if the table has it, else step, else rollouts."""
    for axis in X_AXES:
        if axis in df:
            return axis
    raise ValueError(f"the table has no x axis; expected one of {X_AXES}")


def build_curves(
    df: pd.DataFrame, x: str | None = None, time_read: str = "grid", grid_step: float | None = None
) -> dict[str, Curves]:
    """Every variant's seeds on one shared grid (see the module docstring)."""
    x = x or default_axis(df)
    if x not in df:
        raise KeyError(f"x axis {x!r} not in the table; available: {list(df.attrs['x_labels'])}")
    grid = make_grid(df[x].to_numpy(), grid_step)
    curves = {}
    for variant, vdf in df.groupby("variant", sort=True):
        runs, rows, peaks, finals = [], [], [], []
        for run, rdf in vdf.groupby("run", sort=True):
            rdf = rdf.sort_values(x, kind="stable").drop_duplicates(x, keep="last")
            xs, ys = rdf[x].to_numpy(float), rdf["value"].to_numpy(float)
            runs.append(str(run))
            rows.append(sample_run(xs, ys, grid, time_read))
            peaks.append(ys.max())
            finals.append(ys[-1])
        curves[str(variant)] = Curves(grid, np.stack(rows), runs, np.array(peaks), np.array(finals))
    return curves


def summarize(
    df: pd.DataFrame,
    x: str | None = None,
    rule: str = "paper",
    threshold: float | None = None,
    reference: str | None = None,
    time_read: str | None = None,
    baseline: str | None = None,
    n_boot: int = 2000,
    seed: int = 0,
    grid_step: float | None = None,
) -> Summary:
    """The PODS comparison of a tidy table: a preset rule (RULES) plus overrides."""
    r = make_rule(rule, threshold, reference, time_read)
    x = x or default_axis(df)
    curves = build_curves(df, x, r.time_read, grid_step)
    summary = summarize_curves(curves, r, baseline, n_boot, seed)
    summary.metric = df.attrs.get("metric", "value")
    summary.x, summary.x_label = x, df.attrs.get("x_labels", {}).get(x, x)
    return summary
