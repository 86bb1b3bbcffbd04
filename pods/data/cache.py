"""The cache of a procedural task's generated rows (reasoning-gym), so a run reads them back instead of generating.

One JSON file per task, settings and split, under $PODS_CACHE_DIR (else $XDG_CACHE_HOME/pods, else
~/.cache/pods; PODS_CACHE_DIR=off: none). A file holds the settings it was generated from, its row count and a
sha256 of its settings and rows; one that does not match (cut short, edited, another layout) is generated
again, with one warning line, and rewritten in place (atomically), or removed where its rows cannot be kept:
a cache can never silently shrink or change the training set, nor warn on every run.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
from pathlib import Path

log = logging.getLogger("pods")
LAYOUT = 2  # the file's layout: {"pods_task_cache": 2, "settings", "rows", "sha256", "data"}


def rg_seed_size(cfg, split: str) -> tuple[int, int]:
    """(seed, size) of a split; eval examples come from another seed (exact train duplicates are removed later)."""
    seed = cfg.data_seed if split == "train" else cfg.data_seed + 1_000_003
    return seed, (cfg.train_size if split == "train" else cfg.eval_size)


def cache_settings(cfg, split: str) -> str | None:
    """The settings a split's rows are generated from, as one JSON string: the task, its kwargs, size, seed and
    the installed reasoning-gym version (it is seeded: the same settings generate the same rows). None: no
    caching (PODS_CACHE_DIR=off, or reasoning-gym is not installed)."""
    import importlib.metadata

    if os.environ.get("PODS_CACHE_DIR") == "off":
        return None
    try:
        version = importlib.metadata.version("reasoning-gym")
    except importlib.metadata.PackageNotFoundError:
        return None
    seed, size = rg_seed_size(cfg, split)
    kwargs = cfg.task_kwargs
    if not isinstance(kwargs, dict):  # an OmegaConf node
        from omegaconf import OmegaConf

        kwargs = OmegaConf.to_container(kwargs, resolve=True)
    key = {
        "task": cfg.task,
        "kwargs": kwargs,
        "size": size,
        "seed": seed,
        "reasoning_gym": version,
        "layout": 1,
    }
    return json.dumps(key, sort_keys=True, default=repr)


def task_cache_path(cfg, split: str) -> Path | None:
    """<cache>/reasoning_gym/<task>-<hash of cache_settings>.json; None: no caching."""
    key = cache_settings(cfg, split)
    if key is None:
        return None
    root = os.environ.get("PODS_CACHE_DIR")
    if not root:
        root = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "pods")
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", str(cfg.task))[:64]
    return Path(root) / "reasoning_gym" / f"{name}-{hashlib.sha256(key.encode()).hexdigest()[:20]}.json"


def _tag(x):
    """JSON has no tuples (reasoning-gym's metadata holds some, e.g. difficulty ranges): {"__tuple__": [...]}."""
    if isinstance(x, tuple):
        return {"__tuple__": [_tag(v) for v in x]}
    if isinstance(x, list):
        return [_tag(v) for v in x]
    if isinstance(x, dict):
        return {k: _tag(v) for k, v in x.items()}
    return x


def _untag(d: dict):
    return tuple(d["__tuple__"]) if len(d) == 1 and "__tuple__" in d else d


def _digest(settings: str, data) -> str:
    return hashlib.sha256(f"{settings}\n{json.dumps(data)}".encode()).hexdigest()


def _mismatch(entry, settings: str | None, size: int | None) -> str | None:
    """Why a parsed cache file is not the rows of `settings` (None when it is)."""
    if not isinstance(entry, dict) or entry.get("pods_task_cache") != LAYOUT:
        return "has no row count or content hash (another layout)"
    data = entry.get("data")
    if not isinstance(data, list) or entry.get("rows") != len(data):
        return f"holds {len(data) if isinstance(data, list) else 'no'} rows of the {entry.get('rows')} it records"
    if settings is not None and entry.get("settings") != settings:
        return "was written for other settings"
    if size is not None and len(data) != size:
        return f"holds {len(data)} rows, its settings make {size}"
    if entry.get("sha256") != _digest(entry.get("settings", ""), data):
        return "does not match its content hash"
    return None


def read_task_cache(path: Path | None, settings: str | None = None, size: int | None = None):
    """The cached rows [(where, row)] at `path`, or None (with one warning when a file is there but does not
    hold the `size` rows of `settings`)."""
    if path is None or not path.is_file():
        return None
    try:
        entry = json.loads(path.read_text())
        why = _mismatch(entry, settings, size)
        rows = None if why else [(str(w), dict(r)) for w, r in _untag_all(entry["data"])]
    except (OSError, ValueError, TypeError, AttributeError):
        why = "is unreadable"
    if why:
        log.warning("task cache %s %s; generating the task again", path, why)
        return None
    return rows


def _untag_all(data: list) -> list:
    return json.loads(json.dumps(data), object_hook=_untag)


def write_task_cache(path: Path | None, rows: list[tuple[str, dict]], settings: str = "") -> bool:
    """Keep `rows` at `path` with their count and hash if they read back equal (tuples kept as tuples; a row
    holding a set, an object or a non-string key would not read back equal: such a task is generated every
    run); atomic (a temporary file, fsynced, renamed over the old one), and silent where the folder is not
    writable. Returns whether it was written. It is called after a miss, so a file already at `path` is not
    these rows (a damaged one, which read_task_cache warned about): replaced, or, where these rows cannot be
    kept, removed, so that later runs do not read it and generate again every time."""
    if path is None:
        return False
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        data = json.loads(json.dumps([[w, _tag(r)] for w, r in rows]))
        same = [(w, r) for w, r in _untag_all(data)] == rows
    except (TypeError, ValueError):  # a set, an object, a non-string key
        same = False
    if not same:
        _discard(path, "these rows would not read back equal")
        return False
    try:
        entry = {"pods_task_cache": LAYOUT, "settings": settings, "rows": len(data)}
        text = json.dumps({**entry, "sha256": _digest(settings, data), "data": data})
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        return True
    except (OSError, TypeError, ValueError) as e:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        _discard(path, f"it cannot be rewritten ({getattr(e, 'strerror', None) or type(e).__name__})")
        return False


def _discard(path: Path, why: str) -> None:
    """Remove the damaged cache file at `path`, if any; a warning if even that fails."""
    if not path.is_file():
        return
    try:
        path.unlink()
        log.info("task cache %s removed: %s", path, why)
    except OSError as e:
        log.warning(
            "task cache %s is left in place (%s; removing it failed: %s): every run generates the task again "
            "until it is deleted",
            path,
            why,
            e.strerror or type(e).__name__,
        )


def task_is_cached(cfg) -> bool:
    """Both splits of a procedural task are in the cache: its settings were accepted by reasoning-gym before."""
    paths = [task_cache_path(cfg, split) for split in ("train", "eval")]
    return all(p is not None and p.is_file() for p in paths)
