"""Read evals from any source into one tidy table.

Sources: pods run dirs (metrics.jsonl + run_info.json) or sweep dirs holding
them; W&B panel exports (CSV: an x column plus `<run> - <metric>` columns with
optional `__MIN`/`__MAX` companions); and long tables (CSV, JSONL or a JSON
list of records) with columns run (or variant + seed), x, value.

The tidy table has one row per eval of one run:
    run, variant, seed, <x axes: train_time, step, rollouts where known>, value
with df.attrs["metric"] and df.attrs["x_labels"] ({axis: source column}).
Anything ambiguous or malformed raises CompareError naming the choices.
"""

import hashlib
import json
import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from pods.analysis.errors import CompareError
from pods.analysis.groups import RunMeta, rows
from pods.identity import defining
from pods.spelling import current_metric, current_metrics

X_AXES = ("train_time", "step", "rollouts")
DEFAULT_METRIC = "eval/accuracy"
# a seed token anywhere in a name, between delimiters: GRPO-s25-p8, pods_seed3, seed7-grpo
DEFAULT_NAME_PATTERN = r"(?i)(?:^|[-_. ])(?:seed|s)[-_=]?(?P<seed>\d+)(?=$|[-_. ])"
_COLUMNS = ["run", "variant", "seed", *X_AXES, "value"]
_LONG_X = ("x", "train_time", "time", "step", "rollouts")  # x columns of a long table, by preference


def compile_name_pattern(pattern: str) -> re.Pattern:
    """The run-name regex; it must have a `seed` group (a `variant` group is optional)."""
    try:
        rx = re.compile(pattern)
    except re.error as e:
        raise CompareError(f"--name-pattern {pattern!r} is not a regex: {e}") from None
    if "seed" not in rx.groupindex:
        raise CompareError(f"--name-pattern {pattern!r} needs a (?P<seed>...) group")
    return rx


def parse_run_name(name: str, pattern: str = DEFAULT_NAME_PATTERN) -> tuple[str, str]:
    """(variant, seed) of a run name: the variant is the name with its seed token taken out.

    A name without a seed is its own variant (seed "0"). With the default pattern a name
    holding two seed tokens is refused; a custom pattern's first match wins, and its
    `variant` group, if any, names the variant.
    """
    rx = compile_name_pattern(pattern)
    matches = [m for m in rx.finditer(name) if m.group("seed") is not None]
    if not matches:
        return name, "0"
    if len(matches) > 1 and pattern == DEFAULT_NAME_PATTERN:
        tokens = ", ".join(repr(m.group(0)) for m in matches)
        raise CompareError(
            f"run name {name!r} has {len(matches)} seed tokens ({tokens}); pass --name-pattern"
        )
    m = matches[0]
    variant = m.groupdict().get("variant")
    if not variant:
        variant = (name[: m.start()] + name[m.end() :]).strip("-_. ") or name
    return variant, str(int(m.group("seed")))


def find_run_dirs(path: Path, max_depth: int = 3) -> list[Path]:
    """`path` if it is a run dir, else run dirs (holding metrics.jsonl) below it."""
    if (path / "metrics.jsonl").is_file():
        return [path]
    if max_depth == 0 or not path.is_dir():
        return []
    children = sorted(p for p in path.iterdir() if p.is_dir())
    return [run for child in children for run in find_run_dirs(child, max_depth - 1)]


def read_jsonl(path: Path) -> list[dict]:
    """Records of a jsonl file, skipping a torn last line from a killed run; metrics under today's names
    (`filter/skipped` written before one word per stage is read as `prefilter/skipped`)."""
    return parse_jsonl(Path(path).read_text())


def parse_jsonl(text: str) -> list[dict]:
    """read_jsonl's records of a jsonl file's text."""
    records = []
    for line in text.splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(rec, dict):
            records.append(current_metrics(rec))
    return records


