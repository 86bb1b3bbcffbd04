"""The PODS down-sampling rules: max-variance (the paper's), max-reward and random (its ablations), none."""

from __future__ import annotations

import dataclasses
import inspect

import torch

from pods.errors import PluginError, shown
from pods.registry import Registry, accepted, calling

SELECTORS: Registry = Registry("selector")

# What the selector stage hands a selector by name, beside (rewards, m, generator), when its signature names it
# (or takes **kw): only those are computed.
CONTEXT = {
    "lengths": "(P, n) completion tokens of each rollout",
    "tokens": "(P, n) prompt + completion tokens of each rollout (what its update would process)",
    "correct": "(P, n) 1.0 where the rollout's answer was graded right (reward.correctness), else 0.0",
    "prompt_ids": "(P,) list of each group's prompt index in the training set",
}


def register_selector(name: str, settings: type | None = None, keeps_all: bool = False):
    """Decorator: `@register_selector("name")` on `fn(rewards, m, generator, **context, **settings)` makes
    `selector.name=name` use it. `context`: what it names of CONTEXT (`lengths=`, `correct=`, ...).
    `settings`: a dataclass of the selector's own knobs, set as `selector.<name>.<knob>` and passed to fn as
    keyword arguments. `keeps_all`: it trains on every rollout (GRPO), so m must equal n, and m = 1 is
    allowed."""
    return SELECTORS.register(name, settings, keeps_all=keeps_all)


def wanted(fn) -> list[str]:
    """The CONTEXT names selector `fn` takes (all of them with **kw)."""
    return list(accepted(fn, dict.fromkeys(CONTEXT)))


def unknown_context(fn, knobs=()) -> list[str]:
    """The parameters of selector `fn` after (rewards, m, generator) that are neither CONTEXT names nor its own
    `knobs` (its settings' fields): pods never passes them, so they would hold their default every step."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):  # a builtin: nothing to read
        return []
    named = [p for p in params if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    positional = [p for p in named if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)][:3]
    return [p.name for p in named if p not in positional and p.name not in (*CONTEXT, *knobs)]


def check_rewards(rewards: torch.Tensor, m: int, name: str, min_m: int = 2) -> None:
    """Refuse inputs no selector can answer sensibly, with a message instead of a raw IndexError.

    rewards must be a (P, n) floating tensor of finite values (NaN sorts and compares arbitrarily, so a NaN
    row would be 'selected' silently; the trainer replaces non-finite rewards before this point), and
    min_m <= m <= n must hold.
    """
    if not isinstance(rewards, torch.Tensor) or rewards.dim() != 2:
        shape = tuple(rewards.shape) if isinstance(rewards, torch.Tensor) else type(rewards).__name__
        raise ValueError(f"selector {name!r}: rewards must be a (P, n) tensor, got {shape}")
    if rewards.is_complex():
        raise ValueError(f"selector {name!r}: rewards must be real numbers, got dtype {rewards.dtype}")
    if isinstance(m, bool) or not isinstance(m, int):
        raise ValueError(f"selector {name!r}: m must be an int, got {m!r}")
    n = rewards.shape[1]
    if m < min_m or m > n:
        raise ValueError(
            f"selector {name!r}: m={m} must satisfy {min_m} <= m <= n={n} (selector.m, selector.n)"
        )
    if rewards.is_floating_point() and rewards.numel() and not torch.isfinite(rewards).all():
        bad = (~torch.isfinite(rewards)).nonzero()[0].tolist()
        raise ValueError(
            f"selector {name!r}: rewards hold NaN or inf (first at row {bad[0]}, column {bad[1]}); "
            "replace them before selection (in a run the reward stage stops on them: pods/guard.py)"
        )


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

    Numerics: each row is shifted by its minimum before the sums, so a common offset (rewards of 1e10 +
    U(0, 1)) cannot swamp the variance in E[x^2] - E[x]^2; the score is then the centred form
    (sum2 - sum1^2 / m) / m on values in [0, range]. Candidates within a relative 64 eps of the best
    count as ties (rounding cannot tell them apart), so ties still go to the smallest i.
    """
    check_rewards(rewards, m, "max_variance")
    P, n = rewards.shape
    r = rewards.detach().to(torch.float64)
    s, order = torch.sort(r, dim=1, stable=True)  # (P, n) ascending
    s = s - s[:, :1]  # values in [0, range]: an offset common to the row is gone
    zero = torch.zeros(P, 1, dtype=s.dtype, device=s.device)
    c1 = torch.cat([zero, s.cumsum(1)], 1)  # (P, n+1): c1[:, k] = sum of the k smallest
    c2 = torch.cat([zero, (s * s).cumsum(1)], 1)
    i = torch.arange(m + 1, device=s.device)  # number taken from the top
    sum1 = c1[:, m - i] + c1[:, n:] - c1[:, n - i]  # (P, m+1)
    sum2 = c2[:, m - i] + c2[:, n:] - c2[:, n - i]
    var = (sum2 - sum1 * sum1 / m).clamp_min(0) / m  # (P, m+1)
    span = s[:, -1:] ** 2  # (P, 1): every candidate's variance is <= range^2 / 4
    tol = 64 * torch.finfo(torch.float64).eps * n * span
    best = (var >= var.max(dim=1, keepdim=True).values - tol).to(torch.int8).argmax(dim=1, keepdim=True)
    j = torch.arange(n, device=s.device).unsqueeze(0)
    keep_sorted = (j < m - best) | (j >= n - best)  # bottom m-i and top i sorted positions
    return _sorted_positions_to_indices(order, keep_sorted, m)


