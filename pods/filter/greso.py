"""GRESO: skip prompts that were zero-variance in their most recent epochs, with adaptive probability.

Per prompt we remember the outcome of each epoch it was rolled out in: 'easy' (all rollouts correct),
'hard' (all wrong) or 'mixed'. With z = the number of most recent consecutive epochs of the same
zero-variance kind, the prompt is skipped with probability 1 - max(p^z, min_keep), p = p_easy or p_hard.
After every step p moves by p_step toward keeping the observed easy/hard zero-variance ratios at their
targets (GRESO: 25% in all, 1/3 easy, 2/3 hard), bounded to [p_min, p_max], once the first epoch is over.
"""

from __future__ import annotations

import numpy as np
import torch

from pods.registry import Registry

PREFILTERS: Registry = Registry("prefilter")
register_prefilter = PREFILTERS.register

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


@register_prefilter("none")
class NoFilter:
    def __init__(self, cfg=None, seed: int = 0):
        pass

    def keep(self, prompt_ids: list[int], epoch: int) -> list[bool]:
        return [True] * len(prompt_ids)

    def observe(self, prompt_ids: list[int], epoch: int, rewards: torch.Tensor) -> None:
        pass

    def end_step(self, epoch: int) -> None:
        pass

    def metrics(self) -> dict[str, float]:
        return {}

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass


@register_prefilter("greso")
class GresoFilter:
    def __init__(self, cfg, seed: int = 0):
        self.cfg = cfg
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

    def observe(self, prompt_ids: list[int], epoch: int, rewards: torch.Tensor) -> None:
        outcomes = group_outcome(rewards).tolist()
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
            "filter/p_easy": self.p[EASY],
            "filter/p_hard": self.p[HARD],
            "filter/considered": c["considered"],
            "filter/skipped_easy": c["skipped_easy"],
            "filter/skipped_hard": c["skipped_hard"],
            "filter/skip_rate": (c["skipped_easy"] + c["skipped_hard"]) / considered,
            "filter/skip_rate_easy": c["skipped_easy"] / considered,
            "filter/skip_rate_hard": c["skipped_hard"] / considered,
            "filter/zero_var_easy_ratio": c["easy"] / max(c["groups"], 1),
            "filter/zero_var_hard_ratio": c["hard"] / max(c["groups"], 1),
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


def build_prefilter(cfg, seed: int):
    """The filter `cfg.name` (pods.config.PrefilterConfig: the name and GRESO's knobs)."""
    return PREFILTERS.get_or_raise(cfg.name, "prefilter.name")(cfg, seed)