def is_plain_grpo(cfg: dict) -> bool | None:
    """Whether a run's saved config (config.yaml) is the plain GRPO baseline: no pre-rollout filter, no
    dynamic sampling, no down-sampling, n == m. None when the config does not say (no selector section).

    Reads both layouts: today's (prefilter.name, dynamic_sampling.enabled, selector.name) and the one before
    the stage groups (selector.downsample, selector.prefilter, selector.dynamic_sampling; runs older still
    have only selector.name, the preset's name, which is `none` for GRPO).
    """
    s = cfg.get("selector") or {}
    if not isinstance(s, dict) or "n" not in s:
        return None
    down = s.get("downsample", s.get("name"))
    prefilter = (cfg.get("prefilter") or {}).get("name", s.get("prefilter", "none"))
    dynamic = (cfg.get("dynamic_sampling") or {}).get("enabled", s.get("dynamic_sampling", False))
    return down == "none" and prefilter == "none" and not dynamic and s.get("n") == s.get("m")


def read_config(run_dir: Path) -> dict | None:
    """A run's saved config (config.yaml), or None."""
    path = run_dir / "config.yaml"
    if not path.is_file():
        return None
    cfg = yaml.safe_load(path.read_text())
    return cfg if isinstance(cfg, dict) else None


def plain_variants(frames: list[pd.DataFrame]) -> dict[str, bool]:
    """variant -> whether every run of it with a saved config is plain GRPO (variants with none: left out)."""
    seen: dict[str, list[bool]] = {}
    for f in frames:
        plain = f.attrs.get("plain")
        if plain is not None:
            seen.setdefault(str(f.variant.iat[0]), []).append(plain)
    return {v: all(p) for v, p in seen.items()}


def _value(v) -> float:
    """A metric's value; null (a non-finite value, as metrics.jsonl writes it) or a non-number is NaN."""
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else np.nan


def read_run_info(run_dir: Path) -> dict:
    """A run dir's run_info.json ({} where it has none)."""
    path = Path(run_dir) / "run_info.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def run_label(run_dir: Path, info: dict | None = None) -> str:
    """The name a run is read under: run_info.json's `name`, else its directory's name (a launcher's, such as
    `seed-6105_arm-...`, where run_info.json names the run)."""
    info = read_run_info(run_dir) if info is None else info
    return str(info.get("name", Path(run_dir).name))


def read_run(run_dir: Path, metric: str, name_pattern: str) -> pd.DataFrame:
    """The evals of one pods run dir that carry `metric` (a null value as NaN, named by _finish); who the run
    is (attrs["meta"], for pods.analysis.groups) and whether it is plain GRPO (attrs["plain"])."""
    info = read_run_info(run_dir)
    name = run_label(run_dir, info)
    if "variant" in info:
        variant, seed = str(info["variant"]), str(info.get("seed", 0))
    else:
        variant, seed = parse_run_name(name, name_pattern)
    text = (run_dir / "metrics.jsonl").read_bytes()  # read once: the records and the copies' fingerprint
    recs = [r for r in parse_jsonl(text.decode()) if metric in r]
    cols = {a: [r.get(a, np.nan) for r in recs] for a in X_AXES}
    frame = pd.DataFrame({**cols, "value": [_value(r[metric]) for r in recs]}, dtype=float)
    frame = frame.assign(run=name, variant=variant, seed=seed)[_COLUMNS]
    cfg = read_config(run_dir)
    frame.attrs["plain"] = is_plain_grpo(cfg) if cfg is not None else None
    recorded = info.get("defining")
    frame.attrs["meta"] = RunMeta(
        run=name,
        variant=variant,
        seed=seed,
        where=str(run_dir),
        recorded=recorded if isinstance(recorded, dict) else None,
        saved=defining(cfg) if cfg is not None else None,
        fingerprint=hashlib.sha256(text).hexdigest(),
        wandb_id=info.get("wandb_id"),
    )
    return frame


