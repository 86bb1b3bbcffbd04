"""The selector as a stage of the loop, built once from the `selector` group: keep m of each group's n
rollouts (PODS's down-sampling; `selector=none`: all of them), and report how the kept differ from all
generated, the selection-bias diagnostics (selector/*)."""

from __future__ import annotations

import torch

from pods.batch import Rollouts, zero_variance
from pods.config import SelectorConfig
from pods.selector.selectors import SELECTORS, downsample, wanted


def wasserstein1(a: torch.Tensor, b: torch.Tensor) -> float:
    """W1 distance between the empirical 1-D distributions of a and b: integral of |F_a - F_b|."""
    a, b = a.flatten().double(), b.flatten().double()
    if a.numel() == 0 or b.numel() == 0:
        return 0.0
    xs = torch.cat([a, b]).unique()  # sorted support
    if xs.numel() == 1:
        return 0.0
    fa = torch.searchsorted(a.sort().values, xs[:-1], right=True).double() / a.numel()
    fb = torch.searchsorted(b.sort().values, xs[:-1], right=True).double() / b.numel()
    return float(((fa - fb).abs() * xs.diff()).sum())


def selector_metrics(all_rewards: torch.Tensor, kept_rewards: torch.Tensor) -> dict[str, float]:
    """all_rewards: (P, n); kept_rewards: (P, m)."""
    zero_var = lambda r: zero_variance(r).double().mean().item()  # noqa: E731
    var = lambda r: r.double().var(1, unbiased=False).mean().item()  # noqa: E731
    return {
        "selector/all_reward_mean": all_rewards.double().mean().item(),
        "selector/kept_reward_mean": kept_rewards.double().mean().item(),
        "selector/all_reward_std": all_rewards.double().std().item() if all_rewards.numel() > 1 else 0.0,
        "selector/kept_reward_std": kept_rewards.double().std().item() if kept_rewards.numel() > 1 else 0.0,
        "selector/all_group_var": var(all_rewards),
        "selector/kept_group_var": var(kept_rewards),
        "selector/all_zero_var_frac": zero_var(all_rewards),
        "selector/kept_zero_var_frac": zero_var(kept_rewards),
        "selector/w1_kept_vs_all": wasserstein1(kept_rewards, all_rewards),
    }


def selector_context(names: list[str], batch: Rollouts) -> dict:
    """The CONTEXT entries `names` of `batch` (pods/selector/selectors.py), each (P, n) but prompt_ids."""
    P, n = batch.num_groups, batch.group_size
    completion = batch.completion_mask.sum(1).view(P, n)
    make = {
        "lengths": lambda: completion,
        "tokens": lambda: batch.attention_mask[:, : batch.prompt_len].sum(1).view(P, n) + completion,
        "correct": lambda: batch.correct,
        "prompt_ids": lambda: list(batch.prompt_ids),
    }
    return {k: make[k]() for k in names}


class SelectorStage:
    """`generator`: this rank's seeded torch.Generator (checkpointed with the run's random streams)."""

    def __init__(self, s: SelectorConfig, generator: torch.Generator, dist, timer):
        self.s, self.generator, self.dist, self.timer = s, generator, dist, timer

    def __call__(self, batch: Rollouts | None) -> Rollouts | None:
        """The kept m of each of this rank's groups (None when it has none)."""
        if batch is None:
            return None
        s = self.s
        with self.timer.phase("selector"):
            context = selector_context(wanted(SELECTORS.get_or_raise(s.name, "selector.name")), batch)
            keep = downsample(s.name, batch.rewards, s.m, self.generator, s.own(), context)  # (P, m)
            return batch.select(keep)

    def metrics(self, generated: torch.Tensor, kept: Rollouts | None) -> dict[str, float]:
        """selector/* of the step: `generated`, the (P, n) rewards of every group generated (all ranks); the
        kept rewards are gathered here (call on every rank)."""
        all_kept = self.dist.gather(kept.rewards if kept is not None else torch.zeros(0, self.s.m))
        return selector_metrics(generated, all_kept) if all_kept.numel() else {}
