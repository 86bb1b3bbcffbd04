"""Task loading: procedural tasks from reasoning-gym, hub datasets through `datasets`, local jsonl/parquet.

Every source ends as a list of `Example(id, question, answer, fields)` (fields: the row as read, for reward
functions that read more of it than the answer). Bad rows (no question or answer, a field of
the wrong type, a line that is not UTF-8 or not a JSON object, a question seen before in a file or hub
dataset) are counted by reason in the DataReport with where the first one was, logged, and dropped
(dataset.on_bad_rows=skip) or refused (=error). Blank lines are counted and dropped, never refused.
Whatever cannot be skipped (a missing or empty file, no usable row) is a DataError naming the file and
the config key. All of it happens before the model is loaded.
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pods.data.cache import (  # the cache of generated reasoning-gym rows; the names tests and train.py use
    cache_settings,
    read_task_cache,
    rg_seed_size,
    task_cache_path,
    task_is_cached,  # noqa: F401 - pods.train imports it from here
    write_task_cache,
)
from pods.hub import OfflineError, offline_message, prepare_hub_access

_read_task_cache, _write_task_cache = read_task_cache, write_task_cache  # their earlier names

log = logging.getLogger("pods")
NOT_REFUSED = ("duplicate of a train question", "blank line")  # dropped and counted even with =error


class DataError(ValueError):
    """The data cannot be used as configured; the message says which rows and which key."""


@dataclass(frozen=True)
class Example:
    id: int  # stable index within its split
    question: str
    answer: str  # gold answer, already reduced to the final value
    fields: dict = field(default_factory=dict, compare=False)  # the row as read (every column), for rewards


@dataclass
class DataReport:
    split: str
    rows: int = 0
    kept: int = 0
    bad: dict[str, int] = field(default_factory=dict)  # reason -> count
    first_bad: dict[str, str] = field(default_factory=dict)  # reason -> where its first row is

    def add_bad(self, reason: str, where: str = "") -> None:
        self.bad[reason] = self.bad.get(reason, 0) + 1
        if where:
            self.first_bad.setdefault(reason, where)


@dataclass(frozen=True)
class BadLine:
    """A row a reader could not turn into a dict (bad bytes, bad JSON); load_examples counts it."""

    reason: str


def gold_answer(raw: Any, fmt: str) -> str | None:
    """Reduce a dataset's answer field to the final answer string (None if there is none)."""
    if raw is None:
        return None
    text = str(raw).strip()
    if fmt == "gsm8k":  # worked solution, final value after '####'
        if "####" not in text:
            return None
        text = text.split("####")[-1].strip().replace(",", "")
    elif fmt == "boxed":  # MATH solution: the last \boxed{...}, braces balanced
        start = text.rfind("\\boxed{")
        if start < 0:
            return None
        i, depth = start + len("\\boxed{"), 1
        for j in range(i, len(text)):
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            if depth == 0:
                text = text[i:j]
                break
        else:
            return None
    return text or None


def _rows_reasoning_gym(cfg, split: str) -> Iterable[dict]:
    path, settings = task_cache_path(cfg, split), cache_settings(cfg, split)
    seed, size = rg_seed_size(cfg, split)
    cached = read_task_cache(path, settings, size)  # checked: its settings, row count and hash
    if cached is not None:
        return cached
    import reasoning_gym

    try:
        ds = reasoning_gym.create_dataset(cfg.task, size=size, seed=seed, **dict(cfg.task_kwargs))
    except (KeyError, ValueError, TypeError) as e:
        raise DataError(
            f"dataset.task={cfg.task!r} / dataset.task_kwargs: reasoning-gym refused it: {e}"
        ) from e
    rows = [
        (
            f"{cfg.task} item {i}",
            {"question": x["question"], "answer": x["answer"], "metadata": x.get("metadata")},
        )
        for i, x in enumerate(ds)
    ]
    write_task_cache(path, rows, settings or "")
    return rows


def _rows_hub(cfg, split: str) -> Iterable[dict]:
    import datasets

    prepare_hub_access()
    task = (cfg.eval_task or cfg.task) if split != "train" else cfg.task
    name = cfg.eval_split if split != "train" else cfg.train_split
    try:
        ds = datasets.load_dataset(task, cfg.hf_config, split=name)
    except Exception as e:  # noqa: BLE001 - datasets raises many types for 'not found / offline'
        raise OfflineError(
            offline_message(
                "dataset",
                task,
                config_key(cfg, split),
                "Download it once, or use dataset=gsm8k_local / "
                "dataset.source=local dataset.task=<file.jsonl|parquet>.",
            )
            + f" ({type(e).__name__}: {e})"
        ) from e
    return ((f"{task}[{name}] row {i}", row) for i, row in enumerate(ds))


def config_key(cfg, split: str) -> str:
    """The config key that names this split's file or dataset (for error messages)."""
    return "dataset.eval_task" if split != "train" and cfg.eval_task else "dataset.task"


def _rows_local(cfg, split: str) -> Iterable[tuple[str, Any]]:
    key = config_key(cfg, split)
    path = Path((cfg.eval_task or cfg.task) if split != "train" else cfg.task)
    if not path.is_file():
        what = "is a directory" if path.is_dir() else "file not found"
        raise DataError(f"{key}={str(path)!r}: {what} (a local .jsonl, .json or .parquet file)")
    kind = {".jsonl": "jsonl", ".json": "json", ".parquet": "parquet"}.get(path.suffix)
    if kind is None:
        raise DataError(f"{key}={str(path)!r}: unsupported file type; allowed: .jsonl, .json, .parquet")
    if kind == "parquet":
        return _read_parquet(path, key)
    data = path.read_bytes()
    if not data.removeprefix(b"\xef\xbb\xbf").strip():
        raise DataError(f"{key}={str(path)!r}: the file is empty (no rows)")
    if kind == "json" and data.removeprefix(b"\xef\xbb\xbf").lstrip().startswith(b"["):
        return _read_json_array(data, path, key)
    return read_jsonl(data, str(path))


