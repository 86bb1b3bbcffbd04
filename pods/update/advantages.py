"""GRPO group-relative advantages."""

from __future__ import annotations

import torch

from pods.batch import zero_variance


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


ADV_STATS = ("kept", "full")  # whose mean/std normalise: the kept m (PODS paper) or all n (an ablation)


def kept_advantages(
    kept_rewards: torch.Tensor, all_rewards: torch.Tensor, stats: str = "kept", scale_by_std: bool = True
) -> torch.Tensor:
    """(P, m) kept rewards -> (P*m,) advantages, normalised on the kept subset or, with stats="full", on
    all (P, n) rewards of each group."""
    if stats not in ADV_STATS:
        raise ValueError(f"advantage statistics {stats!r}; allowed: {', '.join(ADV_STATS)}")
    ref = all_rewards if stats == "full" else None
    return group_advantages(kept_rewards, scale_by_std, stats_from=ref).reshape(-1)
