"""GRESO: skip prompts that were zero-variance in their most recent epochs, with adaptive probability.

Per prompt we remember the outcome of each epoch it was rolled out in: 'easy' (all rollouts correct),
'hard' (all wrong) or 'mixed'. With z = the number of most recent consecutive epochs of the same
zero-variance kind, the prompt is skipped with probability 1 - max(p^z, min_keep), p = p_easy or p_hard.
After every step p moves by p_step toward keeping the observed easy/hard zero-variance ratios at their
targets (GRESO: 25% in all, 1/3 easy, 2/3 hard), bounded to [p_min, p_max], once the first epoch is over.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from pods.errors import ConfigError, interval
from pods.prefilter.registry import register_prefilter

EASY, HARD, MIXED = 1, -1, 0


def group_outcome(rewards: torch.Tensor, correct_threshold: float = 0.5) -> torch.Tensor:
    """(P, n) rewards -> (P,) EASY / HARD / MIXED. Zero variance = all rollouts on the same side."""
    correct = rewards > correct_threshold
    all_c, none_c = correct.all(dim=1), ~correct.any(dim=1)
    out = torch.zeros(rewards.shape[0], dtype=torch.long)
    out[all_c.cpu()] = EASY
    out[none_c.cpu()] = HARD
    return out


def zero_var_streak(history: list[int]) -> tuple[int, int]:
    """(kind, z): the kind of the latest outcome and how many most recent epochs in a row share it."""
    if not history or history[-1] == MIXED:
        return MIXED, 0
    kind, z = history[-1], 0
    for h in reversed(history):
        if h != kind:
            break
        z += 1
    return kind, z


def keep_probability(z: int, p: float, min_keep: float) -> float:
    return 1.0 if z == 0 else max(p**z, min_keep)


@dataclass
class GresoConfig:
    """GRESO's knobs, `prefilter.greso.*` (conf/prefilter/greso.yaml picks the filter)."""

    p_init: float = 0.5  # initial base keep-probability for zero-variance prompts
    p_step: float = 0.01  # adaptation step per training step
    p_min: float = 0.05
    p_max: float = 0.95
    min_keep: float = 0.01  # a prompt is always kept with at least this probability
    target_zero_var: float = 0.25  # target fraction of zero-variance groups among rollouts
    easy_share: float = 0.3333333333333333  # share of the target that is all-correct (rest: all-wrong)

    def check(self) -> None:
        for k in ("p_init", "p_min", "p_max"):
            interval(f"prefilter.greso.{k}", getattr(self, k), 0, 1, "(]")
        if not self.p_min <= self.p_init <= self.p_max:
            raise ConfigError(
                f"prefilter.greso needs p_min <= p_init <= p_max; got p_min={self.p_min}, p_init={self.p_init}, "
                f"p_max={self.p_max}"
            )
        interval(
            "prefilter.greso.p_step", self.p_step, 0, 1, "[]", " (the adaptation step per training step)"
        )
        interval(
            "prefilter.greso.min_keep",
            self.min_keep,
            0,
            1,
            "[)",
            " (min_keep >= 1 keeps every prompt: no filter)",
        )
        interval(
            "prefilter.greso.target_zero_var", self.target_zero_var, 0, 1, "[]", " (a fraction of groups)"
        )
        interval("prefilter.greso.easy_share", self.easy_share, 0, 1, "[]", " (a fraction of the target)")


@register_prefilter("greso", settings=GresoConfig)
class GresoFilter:
    def __init__(self, seed: int = 0, **knobs):
        self.cfg = cfg = GresoConfig(**knobs)  # prefilter.greso.*, as keywords (pods/registry.py)
        self.p = {EASY: cfg.p_init, HARD: cfg.p_init}
        self.history: dict[int, list[int]] = {}  # prompt id -> outcome per epoch it was seen in
        self.rng = np.random.default_rng([seed, 7919])
        self._reset_step()

    def _reset_step(self) -> None:
        self.step_counts = {
            "considered": 0,
            "skipped_easy": 0,
            "skipped_hard": 0,
            "groups": 0,
            "easy": 0,
            "hard": 0,
        }

    def keep(self, prompt_ids: list[int], epoch: int) -> list[bool]:
        out = []
        for pid in prompt_ids:
            kind, z = zero_var_streak(self.history.get(pid, []))
            prob = keep_probability(z, self.p.get(kind, 1.0), self.cfg.min_keep)
            k = bool(self.rng.random() < prob) if z else True
            if not k:
                self.step_counts["skipped_easy" if kind == EASY else "skipped_hard"] += 1
            out.append(k)
        self.step_counts["considered"] += len(prompt_ids)
        return out

    def observe(self, prompt_ids: list[int], epoch: int, correct: torch.Tensor) -> None:
        outcomes = group_outcome(correct).tolist()
        for pid, o in zip(prompt_ids, outcomes):
            self.history.setdefault(pid, []).append(o)
            self.step_counts["groups"] += 1
            self.step_counts["easy"] += o == EASY
            self.step_counts["hard"] += o == HARD

    def end_step(self, epoch: int) -> None:
        """Move p_easy/p_hard toward the target zero-variance ratios (only after the first epoch)."""
        c, g = self.step_counts, self.cfg
        self.last = dict(c)
        self._reset_step()
        if epoch < 1 or c["groups"] == 0:
            return
        targets = {EASY: g.target_zero_var * g.easy_share, HARD: g.target_zero_var * (1 - g.easy_share)}
        for kind, name in ((EASY, "easy"), (HARD, "hard")):
            ratio = c[name] / c["groups"]
            # too many zero-variance groups of this kind -> lower p -> skip more of them
            step = -g.p_step if ratio > targets[kind] else g.p_step
            self.p[kind] = float(np.clip(self.p[kind] + step, g.p_min, g.p_max))

    def metrics(self) -> dict[str, float]:
        c = getattr(self, "last", self.step_counts)
        considered = max(c["considered"], 1)
        return {
            "prefilter/p_easy": self.p[EASY],
            "prefilter/p_hard": self.p[HARD],
            "prefilter/considered": c["considered"],
            "prefilter/skipped_easy": c["skipped_easy"],
            "prefilter/skipped_hard": c["skipped_hard"],
            "prefilter/skip_rate": (c["skipped_easy"] + c["skipped_hard"]) / considered,
            "prefilter/skip_rate_easy": c["skipped_easy"] / considered,
            "prefilter/skip_rate_hard": c["skipped_hard"] / considered,
            "prefilter/zero_var_easy_ratio": c["easy"] / max(c["groups"], 1),
            "prefilter/zero_var_hard_ratio": c["hard"] / max(c["groups"], 1),
        }

    def state_dict(self) -> dict:
        return {
            "p": {str(k): v for k, v in self.p.items()},
            "history": {str(k): v for k, v in self.history.items()},
            "rng": self.rng.bit_generator.state,
        }

    def load_state_dict(self, state: dict) -> None:
        self.p = {int(k): v for k, v in state["p"].items()}
        self.history = {int(k): list(v) for k, v in state["history"].items()}
        self.rng.bit_generator.state = state["rng"]
