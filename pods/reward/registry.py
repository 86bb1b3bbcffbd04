"""Reward stage: a registry of reward functions and `build_reward(reward)`, their weighted sum."""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from dataclasses import dataclass, field

from pods.registry import Registry
from pods.reward.grading import Grader

RewardFn = Callable[..., list[float]]  # fn(completions, answers, **kw) -> one float per completion
# Keywords the Reward passes itself; a dataset column of the same name is not passed as a column.
RESERVED = ("completions", "answers", "prompts", "grader")
REWARDS: Registry[RewardFn] = Registry("reward")


def register_reward(name: str, settings: type | None = None) -> Callable[[RewardFn], RewardFn]:
    """Decorator: `@register_reward("len")` makes `weights: {len: 0.1}` in a reward config pick it.
    `settings`: a dataclass of the function's own knobs, set as `reward.<name>.<knob>` and passed to it as
    keyword arguments."""
    return REWARDS.register(name, settings)


@dataclass
class RewardOutput:
    total: list[float]  # (N,) sum over terms of weight * term
    terms: dict[str, list[float]]  # name -> (N,) unweighted values; always holds the correctness term
    correct: list[bool]  # (N,) correctness term == 1
    n_timeouts: int = 0  # completions whose grading hit timeout_s (scored 0)
    n_errors: int = 0  # completions whose grading raised or crashed the worker (scored 0)


@dataclass(eq=False)  # compared by identity, as before
class Reward:
    """Weighted sum of registered reward functions, sharing one Grader.

    Called as `reward(completions, answers, prompts=None, rows=None)`, one entry per completion in each list
    (`rows`: the dataset row each completion answers, a dict of its fields). Each function receives, TRL's
    way, `completions` and `answers` and as keywords `prompts`, `grader` (the shared Grader), its own settings
    and each of the rows' fields as a column (a list, one value per completion), all of them if it takes
    `**kw`, else those it names (a function written for `fn(completions, answers, grader)` still works)."""

    name: str
    weights: dict[str, float]
    grader: Grader
    settings: dict = field(default_factory=dict)  # reward name -> its own settings (a dataclass), as keywords
    correctness: str = "accuracy"  # the term whose 1.0 means correct (reward.correctness)

    def __call__(
        self,
        completions: list[str],
        answers: list[str],
        prompts: list[str] | None = None,
        rows: list[dict] | None = None,
    ) -> RewardOutput:
        if len(completions) != len(answers):
            raise ValueError(f"{len(completions)} completions but {len(answers)} answers")
        t0, e0 = self.grader.n_timeouts, self.grader.n_errors
        context = {"grader": self.grader, **({"prompts": prompts} if prompts is not None else {})}
        context.update(columns(rows) if rows else {})
        names = list(self.weights) + [self.correctness] * (self.correctness not in self.weights)
        terms = {n: self._term(n, completions, answers, context) for n in names}
        total = [0.0] * len(completions)
        for n, w in self.weights.items():
            total = [t + w * v for t, v in zip(total, terms[n])]
        return RewardOutput(
            total=total,
            terms=terms,
            correct=[v == 1.0 for v in terms[self.correctness]],
            n_timeouts=self.grader.n_timeouts - t0,
            n_errors=self.grader.n_errors - e0,
        )

    def _term(self, name: str, completions: list[str], answers: list[str], context: dict) -> list[float]:
        own = self.settings.get(name)
        fn = REWARDS[name]
        kw = accepted(fn, {**context, **(dataclasses.asdict(own) if own is not None else {})})
        vals = [float(v) for v in fn(completions, answers, **kw)]
        if len(vals) != len(completions):
            raise ValueError(
                f"reward {name!r} returned {len(vals)} values for {len(completions)} completions"
            )
        return vals

    def close(self) -> None:
        self.grader.close()


def columns(rows: list[dict]) -> dict[str, list]:
    """Rows (one dict per completion) -> their fields as columns, TRL's way: {field: [value per row]}; a
    field named like a keyword the Reward passes itself (RESERVED) is left out."""
    names = [k for k in rows[0] if k not in RESERVED]
    return {k: [row.get(k) for row in rows] for k in names}


def accepted(fn: Callable, kw: dict) -> dict:
    """The keywords of `kw` that `fn` takes: all of them with a `**kw` parameter, else those it names."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # a builtin or C function: pass everything, as before
        return kw
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return kw
    named = {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    return {k: v for k, v in kw.items() if k in named}


def build_reward(reward) -> Reward:
    """The reward stage from its typed settings, `reward` a pods.config.RewardConfig (checked there, in
    RewardConfig.check: registered names, weights and ranges): the weighted sum of reward.weights, graded
    with its limits."""
    grader = Grader(
        timeout_s=reward.timeout_s,
        max_chars=reward.max_chars,
        max_answer_chars=reward.max_answer_chars,
        boxed=reward.boxed,  # fall back to the last \\boxed{} without <answer>
        rel_tol=reward.rel_tol,
        round_to_reference=reward.round_to_reference,
        workers=reward.workers,
        batch_timeout_s=reward.batch_timeout_s or None,
    )
    weights = {str(k): float(v) for k, v in reward.weights.items()}
    own = {n: reward.sections[n] for n in [*weights, reward.correctness] if n in reward.sections}
    return Reward(reward.name, weights, grader.start(), own, reward.correctness)
