"""The PODS down-sampling rules: max-variance (the paper's), max-reward and random (its ablations), none."""

from __future__ import annotations

import torch

from pods.registry import Registry

SELECTORS: Registry = Registry("selector")
register_selector = SELECTORS.register


def _sorted_positions_to_indices(order: torch.Tensor, keep_sorted: torch.Tensor, m: int) -> torch.Tensor:
    """Map a (P, n) boolean mask over sorted positions to (P, m) ascending original indices."""
    pos = torch.argsort((~keep_sorted).to(torch.int8), dim=1, stable=True)[:, :m]  # True positions first
    return order.gather(1, pos).sort(dim=1).values


@register_selector("max_variance")
def max_variance(rewards: torch.Tensor, m: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """Keep the size-m subset of each row with the largest (population) reward variance.

    With each row sorted, an optimal subset is the i largest plus the m - i smallest for some i in 0..m
    (moving any kept value outwards never lowers the variance). Prefix sums score all m + 1 candidates in
    O(n) after the O(n log n) sort; all rows at once. Ties go to the smallest i, and the stable sort keeps
    equal rewards in index order, so the result is deterministic.
    """
    P, n = rewards.shape
    r = rewards.detach().to(torch.float64)
    s, order = torch.sort(r, dim=1, stable=True)  # (P, n) ascending
    zero = torch.zeros(P, 1, dtype=s.dtype, device=s.device)
    c1 = torch.cat([zero, s.cumsum(1)], 1)  # (P, n+1): c1[:, k] = sum of the k smallest
    c2 = torch.cat([zero, (s * s).cumsum(1)], 1)
    i = torch.arange(m + 1, device=s.device)  # number taken from the top
    sum1 = c1[:, m - i] + c1[:, n:] - c1[:, n - i]  # (P, m+1)
    sum2 = c2[:, m - i] + c2[:, n:] - c2[:, n - i]
    var = sum2 / m - (sum1 / m) ** 2
    best = var.argmax(dim=1, keepdim=True)  # (P, 1), first maximum = smallest i
    j = torch.arange(n, device=s.device).unsqueeze(0)
    keep_sorted = (j < m - best) | (j >= n - best)  # bottom m-i and top i sorted positions
    return _sorted_positions_to_indices(order, keep_sorted, m)


@register_selector("max_reward")
def max_reward(rewards: torch.Tensor, m: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """Keep the m highest rewards (ties: lower index first). The paper's ablation: it collapses."""
    order = torch.argsort(-rewards.detach().to(torch.float64), dim=1, stable=True)
    return order[:, :m].sort(dim=1).values


@register_selector("random")
def random(rewards: torch.Tensor, m: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """Keep m rollouts uniformly at random per row, from the run's seeded generator."""
    P, n = rewards.shape
    noise = torch.rand(P, n, generator=generator, device="cpu")
    return noise.argsort(dim=1)[:, :m].sort(dim=1).values.to(rewards.device)


@register_selector("none")
def keep_all(rewards: torch.Tensor, m: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """Vanilla GRPO: train on every rollout (requires m == n)."""
    P, n = rewards.shape
    if m != n:
        raise ValueError(f"selector 'none' keeps all n={n} rollouts but m={m}; pick a down-sampler")
    return torch.arange(n, device=rewards.device).expand(P, n).clone()


def downsample(
    name: str, rewards: torch.Tensor, m: int, generator: torch.Generator | None = None
) -> torch.Tensor:
    """Run the selector `name` and check its contract (shape, range, distinct indices)."""
    keep = SELECTORS.get_or_raise(name, "selector.downsample")(rewards, m, generator)
    P, n = rewards.shape
    if keep.shape != (P, m):
        raise ValueError(f"selector {name!r} returned shape {tuple(keep.shape)}, expected {(P, m)}")
    if keep.numel() and (keep.min() < 0 or keep.max() >= n or (keep.sort(1).values.diff(dim=1) == 0).any()):
        raise ValueError(f"selector {name!r} returned out-of-range or repeated indices")
    return keep