def nan_warnings(df: pd.DataFrame, metric: str) -> list[str]:
    """One line per run with NaN (or null) values of the metric: they are left out, and named."""
    out = []
    axis = next((a for a in X_AXES if a in df), None)
    for run, rdf in df[df["value"].isna()].groupby("run", sort=True):
        at = ", ".join(f"{x:g}" for x in rdf[axis].head(5)) if axis else ""
        more = ", ..." if len(rdf) > 5 else ""
        where = f" ({axis} {at}{more})" if axis else ""
        out.append(f"run {run!r}: {len(rdf)} eval record(s) of {metric} are NaN or null{where}, left out")
    return out


def _finish(frames: list[pd.DataFrame], metric: str, x_labels: dict[str, str]) -> pd.DataFrame:
    """Concatenate; leave out NaN values, naming them (attrs["warnings"]); drop the axes no record has. An axis
    some records lack stays, NaN there: asked for, it is refused naming them (curves.check_axis)."""
    df = pd.concat(frames, ignore_index=True)
    warnings = nan_warnings(df, metric)
    df = df.dropna(subset=["value"])
    df = df[[c for c in _COLUMNS if c in df and (c not in X_AXES or df[c].notna().any())]]
    df.attrs = {
        "metric": metric,
        "x_labels": {a: x_labels[a] for a in x_labels if a in df},
        "warnings": warnings,
        "grouping": [],
    }
    return df