@register_selector("max_reward")
def max_reward(rewards: torch.Tensor, m: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """Keep the m highest rewards (ties: lower index first). The paper's ablation: it collapses."""
    check_rewards(rewards, m, "max_reward")
    order = torch.argsort(-rewards.detach().to(torch.float64), dim=1, stable=True)
    return order[:, :m].sort(dim=1).values


@register_selector("random")
def random(rewards: torch.Tensor, m: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """Keep m rollouts uniformly at random per row, from the run's seeded generator.

    The rewards are not used, but they are checked like every selector's: bad input is a bug upstream.
    """
    check_rewards(rewards, m, "random")
    P, n = rewards.shape
    noise = torch.rand(P, n, generator=generator, device="cpu")
    return noise.argsort(dim=1)[:, :m].sort(dim=1).values.to(rewards.device)


@register_selector("none", keeps_all=True)
def keep_all(rewards: torch.Tensor, m: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """Vanilla GRPO: train on every rollout (requires m == n)."""
    n_or_m = rewards.shape[1] if isinstance(rewards, torch.Tensor) and rewards.dim() == 2 else m
    check_rewards(rewards, n_or_m, "none", min_m=1)  # shape and finiteness; m == n is checked below
    P, n = rewards.shape
    if m != n:
        raise ValueError(f"selector 'none' keeps all n={n} rollouts but m={m}; pick a down-sampler")
    return torch.arange(n, device=rewards.device).expand(P, n).clone()


def downsample(
    name: str,
    rewards: torch.Tensor,
    m: int,
    generator: torch.Generator | None = None,
    settings=None,
    context: dict | None = None,
) -> torch.Tensor:
    """Run the selector `name` and check its contract (shape, range, distinct indices). `settings`: the
    selector's own (the dataclass its registry entry declares, from `selector.<name>.*`), passed to it as
    keyword arguments; `context`: the CONTEXT it asked for (wanted(fn)), by name.

    Inputs are checked here too (check_rewards), so a selector registered elsewhere never sees a ragged,
    non-finite or too-small batch; an exception the selector raises is one PluginError line naming it.
    """
    fn = SELECTORS.get_or_raise(name, "selector.name")
    if not SELECTORS.trait(name, "keeps_all"):  # one that keeps all checks m = n itself
        check_rewards(rewards, m, name)
    kw = dataclasses.asdict(settings) if settings is not None else {}
    with calling("selector", name, fn):
        keep = fn(rewards, m, generator, **(context or {}), **kw)
    P, n = rewards.shape
    broken = contract_broken(keep, P, n, m)
    if broken:
        raise PluginError(
            f"selector {name!r} returned {broken}: {shown(keep)} (a selector returns (P, m) = {(P, m)} "
            f"distinct integer indices in [0, {n}) per row)"
        )
    return keep


def contract_broken(keep, P: int, n: int, m: int) -> str | None:
    """What is wrong with a selector's answer `keep` for (P, n) rewards and m (None: nothing)."""
    if not isinstance(keep, torch.Tensor):
        return f"a {type(keep).__name__}, not a tensor"
    if tuple(keep.shape) != (P, m):
        return f"shape {tuple(keep.shape)}"
    if keep.dtype not in (torch.int64, torch.int32):  # what indexing takes
        return f"dtype {keep.dtype}"
    if keep.numel() and (keep.min() < 0 or keep.max() >= n):
        return "out-of-range indices"
    if keep.numel() and (keep.sort(1).values.diff(dim=1) == 0).any():
        return "repeated indices in a row"
    return None
