"""Dynamic sampling (DAPO's filter, GRESO's base): after reward, drop the groups without reward variance and
draw more prompts until the step holds `prompts_per_step` informative groups, or max_rounds have run.

The loop (pods/collect.py, where it is `Stages.dynamic_sampling`) asks `another_round()` whether another round is due, `round_size(remaining)` how many
prompts to draw, and `refill(batch, rewards, remaining, drawn)` which of a graded round's groups to keep.
Off, there is one round and every group is kept. `metrics()` is the step's dynamic_sampling/* (runs logged
before issue 54 wrote them as rollout/*: pods/spelling.py reads those). Its state (the running zero-variance
ratio that sizes the rounds) goes into checkpoints under `dynamic_sampling`.
"""

from __future__ import annotations

import math

import torch

from pods.batch import Rollouts, zero_variance
from pods.config import DynamicSamplingConfig


def useful_groups(rewards: torch.Tensor, want: int) -> list[int]:
    """Positions of the first `want` groups of (P, n) rewards that have variance.

    >>> useful_groups(torch.tensor([[1., 1.], [0., 1.], [0., 0.], [1., 0.]]), 5)
    [1, 3]
    """
    flat = zero_variance(rewards).tolist()
    return [g for g in range(len(flat)) if not flat[g]][:want]


class DynamicSampling:
    def __init__(self, ds: DynamicSamplingConfig, dist):
        self.ds, self.dist = ds, dist
        self.zero_var_ratio = 0.0  # running estimate used to size the rounds
        self.start_step()

    def start_step(self) -> None:
        self.rounds = self.groups = self.dropped = 0

    def another_round(self, have: int, want: int) -> bool:
        """Whether to run another round (counted as one when it is)."""
        if have >= want or self.rounds >= (self.ds.max_rounds if self.ds.enabled else 1):
            return False
        self.rounds += 1
        return True

    def round_size(self, remaining: int) -> int:
        """Prompts to draw this round: with dynamic sampling, enough to expect `remaining` useful groups
        (remaining / (1 - zero-variance ratio) x oversample); a multiple of the number of ranks."""
        k, w = remaining, self.dist.world
        if self.ds.enabled:
            frac_useful = max(1.0 - self.zero_var_ratio, 0.1)
            k = max(remaining, math.ceil(remaining / frac_useful * self.ds.oversample))
        return math.ceil(k / w) * w

    def refill(self, r: Rollouts, rewards: torch.Tensor, remaining: int, drawn: int) -> tuple[Rollouts, int]:
        """This rank's groups of the round to keep, and how many the whole round keeps. `rewards`: the round's
        gathered (P_round, n) rewards; `drawn`: the prompts the round drew (all ranks)."""
        self.groups += rewards.shape[0]
        if not self.ds.enabled:
            return r, rewards.shape[0]
        useful = useful_groups(rewards, remaining)  # positions in the gathered batch
        self.dropped += rewards.shape[0] - len(useful)
        zero_var = zero_variance(rewards).float().mean().item()
        self.zero_var_ratio = 0.5 * self.zero_var_ratio + 0.5 * zero_var
        return r.select_groups(self.dist.local_positions(useful, drawn)), len(useful)

    def metrics(self) -> dict[str, float]:
        return {
            "dynamic_sampling/rounds": float(self.rounds),
            "dynamic_sampling/groups": float(self.groups),
            "dynamic_sampling/dropped_zero_var": float(self.dropped),
        }

    def state_dict(self) -> dict:
        return {"zero_var_ratio": self.zero_var_ratio}

    def load_state_dict(self, state: dict) -> None:
        self.zero_var_ratio = state["zero_var_ratio"]