def _logged_metrics(run_dirs: list[Path]) -> list[str]:
    """Numeric eval/* keys the runs logged (every numeric key if none is eval/*)."""
    keys = set()
    for d in run_dirs[:8]:
        for r in read_jsonl(d / "metrics.jsonl"):
            keys |= {k for k, v in r.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    evals = sorted(k for k in keys if k.startswith("eval/"))
    return evals or sorted(keys - set(X_AXES) - {"wall_time"})


def load_runs(
    paths: str | Path | list,
    metric: str = DEFAULT_METRIC,
    name_pattern: str = DEFAULT_NAME_PATTERN,
    pool: tuple[str, ...] = (),
    allow_copies: bool = False,
) -> pd.DataFrame:
    """Tidy table of every run dir found in `paths` (run dirs or sweep dirs); a metric asked for by a retired
    name (`filter/skip_rate`) is read under today's, as every record is. The `variant` column is the run's
    row: one experiment, runs that differ only in the seed (pods.analysis.groups; `pool`: keys read as one
    experiment; `allow_copies`: keep one seed twice); attrs["grouping"] and ["warnings"] say how, and name
    every run left out."""
    paths, metric = [paths] if isinstance(paths, (str, Path)) else paths, current_metric(metric)
    run_dirs = [d for p in paths for d in find_run_dirs(Path(p))]
    if not run_dirs:
        raise CompareError(f"no run dir (with metrics.jsonl) in {', '.join(str(p) for p in paths)}")
    read = [read_run(d, metric, name_pattern) for d in run_dirs]
    frames = [f for f in read if not f.empty]
    if not frames:
        found = ", ".join(_logged_metrics(run_dirs)) or "none"
        raise CompareError(
            f"none of the {len(run_dirs)} runs logged {metric!r}; choose --metric from: {found}"
        )
    left_out = [
        f"run {f.attrs['meta'].run!r} ({f.attrs['meta'].where}) left out: no eval of {metric}"
        for f in read
        if f.empty
    ]
    frames = dedupe_runs(frames)
    made = rows([f.attrs["meta"] for f in frames], pool, allow_copies)
    frames = [with_attrs(f.assign(variant=made.label[f.run.iat[0]]), f) for f in frames]
    df = _finish(frames, metric, {a: a for a in X_AXES})
    df.attrs["plain"] = plain_variants(frames)
    df.attrs["grouping"] = made.grouping
    df.attrs["warnings"] = [*left_out, *made.warnings, *df.attrs["warnings"]]
    return df


def with_attrs(frame: pd.DataFrame, like: pd.DataFrame) -> pd.DataFrame:
    frame.attrs = dict(like.attrs)
    return frame


def dedupe_runs(frames: list[pd.DataFrame]) -> list[pd.DataFrame]:
    """The same run name in two sources stays two runs: later ones get #2, #3, ... (a run dir's attrs["meta"]
    follows)."""
    seen: dict[str, int] = {}
    out = []
    for frame in frames:
        renames = {}
        for name in frame.run.unique():
            seen[name] = seen.get(name, 0) + 1
            if seen[name] > 1:
                renames[name] = f"{name}#{seen[name]}"
        if renames:
            attrs = dict(frame.attrs)
            if "meta" in attrs:
                attrs["meta"] = replace(attrs["meta"], run=renames.get(attrs["meta"].run, attrs["meta"].run))
            frame = frame.assign(run=frame.run.replace(renames))
            frame.attrs = attrs
        out.append(frame)
    return out


def axis_for_column(column: str) -> str:
    """Which x axis a time column stands for: step, rollouts, else train_time."""
    low = column.lower()
    if "rollout" in low:
        return "rollouts"
    return "step" if low.lstrip("_").endswith("step") else "train_time"


def _read_csv(path: Path) -> pd.DataFrame:
    try:
        raw = pd.read_csv(path)
    except pd.errors.EmptyDataError:
        raise CompareError(f"{path} is empty") from None
    if raw.empty:
        raise CompareError(f"{path} has a header but no rows")
    return raw


def _pick_metric(found: list[str], metric: str | None, source: str) -> str:
    """`metric` if `source` has it; else its only non-internal metric (W&B's _step, _runtime
    and the like are never guessed); else refuse with the list."""
    if metric is not None:
        if metric not in found:
            raise CompareError(
                f"metric {metric!r} is not in {source}; choose --metric from: {', '.join(found)}"
            )
        return metric
    candidates = [m for m in found if not m.startswith("_")]
    if len(candidates) == 1:
        return candidates[0]
    if not candidates:
        raise CompareError(f"{source} has no metric to compare (only {', '.join(found) or 'none'})")
    raise CompareError(
        f"{source} has {len(candidates)} metrics; choose --metric from: {', '.join(candidates)}"
    )


def wandb_columns(columns: list[str], x_col: str) -> dict[str, list[tuple[str, str]]]:
    """metric -> [(run, column)] of `<run> - <metric>` columns, without __MIN/__MAX companions."""
    by_metric: dict[str, list[tuple[str, str]]] = {}
    for col in columns:
        if col == x_col or " - " not in col or re.search(r"__[A-Z]+$", col):
            continue
        run, m = col.rsplit(" - ", 1)
        by_metric.setdefault(m, []).append((run, col))
    return by_metric


def load_wandb_csv(
    path: str | Path,
    metric: str | None = None,
    x_col: str | None = None,
    name_pattern: str = DEFAULT_NAME_PATTERN,
    raw: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """Tidy table from a W&B panel export: `x_col` plus `<run> - <metric>` columns.

    Args:
        metric: which `<run> - <metric>` columns to read; default the file's only metric
            (W&B's internal `_step`-like columns are never picked by default).
        x_col: the x column; default the first column. It becomes the axis named by
            `axis_for_column` (e.g. `eval/time` -> train_time, `Step` -> step).
        name_pattern: regex with a `seed` group (and optionally `variant`) for run names.
    """
    raw = _read_csv(Path(path)) if raw is None else raw
    columns = [str(c) for c in raw.columns]
    x_col = x_col or columns[0]
    if x_col not in columns or " - " in x_col:
        plain = [c for c in columns if " - " not in c] or ["none"]
        raise CompareError(
            f"x column {x_col!r} is not a time column of {path}; choose --x-col from: {', '.join(plain)}"
        )
    by_metric = wandb_columns(columns, x_col)
    if not by_metric:
        raise CompareError(f"{path} has no '<run> - <metric>' columns and no run/x/value columns")
    found = [m for m in sorted(by_metric) if m != x_col]
    metric = _pick_metric(found, metric, str(path))
    axis, frames = axis_for_column(x_col), []
    for run, col in by_metric[metric]:
        variant, seed = parse_run_name(run, name_pattern)
        xy = raw[[x_col, col]].apply(pd.to_numeric, errors="coerce").dropna()
        frame = pd.DataFrame({axis: xy[x_col], "value": xy[col]}, dtype=float)
        frames.append(frame.assign(run=run, variant=variant, seed=seed))
    df = _finish(frames, metric, {axis: x_col})
    if df.empty:
        raise CompareError(f"{path}: no numeric ({x_col}, {metric}) pair in any run")
    df.attrs["grouping"] = [by_name(path, "a W&B export")]
    return df


def by_name(path, what: str) -> str:
    """The header line of a source without configs."""
    return f"rows by name: {path} is {what}, which holds no config: its runs are grouped by the variant their name gives"


def is_long_table(columns) -> bool:
    """run (or variant + seed) and value columns: a long table, not a W&B panel export."""
    cols = set(map(str, columns))
    return "value" in cols and ("run" in cols or {"variant", "seed"} <= cols)


def load_long(
    path: str | Path,
    metric: str | None = None,
    x_col: str | None = None,
    name_pattern: str = DEFAULT_NAME_PATTERN,
    raw: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """Tidy table from a long table: one row per eval with run (or variant + seed), x, value.

    The x column is `x_col`, else the first of x, train_time, time, step, rollouts. An
    optional `metric` column holds several metrics; --metric picks one (default: the only one).
    """
    raw = read_long(Path(path)) if raw is None else raw
    if not is_long_table(raw.columns):
        raise CompareError(
            f"{path} needs columns run (or variant and seed) and value; it has: {', '.join(map(str, raw.columns))}"
        )
    x_col = x_col or next((c for c in _LONG_X if c in raw), None)
    if x_col not in raw:
        raise CompareError(
            f"{path} has no x column; pass --x-col, one of: {', '.join(map(str, raw.columns))}"
        )
    if "metric" in raw:
        metric = _pick_metric(sorted(raw["metric"].dropna().astype(str).unique()), metric, str(path))
        raw = raw[raw["metric"].astype(str) == metric]
    if "run" not in raw:
        raw = raw.assign(run=raw["variant"].astype(str) + "-s" + raw["seed"].astype(str))
    axis = axis_for_column(x_col)
    frames = []
    for run, rdf in raw.groupby(raw["run"].astype(str), sort=False):
        if "variant" in rdf:
            variant = str(rdf["variant"].iat[0])
            seed = str(rdf["seed"].iat[0]) if "seed" in rdf else parse_run_name(run, name_pattern)[1]
        else:
            variant, seed = parse_run_name(run, name_pattern)
        xy = rdf[[x_col, "value"]].apply(pd.to_numeric, errors="coerce").dropna(subset=[x_col])
        frame = pd.DataFrame({axis: xy[x_col], "value": xy["value"]}, dtype=float)
        frames.append(frame.assign(run=run, variant=variant, seed=seed))
    df = _finish(frames, metric or "value", {axis: x_col}) if frames else pd.DataFrame()
    if df.empty:
        raise CompareError(f"{path}: no row with a numeric {x_col} and value")
    df.attrs["grouping"] = [by_name(path, "a long table")]
    return df


def read_long(path: Path) -> pd.DataFrame:
    """A long table from .csv, .jsonl (one record a line) or .json (a list of records)."""
    if path.suffix == ".csv":
        return _read_csv(path)
    if path.suffix == ".jsonl":
        records = read_jsonl(path)
    else:
        try:
            records = json.loads(path.read_text())
        except json.JSONDecodeError as e:
            raise CompareError(f"{path} is not JSON ({e})") from None
        if not (isinstance(records, list) and all(isinstance(r, dict) for r in records)):
            raise CompareError(
                f"{path} is not a list of records; convert it to a long table with run, x, value "
                "(see the README, 'Comparing evaluations from elsewhere')"
            )
    if not records:
        raise CompareError(f"{path} holds no records")
    return pd.DataFrame.from_records(records)


def load_file(path: Path, metric: str | None, x_col: str | None, name_pattern: str) -> pd.DataFrame:
    """One file: a W&B panel export (CSV) or a long table (CSV, JSONL, JSON)."""
    if path.suffix not in (".csv", ".jsonl", ".json"):
        raise CompareError(f"{path}: expected a run dir, a sweep dir, a .csv, .jsonl or .json file")
    raw = read_long(path)
    if is_long_table(raw.columns):
        return load_long(path, metric, x_col, name_pattern, raw)
    if path.suffix != ".csv":
        return load_long(path, metric, x_col, name_pattern, raw)  # raises: says which columns it needs
    return load_wandb_csv(path, metric, x_col, name_pattern, raw)


def load_inputs(
    paths: list[str],
    metric: str | None = None,
    x_col: str | None = None,
    name_pattern: str = DEFAULT_NAME_PATTERN,
    pool: tuple[str, ...] = (),
    allow_copies: bool = False,
) -> pd.DataFrame:
    """One tidy table from every input; run dirs, sweep dirs and files may be mixed (`pool`, `allow_copies`:
    load_runs')."""
    compile_name_pattern(name_pattern)
    frames, dirs = [], []
    for p in map(Path, paths):
        if not p.exists():
            raise CompareError(f"{p}: no such file or directory")
        if p.is_dir() or p.name == "metrics.jsonl":
            dirs.append(p if p.is_dir() else p.parent)
        else:
            frames.append(load_file(p, metric, x_col, name_pattern))
    if dirs:
        frames.append(load_runs(dirs, metric or DEFAULT_METRIC, name_pattern, pool, allow_copies))
    if len(frames) == 1:
        return frames[0]
    metrics = {f.attrs["metric"] for f in frames}
    df = pd.concat(dedupe_runs(frames), ignore_index=True)
    df = df.dropna(axis=1, how="all")  # an axis no input has; one some inputs lack stays (curves.check_axis)
    if not any(a in df for a in X_AXES):
        raise CompareError("the inputs share no x axis (train_time, step or rollouts); compare them apart")
    labels = {k: v for f in frames for k, v in f.attrs["x_labels"].items() if k in df}
    plain = {k: v for f in frames for k, v in f.attrs.get("plain", {}).items()}
    warnings = [w for f in frames for w in f.attrs.get("warnings", [])]
    grouping = [g for f in frames for g in f.attrs.get("grouping", [])]
    df.attrs = {"metric": " / ".join(sorted(metrics)), "x_labels": labels, "plain": plain}
    df.attrs.update(grouping=grouping, warnings=[*warnings, *seed_twice(df, allow_copies)])
    return df


def seed_twice(df: pd.DataFrame, allow: bool) -> list[str]:
    """Refuse a row (variant) that holds one seed in two runs across inputs (the same export read twice, say);
    with `allow`, the warning that says both were kept."""
    runs = df.groupby(["variant", "seed"], sort=True)["run"].unique()
    twice = runs[runs.map(len) > 1]
    if twice.empty:
        return []
    said = [f"runs {', '.join(map(str, n))} are seed {s} of {v!r} twice" for (v, s), n in twice.items()]
    if not allow:
        raise CompareError(
            f"{said[0]}: two runs of one seed are not two seeds; read one of them, or pass --allow-copies"
        )
    return [f"--allow-copies: {w}, all kept" for w in said]
