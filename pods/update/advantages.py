"""Advantage estimators: the kept rewards of each group -> one advantage per kept rollout.

An estimator is a pure function registered by name, `advantage.name=NAME` (or `advantage=NAME`) picks it:

    fn(rewards (P, m), all_rewards=(P, n), **knobs) -> (P, m) advantages

`rewards` are the kept m of each group (PODS: after down-sampling), `all_rewards` every generated one of the
same groups (passed when the function names it, or takes **kw); knobs are the fields of the dataclass its
entry declares (`advantage.grpo.stats`). A group whose rewards are all equal should get exactly 0: the update
skips those rows (pods/update/step.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from pods.batch import zero_variance
from pods.errors import PluginError, choice, shown
from pods.registry import Registry, accepted, calling, knobs

ADVANTAGES: Registry = Registry("advantage")


def register_advantage(name: str, settings: type | None = None):
    """Decorator: `@register_advantage("name")` on `fn(rewards, all_rewards=..., **knobs) -> (P, m)` makes
    `advantage.name=name` use it. `settings`: a dataclass of its own knobs, set as `advantage.<name>.<knob>`."""
    return ADVANTAGES.register(name, settings)


def group_advantages(
    rewards: torch.Tensor,
    scale_by_std: bool = True,
    eps: float = 1e-4,
    stats_from: torch.Tensor | None = None,
) -> torch.Tensor:
    """Advantage of each rollout relative to its group.

    Args:
        rewards: (P, k) rewards of the rollouts being trained on (PODS: the kept m).
        scale_by_std: divide by the group's sample std (GRPO); False keeps only the mean baseline (Dr. GRPO).
        eps: added to the std so zero-variance groups give zero advantages, not NaN.
        stats_from: (P, n) rewards whose mean/std are used instead (the 'full group' ablation); the
            paper normalises on the kept subset, i.e. stats_from=None.
    Returns:
        (P, k) advantages.
    """
    ref = rewards if stats_from is None else stats_from
    mean = ref.mean(dim=1, keepdim=True)
    adv = rewards - mean
    if scale_by_std:
        std = ref.std(dim=1, keepdim=True) if ref.shape[1] > 1 else torch.zeros_like(mean)
        adv = adv / (std + eps)
    # A group whose rewards are all equal carries no signal; make that exactly 0 (float rounding of the
    # mean would otherwise leave ~1e-8 / eps), so the update can skip those rows.
    flat = (zero_variance(rewards) & zero_variance(ref)).unsqueeze(1)  # (P, 1)
    return torch.where(flat, torch.zeros_like(adv), adv)


@dataclass(frozen=True)
class GroupNormSettings:
    stats: str = "kept"  # mean/std over the kept m (the PODS paper) | full (all n generated, an ablation)
    scale_by_std: bool = True  # divide by the group std (advantage=dr_grpo: not)

    def check(self) -> None:
        choice("advantage.grpo.stats", self.stats, ["kept", "full"])


@register_advantage("grpo", settings=GroupNormSettings)
def grpo(
    rewards: torch.Tensor, all_rewards: torch.Tensor, stats: str = "kept", scale_by_std: bool = True
) -> torch.Tensor:
    """GRPO: (r - mean) / (std + 1e-4) over the kept m (stats=kept) or all n of the group (stats=full)."""
    return group_advantages(rewards, scale_by_std, stats_from=all_rewards if stats == "full" else None)


@dataclass(frozen=True)
class MeanBaselineSettings:
    stats: str = "kept"  # whose mean is the baseline: the kept m | full (all n generated)

    def check(self) -> None:
        choice("advantage.dr_grpo.stats", self.stats, ["kept", "full"])


@register_advantage("dr_grpo", settings=MeanBaselineSettings)
def dr_grpo(rewards: torch.Tensor, all_rewards: torch.Tensor, stats: str = "kept") -> torch.Tensor:
    """Dr. GRPO (arXiv 2503.20783): r - mean, not divided by the std (which weighs easy and hard groups up)."""
    return grpo(rewards, all_rewards, stats, scale_by_std=False)


@register_advantage("rloo")
def rloo(rewards: torch.Tensor) -> torch.Tensor:
    """REINFORCE leave-one-out: A_i = r_i - mean_{j != i} r_j over the kept group (m >= 2), exactly 0 in a
    group of equal rewards."""
    m = rewards.shape[1]
    adv = rewards - (rewards.sum(dim=1, keepdim=True) - rewards) / (m - 1)
    flat = rewards.amax(dim=1, keepdim=True) == rewards.amin(dim=1, keepdim=True)
    return torch.where(flat, torch.zeros_like(adv), adv)


def estimate_advantages(
    name: str, kept_rewards: torch.Tensor, all_rewards: torch.Tensor, settings=None
) -> torch.Tensor:
    """The estimator `name` on (P, m) kept rewards, with (P, n) all rewards of the same groups and its own
    settings (its registry entry's dataclass) as keywords -> (P*m,) advantages, group-major."""
    fn = ADVANTAGES.get_or_raise(name, "advantage.name")
    with calling("advantage", name, fn):
        adv = fn(kept_rewards, **accepted(fn, {"all_rewards": all_rewards}), **knobs(settings))
    broken = advantages_broken(adv, tuple(kept_rewards.shape))
    if broken:  # the rewards are finite (the reward stage stops on any other): the estimator's fault
        raise PluginError(
            f"advantage {name!r} returned {broken}: {shown(adv)} (an advantage estimator returns finite floats of "
            f"the kept rewards' shape, (P, m) = {tuple(kept_rewards.shape)})"
        )
    return adv.reshape(-1)


def advantages_broken(adv, shape: tuple) -> str | None:
    """What is wrong with an estimator's answer `adv` for kept rewards of `shape` (None: nothing)."""
    if not isinstance(adv, torch.Tensor):
        return f"a {type(adv).__name__}, not a tensor"
    if tuple(adv.shape) != shape:
        return f"shape {tuple(adv.shape)}"
    if not adv.is_floating_point():
        return f"dtype {adv.dtype}"
    bad = int((~torch.isfinite(adv)).sum())
    return f"{bad} non-finite values of {adv.numel()}" if bad else None


def kept_advantages(
    kept_rewards: torch.Tensor, all_rewards: torch.Tensor, stats: str = "kept", scale_by_std: bool = True
) -> torch.Tensor:
    """(P, m) kept rewards -> (P*m,) advantages of `advantage=grpo` with these knobs (the spelling before the
    estimators were registered)."""
    settings = GroupNormSettings(stats, scale_by_std)
    settings.check()
    return estimate_advantages("grpo", kept_rewards, all_rewards, settings)
