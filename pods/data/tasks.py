"""Task loading: procedural tasks from reasoning-gym, hub datasets through `datasets`, local jsonl/parquet.

Every source ends as a list of `Example(id, question, answer)`. Rows without a question or an answer are
bad data: counted, reported, and dropped (dataset.on_bad_rows=skip) or refused (=error).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pods.hub import OfflineError, offline_message, prepare_hub_access


class DataError(ValueError):
    """The data cannot be used as configured; the message says which rows and which key."""


@dataclass(frozen=True)
class Example:
    id: int  # stable index within its split
    question: str
    answer: str  # gold answer, already reduced to the final value


@dataclass
class DataReport:
    split: str
    rows: int = 0
    kept: int = 0
    bad: dict[str, int] = field(default_factory=dict)  # reason -> count

    def add_bad(self, reason: str) -> None:
        self.bad[reason] = self.bad.get(reason, 0) + 1


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
    import reasoning_gym

    # Eval examples come from a different seed; exact duplicates of train questions are removed later.
    seed = cfg.data_seed if split == "train" else cfg.data_seed + 1_000_003
    size = cfg.train_size if split == "train" else cfg.eval_size
    try:
        ds = reasoning_gym.create_dataset(cfg.task, size=size, seed=seed, **dict(cfg.task_kwargs))
    except (KeyError, ValueError, TypeError) as e:
        raise DataError(
            f"dataset.task={cfg.task!r} / dataset.task_kwargs: reasoning-gym refused it: {e}"
        ) from e
    return ({"question": x["question"], "answer": x["answer"]} for x in ds)


def _rows_hub(cfg, split: str) -> Iterable[dict]:
    import datasets

    prepare_hub_access()
    task = (cfg.eval_task or cfg.task) if split != "train" else cfg.task
    name = cfg.eval_split if split != "train" else cfg.train_split
    try:
        return datasets.load_dataset(task, cfg.hf_config, split=name)
    except Exception as e:  # noqa: BLE001 - datasets raises many types for 'not found / offline'
        raise OfflineError(
            offline_message(
                "dataset",
                task,
                "dataset.task",
                "Download it once, or use dataset=gsm8k_local / "
                "dataset.source=local dataset.task=<file.jsonl|parquet>.",
            )
            + f" ({type(e).__name__}: {e})"
        ) from e


def _rows_local(cfg, split: str) -> Iterable[dict]:
    import datasets

    path = Path((cfg.eval_task or cfg.task) if split != "train" else cfg.task)
    if not path.exists():
        raise DataError(
            f"dataset.task={str(path)!r}: file not found (a local .jsonl, .json or .parquet file)"
        )
    kind = {".jsonl": "json", ".json": "json", ".parquet": "parquet"}.get(path.suffix)
    if kind is None:
        raise DataError(
            f"dataset.task={str(path)!r}: unsupported file type; allowed: .jsonl, .json, .parquet"
        )
    return datasets.load_dataset(kind, data_files=str(path), split="train")


SOURCES = {"reasoning_gym": _rows_reasoning_gym, "hf": _rows_hub, "local": _rows_local}


def load_examples(cfg, split: str, exclude: set[str] | None = None) -> tuple[list[Example], DataReport]:
    """Load `split` ('train' or 'eval') of the dataset config `cfg`.

    Args:
        exclude: questions to drop (the train set, so that eval stays disjoint from it).
    """
    report = DataReport(split=split)
    limit = cfg.train_size if split == "train" else cfg.eval_size
    out: list[Example] = []
    for row in SOURCES[cfg.source](cfg, split):
        report.rows += 1
        if cfg.question_field not in row or cfg.answer_field not in row:
            raise DataError(
                f"dataset rows have no field {cfg.question_field!r} / {cfg.answer_field!r} "
                f"(dataset.question_field / dataset.answer_field); fields present: {sorted(row)}"
            )
        question = str(row[cfg.question_field] or "").strip()
        answer = gold_answer(row[cfg.answer_field], cfg.answer_format)
        if not question:
            report.add_bad("empty question")
        elif answer is None:
            report.add_bad("no answer")
        elif exclude and question in exclude:
            report.add_bad("duplicate of a train question")
        else:
            out.append(Example(id=len(out), question=question, answer=answer))
        if limit and len(out) >= limit:
            break
    report.kept = len(out)
    refuse = {k: v for k, v in report.bad.items() if k != "duplicate of a train question"}
    if refuse and cfg.on_bad_rows == "error":
        raise DataError(
            f"{split} data has bad rows {refuse} and dataset.on_bad_rows=error; fix the data or "
            "set dataset.on_bad_rows=skip"
        )
    if not out:
        raise DataError(f"{split} split of dataset {cfg.name!r} has no usable rows ({report.bad})")
    return out, report


def normalise_space(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()
