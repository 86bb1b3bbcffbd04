"""The reward against the data, once the prompt sets are loaded and before the model is.

Preflight (pods/components.py) can read a reward's signature but not the data: here each term's row fields
are looked up in the rows of both splits, and each term is called once on a few synthetic completions of the
train set's first rows and must return one finite float per completion. A reward that breaks this is one
PluginError line naming it, not a traceback at the step-0 eval after the model has loaded.
"""

from __future__ import annotations

import dataclasses
import inspect
import math

from pods.errors import PluginError, shown
from pods.registry import raised
from pods.reward.numbers import parse_number
from pods.reward.registry import RESERVED, REWARDS, Reward

# the synthetic completions: no answer, and the gold answer in the expected shape where it is a plain number
# (graded in this process: nothing here starts the math-verify workers)
SOLVED = "<think>\nsynthetic\n</think>\n<answer>{answer}</answer>"
UNSOLVED = "<think>\nsynthetic\n</think>"


def check_on_data(reward: Reward, train, eval_set, dataset: str) -> None:
    """Refuse (PluginError) a term of `reward` that takes a row field the rows of `train` or `eval_set`
    (pods.data.PromptSet) lack, or that does not return one finite float per synthetic completion."""
    for split, data in (("train", train), ("eval", eval_set)):
        have = row_fields(data.fields)
        for name in reward.names():
            missing = [f for f in fields_wanted(REWARDS[name], reward.settings.get(name)) if f not in have]
            if missing:
                raise PluginError(
                    f"reward {name!r} takes {missing[0]!r}, a field the {split} rows of dataset {dataset!r} "
                    f"lack (theirs: {', '.join(sorted(have)) or 'none'}); give the parameter a default, or "
                    "choose a dataset whose rows have it"
                )
    call_on_synthetic(reward, train)


def row_fields(fields: list[dict] | None) -> set[str]:
    """The fields every row has (what each call's rows pass as columns)."""
    return set.intersection(*(set(f) for f in fields)) if fields else set()


def fields_wanted(fn, settings=None) -> list[str]:
    """The keywords reward function `fn` requires (no default) that only a dataset row can give: neither the
    two lists it takes first, nor what the Reward passes itself (RESERVED), nor its own settings (a dataclass,
    or the names of its knobs)."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):  # a builtin: nothing to read
        return []
    first_two = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)][:2]
    knobs = (
        {f.name for f in dataclasses.fields(settings)}
        if dataclasses.is_dataclass(settings)
        else settings or ()
    )
    return [
        p.name
        for p in params
        if p not in first_two
        and p.default is p.empty
        and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
        and p.name not in (*RESERVED, *knobs)
    ]


def synthetic(data, rows: int = 2) -> tuple[list[str], list[str], list[str], list[dict] | None]:
    """(completions, answers, prompts, rows): the first row without an answer, then each of the first
    `rows` rows answered with its gold answer (where that is a plain number)."""
    ids = list(range(min(rows, len(data.prompts))))
    ids = [ids[0], *ids]
    completions = [UNSOLVED] + [
        SOLVED.format(answer=data.answers[i]) if parse_number(data.answers[i]) is not None else UNSOLVED
        for i in ids[1:]
    ]
    per = lambda xs: [xs[i] for i in ids]  # noqa: E731
    return completions, per(data.answers), per(data.prompts), per(data.fields) if data.fields else None


def call_on_synthetic(reward: Reward, data) -> None:
    """Each term of `reward` on synthetic completions of `data`'s first rows: one finite float per completion
    (Reward.term checks the type and the count), or one PluginError line naming the term."""
    completions, answers, prompts, rows = synthetic(data)
    context = reward.context(prompts, rows)
    where = f"{len(completions)} synthetic completions of the train set's first rows"
    for name in reward.names():
        try:
            vals = reward.term(name, completions, answers, context, finite=False)  # checked below
        except PluginError as e:
            raise PluginError(f"{e} (called on {where})") from None
        except Exception as e:  # noqa: BLE001 - a plugin's reward may raise anything
            module = getattr(REWARDS[name], "__module__", None)
            raise PluginError(f"reward {name!r} raised on {where}: {raised(e, module)}") from None
        if not all(math.isfinite(v) for v in vals):
            raise PluginError(
                f"reward {name!r} returned {shown(vals)} on {where}; a reward's values must be finite numbers"
            )
