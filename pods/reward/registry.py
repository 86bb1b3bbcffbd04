"""Reward stage: a registry of reward functions and `build_reward(cfg)`, their weighted sum."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from pods.registry import Registry
from pods.reward.grading import Grader

RewardFn = Callable[..., list[float]]  # fn(completions, answers, **kw) -> one float per completion
REWARDS: Registry[RewardFn] = Registry("reward")


def register_reward(name: str) -> Callable[[RewardFn], RewardFn]:
    """Decorator: `@register_reward("len")` makes `weights: {len: 0.1}` in a reward config pick it."""
    return REWARDS.register(name)


@dataclass
class RewardOutput:
    total: list[float]  # (N,) sum over terms of weight * term
    terms: dict[str, list[float]]  # name -> (N,) unweighted values; always holds "accuracy"
    correct: list[bool]  # (N,) accuracy == 1
    n_timeouts: int = 0  # completions whose grading hit timeout_s (scored 0)
    n_errors: int = 0  # completions whose grading raised or crashed the worker (scored 0)


class Reward:
    """Weighted sum of registered reward functions, sharing one Grader. Call with (completions, answers)."""

    def __init__(self, name: str, weights: dict[str, float], grader: Grader):
        self.name, self.weights, self.grader = name, weights, grader

    def __call__(self, completions: list[str], answers: list[str]) -> RewardOutput:
        if len(completions) != len(answers):
            raise ValueError(f"{len(completions)} completions but {len(answers)} answers")
        t0, e0 = self.grader.n_timeouts, self.grader.n_errors
        names = list(self.weights) + ["accuracy"] * ("accuracy" not in self.weights)  # correct needs it
        terms = {n: self._term(n, completions, answers) for n in names}
        total = [0.0] * len(completions)
        for n, w in self.weights.items():
            total = [t + w * v for t, v in zip(total, terms[n])]
        return RewardOutput(
            total=total,
            terms=terms,
            correct=[v == 1.0 for v in terms["accuracy"]],
            n_timeouts=self.grader.n_timeouts - t0,
            n_errors=self.grader.n_errors - e0,
        )

    def _term(self, name: str, completions: list[str], answers: list[str]) -> list[float]:
        vals = [float(v) for v in REWARDS[name](completions, answers, grader=self.grader)]
        if len(vals) != len(completions):
            raise ValueError(
                f"reward {name!r} returned {len(vals)} values for {len(completions)} completions"
            )
        return vals

    def close(self) -> None:
        self.grader.close()


def build_reward(cfg) -> Reward:
    """Reward from a config: name, weights {fn name: weight}, timeout_s, max_chars, max_answer_chars, boxed,
    rel_tol, round_to_reference, workers, batch_timeout_s (pods.config.RewardConfig says what each means)."""
    weights = _check_weights(dict(cfg.weights))
    grader = Grader(
        timeout_s=_positive(cfg, "timeout_s", 1.0),
        max_chars=int(_positive(cfg, "max_chars", 4096)),
        max_answer_chars=int(_positive(cfg, "max_answer_chars", 256)),
        boxed=bool(getattr(cfg, "boxed", True)),  # fall back to the last \boxed{} without <answer>
        rel_tol=_at_least_zero(cfg, "rel_tol", 0.0),
        round_to_reference=bool(getattr(cfg, "round_to_reference", True)),
        workers=int(_at_least_zero(cfg, "workers", 0)),
        batch_timeout_s=_at_least_zero(cfg, "batch_timeout_s", 30.0) or None,
    )
    return Reward(str(getattr(cfg, "name", "reward")), weights, grader.start())


def _check_weights(weights: dict) -> dict[str, float]:
    if not weights:
        raise ValueError(f"reward.weights is empty; give at least one of: {', '.join(sorted(REWARDS))}")
    for name, w in weights.items():
        if name not in REWARDS:
            raise ValueError(
                f"reward.weights names {name!r}, which is not a registered reward; "
                f"registered: {', '.join(sorted(REWARDS))} (add one with @register_reward({name!r}))"
            )
        if not isinstance(w, (int, float)) or isinstance(w, bool) or not math.isfinite(w):
            raise ValueError(f"reward.weights.{name} = {w!r}; it must be a finite number")
    return {str(k): float(v) for k, v in weights.items()}


def _positive(cfg, key: str, default: float) -> float:
    v = getattr(cfg, key, default)
    if not isinstance(v, (int, float)) or isinstance(v, bool) or not (math.isfinite(v) and v > 0):
        raise ValueError(f"reward.{key} = {v!r}; it must be a finite number > 0 (default {default})")
    return float(v)


def _at_least_zero(cfg, key: str, default: float) -> float:
    v = getattr(cfg, key, default)
    if not isinstance(v, (int, float)) or isinstance(v, bool) or not (math.isfinite(v) and v >= 0):
        raise ValueError(f"reward.{key} = {v!r}; it must be a finite number >= 0 (default {default})")
    return float(v)