def read_jsonl(data: bytes, name: str) -> Iterator[tuple[str, Any]]:
    """(where, row) per line; a line that is not UTF-8 or not JSON yields a BadLine, never an exception.

    A UTF-8 byte-order mark at the start is dropped; CRLF line ends are fine.
    """
    lines = data.removeprefix(b"\xef\xbb\xbf").split(b"\n")
    if lines and not lines[-1]:
        lines.pop()  # the empty piece after the final newline is no line
    for n, raw in enumerate(lines, start=1):
        where = f"{name} line {n}"
        if not raw.strip():
            yield where, BadLine("blank line")
            continue
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            yield where, BadLine("not UTF-8")
            continue
        try:
            yield where, json.loads(text)
        except (ValueError, RecursionError):
            yield where, BadLine("malformed JSON")


def _read_json_array(data: bytes, path: Path, key: str) -> Iterator[tuple[str, Any]]:
    try:
        rows = json.loads(data.decode("utf-8-sig"))
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise DataError(f"{key}={str(path)!r}: not a JSON array of objects ({type(e).__name__}: {e})") from e
    return ((f"{path} item {i}", row) for i, row in enumerate(rows))


def _read_parquet(path: Path, key: str) -> Iterator[tuple[str, Any]]:
    import datasets

    try:
        ds = datasets.load_dataset("parquet", data_files=str(path), split="train")
    except Exception as e:  # noqa: BLE001 - pyarrow raises many types for a broken file
        raise DataError(f"{key}={str(path)!r}: cannot read it as parquet ({type(e).__name__}: {e})") from e
    return ((f"{path} row {i}", row) for i, row in enumerate(ds))


SOURCES = {"reasoning_gym": _rows_reasoning_gym, "hf": _rows_hub, "local": _rows_local}


def load_examples(cfg, split: str, exclude: set[str] | None = None) -> tuple[list[Example], DataReport]:
    """Load `split` ('train' or 'eval') of the dataset config `cfg`.

    Args:
        exclude: questions to drop (the train set, so that eval stays disjoint from it).
    """
    report = DataReport(split=split)
    limit = cfg.train_size if split == "train" else cfg.eval_size
    key = config_key(cfg, split)
    dedupe = cfg.source != "reasoning_gym"  # procedural tasks draw with replacement: repeats are by design
    seen: set[str] = set()
    fields_seen, first_fields = False, None
    out: list[Example] = []
    for where, row in SOURCES[cfg.source](cfg, split):
        report.rows += 1
        reason = _bad_row_reason(row, cfg)
        if isinstance(row, dict):
            first_fields = first_fields if first_fields is not None else sorted(map(str, row))
            fields_seen |= cfg.question_field in row and cfg.answer_field in row
        if reason is None:
            question = str(row[cfg.question_field]).strip()
            answer = gold_answer(row[cfg.answer_field], cfg.answer_format)
            if answer is None:
                reason = "no answer"
            elif exclude and question in exclude:
                reason = "duplicate of a train question"
            elif dedupe and normalise_space(question) in seen:
                reason = "duplicate question"
        if reason is not None:
            report.add_bad(reason, where)
            continue
        seen.add(normalise_space(question))
        out.append(Example(id=len(out), question=question, answer=answer, fields=dict(row)))
        if limit and len(out) >= limit:
            break
    report.kept = len(out)
    if not fields_seen and first_fields is not None:
        raise DataError(
            f"{key}: dataset rows have no field {cfg.question_field!r} / {cfg.answer_field!r} "
            f"(dataset.question_field / dataset.answer_field); fields present: {first_fields}"
        )
    if report.bad:
        log.warning("%s data (%s): %d of %d rows dropped: %s; first of each: %s", split, key, report.rows - len(out),
                    report.rows, report.bad, report.first_bad)  # fmt: skip
    refuse = {k: v for k, v in report.bad.items() if k not in NOT_REFUSED}
    if refuse and cfg.on_bad_rows == "error":
        first = "; ".join(f"{k}: {report.first_bad[k]}" for k in refuse if k in report.first_bad)
        raise DataError(
            f"{split} data ({key}) has bad rows {refuse} (first at {first}) and dataset.on_bad_rows=error; "
            "fix the data or set dataset.on_bad_rows=skip"
        )
    if not out:
        raise DataError(
            f"{split} split of dataset {cfg.name!r} ({key}={_source_name(cfg, split)!r}) has no usable rows "
            f"({report.bad}; first of each: {report.first_bad})"
        )
    return out, report


def _source_name(cfg, split: str) -> str:
    return str((cfg.eval_task or cfg.task) if split != "train" else cfg.task)


def _bad_row_reason(row: Any, cfg) -> str | None:
    """Why a row cannot be an Example before its answer is reduced, or None."""
    if isinstance(row, BadLine):
        return row.reason
    if not isinstance(row, dict):
        return "not a JSON object"
    if cfg.question_field not in row:
        return f"no {cfg.question_field!r} field"
    if cfg.answer_field not in row:
        return f"no {cfg.answer_field!r} field"
    q, a = row[cfg.question_field], row[cfg.answer_field]
    if q is None or (isinstance(q, str) and not q.strip()):
        return "empty question"
    if not isinstance(q, str):
        return "question is not a string"
    if a is None:
        return "no answer"
    if (
        isinstance(a, bool)
        or not isinstance(a, (str, int, float))
        or (isinstance(a, float) and not math.isfinite(a))
    ):
        return "answer is not a string or a number"
    return None


def normalise_space(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()
