"""What a resume may change, and the run's history of starts, resumes and stops.

A run directory holds one experiment. Every checkpoint saves the config it was written under (meta.json); a
resume compares its own config with that one, key by key, and refuses, in one line listing the differing
keys, when any key outside FREE_KEYS differs (selector, n, m, lr, model, dataset, seed, reward, ...: they
define what the run measures). FREE_KEYS say how long the run goes, how often it is evaluated and saved,
where it logs, and how work is batched; they may change on resume. config.yaml keeps the config the run
started with; each start and resume appends a line to history.jsonl (the keys that changed, old and new,
the step resumed from, the host, pid and world size), and a stop by a signal another.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import socket
import sys
from pathlib import Path
from typing import Any

from pods.errors import ConfigError, writing
from pods.files import open_write

HISTORY = "history.jsonl"

# The one list of keys a resume may change (a key matches itself and everything under it). Everything else
# defines the experiment. Why each is free:
FREE_KEYS = (
    "max_steps",  # how long the run goes: extend a finished run, or stop it earlier
    "max_train_time",
    "eval.every_steps",  # when evals happen (not how: eval.num_samples and eval.temperature define them)
    "eval.every_seconds",
    "eval.at_start",
    "eval.at_end",
    "eval.batch_size",  # how eval prompts are batched: the same greedy answers
    "checkpoint",  # how often checkpoints are saved and how many are kept
    "logger",  # where metrics go besides metrics.jsonl (W&B project, mode, group, completions printed)
    "resume",  # how this start was asked for
    "resume_allow_schedule_change",  # what this resume may do (a schedule it changes is in history.jsonl)
    "resume_allow_dataset_change",  # (and the data it changes)
    "max_empty_steps",  # when a run that rolls out nothing stops
    "run_dir",  # where the run directory is now (it may have been moved)
    "hardware.num_threads",  # this machine's CPU threads, grading processes and CUDA allocator
    "hardware.expandable_segments",
    "reward.workers",
    "reward.plugin_timeout_s",  # a bound on a plugin reward's calls, not what it computes
    "rollout.batch_size",  # how rollouts are chunked into generate calls
    "update",  # the update's layout (micro-batches, buckets, kernels, FSDP units): how its passes are cut
    # and shaped, not what is optimised (algo.*, optim.*); a resume on a smaller card may need smaller ones
)

_ABSENT = "<absent>"


def is_free(key: str) -> bool:
    return any(key == k or key.startswith(k + ".") for k in FREE_KEYS)


def flatten(d: Any, prefix: str = "") -> dict[str, Any]:
    """{"optim.lr": 1e-3, ...}: nested dicts become dotted keys; lists stay values."""
    if not isinstance(d, dict):
        return {prefix: d}
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}.{k}" if prefix else str(k)
        if isinstance(v, dict):  # an empty one adds no key: {} and {"k": 1} differ in key k
            out.update(flatten(v, key))
        else:
            out[key] = v
    return out


def differences(saved: dict, now: dict) -> dict[str, tuple]:
    """key -> (saved value, value now), for every key whose value differs (a key one side lacks: <absent>).
    A key the saved config lacks at the schema's default is no difference: a newer pods added the field,
    and its default does what the older pods did."""
    a, b = flatten(saved), flatten(now)
    defaults = _schema_defaults()
    out = {}
    for key in sorted(set(a) | set(b)):
        old, new = a.get(key, _ABSENT), b.get(key, _ABSENT)
        if old == new or (old == _ABSENT and key in defaults and defaults[key] == new):
            continue
        out[key] = (old, new)
    return out


def _schema_defaults(cls: type | None = None, prefix: str = "") -> dict[str, Any]:
    """Dotted key -> default of every scalar field of the schema (pods.config.TrainConfig); not the entries
    of its dict fields (reward.weights, dataset.task_kwargs, sections), which no default stands for."""
    from pods.config import TrainConfig

    out: dict[str, Any] = {}
    for f in dataclasses.fields(cls or TrainConfig):
        key = f"{prefix}{f.name}"
        if f.default_factory is not dataclasses.MISSING:
            value = f.default_factory()
            if dataclasses.is_dataclass(value):
                out.update(_schema_defaults(type(value), key + "."))
            elif not isinstance(value, dict):
                out[key] = value
        elif f.default is not dataclasses.MISSING and not _unset(f.default):
            out[key] = f.default
    return out


def _unset(default: Any) -> bool:
    """MISSING ("???") or an interpolation (II): no value of its own."""
    return isinstance(default, str) and (default == "???" or "${" in default)


def _show(v: Any) -> str:
    return json.dumps(v) if not isinstance(v, str) else v


def check_same_experiment(saved: dict, now: dict, checkpoint: str) -> dict[str, tuple]:
    """Refuse (ConfigError, one line listing the keys) when a key that defines the experiment differs from
    the checkpoint's config; returns the free keys that changed (for the history)."""
    diff = differences(saved, now)
    defining = {k: v for k, v in diff.items() if not is_free(k)}
    if defining:
        shown = "; ".join(
            f"{k}={_show(new)} (checkpoint: {_show(old)})" for k, (old, new) in defining.items()
        )
        raise ConfigError(
            f"resume=true: this config differs from the one checkpoint {checkpoint} was saved under, in keys "
            f"that define the experiment: {shown}. Resume with the checkpoint's values, or start the changed "
            f"experiment in another hydra.run.dir (keys a resume may change: {', '.join(FREE_KEYS)})"
        )
    return {k: v for k, v in diff.items() if k not in ("resume", "run_dir")}


def append(run_dir, event: str, **fields) -> None:
    """One line of history.jsonl (rank 0 only: the caller's business)."""
    rec = {
        "event": event,
        "time": dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "host": socket.gethostname(),
        "pid": os.getpid(),
        **fields,
    }
    path = Path(run_dir) / HISTORY
    with writing(path), open_write(path, "a") as f:
        f.write(json.dumps(rec, default=str) + "\n")


def command() -> str:
    """This process's command line (`python -m pods.train ...` for the entry point)."""
    argv = list(sys.argv)
    if argv and argv[0].endswith(os.path.join("pods", "train.py")):
        argv[0] = "python -m pods.train"
    return " ".join(argv)[:1000]
