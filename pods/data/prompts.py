"""The prompts a run trains and evaluates on: examples loaded, formatted with the task's template and
checked against the model's prompt budget (a prompt that is too long is bad data, per dataset.on_bad_rows)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import math
from dataclasses import dataclass

from pods.config import add_special_tokens
from pods.data.tasks import DataError, DataReport, load_examples
from pods.data.templates import format_prompt

log = logging.getLogger("pods")


@dataclass
class PromptSet:
    prompts: list[str]  # formatted, ready for the tokenizer
    answers: list[str]  # gold final answers
    fields: list[dict]  # each prompt's dataset row as read (every column): what a reward may read besides
    report: DataReport  # rows read, kept, and bad rows by reason

    def digest(self) -> dict:
        """{"rows", "sha256"} of the prompts and gold answers, in order: what a run trains on. Every checkpoint
        saves the train set's (meta.json), so that a resume on edited data is refused (pods/run_state.py)."""
        h = hashlib.sha256()
        for prompt, answer in zip(self.prompts, self.answers, strict=True):
            h.update(json.dumps([prompt, answer]).encode() + b"\n")
        return {"rows": len(self.prompts), "sha256": h.hexdigest()}


def max_token_chars(tok) -> int | None:
    """The most characters one token can stand for: its longest vocabulary entry (byte-level BPE writes a
    byte as one character, so an entry of k characters covers at most k characters of text), twice over for
    normalisers that shorten text (NFKC). A prompt longer than limit x this is longer than limit tokens.
    None for a tokenizer without a vocabulary to read (no bound)."""
    cached = getattr(tok, "_pods_max_token_chars", None)
    if cached is None:
        vocab = getattr(tok, "get_vocab", None)
        if not callable(vocab):
            return None
        cached = 2 * max((len(t) for t in vocab()), default=1)
        with contextlib.suppress(AttributeError):
            tok._pods_max_token_chars = cached
    return cached


def token_counts(texts: list[str], tok, add_special_tokens: bool = False, batch: int = 2048) -> list[int]:
    """Each text's length in tokens, as `tok(text)` counts it, encoded a batch at a time (a fast tokenizer
    encodes a batch in one call to its Rust code: 20,000 prompts one by one cost about 2.5 s of CPU)."""
    counts: list[int] = []
    for i in range(0, len(texts), batch):
        ids = tok(texts[i : i + batch], add_special_tokens=add_special_tokens)["input_ids"]
        counts.extend(len(x) for x in ids)
    return counts


def length_checked(
    examples, fmt, tok, limit: int, report: DataReport, on_bad_rows: str, add_special_tokens: bool = False
) -> PromptSet:
    """Format each example; drop (and count) prompts longer than `limit` tokens, or refuse under `error`.
    Tokens are counted as rollout will see them: with the tokenizer's special tokens (BOS) when
    `add_special_tokens`, as for prompts without a chat template."""
    prompts, answers, fields = [], [], []
    reason = f"prompt longer than model.max_prompt_len={limit}"
    per_token = max_token_chars(tok)
    max_chars = limit * per_token if per_token else math.inf  # longer in characters: longer in tokens
    formatted = []
    for ex in examples:
        if len(ex.question) > max_chars:  # not tokenized: a 10 MB line cost 20 s in the tokenizer
            report.add_bad(reason)
            continue
        p = fmt(ex)
        if len(p) > max_chars:
            report.add_bad(reason)
            continue
        formatted.append((ex, p))
    lengths = token_counts([p for _, p in formatted], tok, add_special_tokens)
    for (ex, p), n in zip(formatted, lengths, strict=True):
        if n > limit:
            report.add_bad(reason)
            continue
        prompts.append(p)
        answers.append(ex.answer)
        fields.append(ex.fields)
    report.kept = len(prompts)  # run_info.json's data.kept counts what is left after this filter too
    too_long = {k: v for k, v in report.bad.items() if k.startswith("prompt longer")}
    if too_long and on_bad_rows != "error":
        log.warning("%s: %d prompts longer than model.max_prompt_len=%d tokens dropped", report.split,
                    sum(too_long.values()), limit)  # fmt: skip
    if too_long and on_bad_rows == "error":
        raise DataError(
            f"{report.split}: {too_long}; raise model.max_prompt_len or set dataset.on_bad_rows=skip"
        )
    if not prompts:
        raise DataError(f"{report.split} split has no prompt within model.max_prompt_len={limit}")
    return PromptSet(prompts, answers, fields, report)


def load_prompt_sets(dataset, model, tok) -> tuple[PromptSet, PromptSet]:
    """(train, eval) prompt sets; eval questions that are also train questions are dropped."""
    train, train_report = load_examples(dataset, "train")
    evals, eval_report = load_examples(dataset, "eval", exclude={e.question for e in train})
    fmt = lambda ex: format_prompt(ex, dataset.template, dataset.system_prompt, tok, model.use_chat_template)  # noqa: E731
    out = []
    for examples, report in ((train, train_report), (evals, eval_report)):
        special = add_special_tokens(model)
        ps = length_checked(examples, fmt, tok, model.max_prompt_len, report, dataset.on_bad_rows, special)
        log.info(
            "data %s: %d rows, %d kept, bad: %s", report.split, report.rows, report.kept, report.bad or "none"
        )
        out.append(ps)
    return out[0], out[1]
