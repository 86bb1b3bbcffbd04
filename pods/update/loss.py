"""Policy-gradient losses: the clipped surrogate of GRPO (with optional k3 KL to a reference policy) and how
its per-token values are averaged, each a pure function registered by name; `loss.name=NAME` (or `loss=NAME`)
picks it:

    fn(logp, old_logp, adv, mask, **context, **knobs) -> (loss, stats)

logp, old_logp: (B, T) log-probs of the completion tokens under the current and the behaviour policy;
adv: (B,) one advantage per sequence; mask: (B, T) 1 on completion tokens. The loss of one micro-batch is
scaled so that summing over micro-batches (and ranks) gives the batch loss. `context`, by name, as the
function names it (or all with **kw):

    epsilon, epsilon_high   the PPO clip range, algo.epsilon / algo.epsilon_high (None: epsilon)
    ref_logp, beta          (B, T) reference log-probs (None unless algo.beta > 0) and the KL weight
    num_tokens, num_seqs    completion tokens and sequences of the whole batch (all micro-batches, ranks)
    max_completion_len      model.max_completion_len

`stats` may hold token sums `clipped_tokens` and `kl_sum` (logged as update/clip_frac and update/kl).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from pods.errors import PluginError, at_least, interval, positive, shown
from pods.registry import Registry, accepted, calling, knobs

LOSSES: Registry = Registry("loss")


def register_loss(name: str, settings: type | None = None, grad_at_zero_advantage: bool = False):
    """Decorator: `@register_loss("name")` on `fn(logp, old_logp, adv, mask, **context) -> (loss, stats)`
    makes `loss.name=name` use it. `settings`: a dataclass of its own knobs, `loss.<name>.<knob>`.
    `grad_at_zero_advantage`: a row whose advantage is 0 still has a gradient (an entropy term of its own),
    so the update must not skip it (by default, with algo.beta = 0, it skips those rows)."""
    return LOSSES.register(name, settings, grad_at_zero_advantage=grad_at_zero_advantage)


def clipped_surrogate(logp, old_logp, adv, mask, low: float, high: float, ref_logp=None, beta: float = 0.0):
    """Per-token PPO objective to minimise, max(-A r, -A clip(r, 1 - low, 1 + high)), plus beta * k3 KL.
    Returns (per_token (B, T), mask as logp's dtype, stats: clipped-token and KL sums over the mask)."""
    mask = mask.to(logp.dtype)
    ratio = torch.exp(logp - old_logp)
    a = adv.unsqueeze(1)
    unclipped = -a * ratio
    clipped = -a * torch.clamp(ratio, 1 - low, 1 + high)
    per_token = torch.maximum(unclipped, clipped)  # (B, T)
    kl = torch.zeros_like(per_token)
    if ref_logp is not None and beta > 0:
        d = ref_logp - logp
        kl = torch.exp(d) - d - 1  # k3 estimator of KL(pi || ref), >= 0
        per_token = per_token + beta * kl
    stats = {
        "clipped_tokens": ((clipped > unclipped).to(mask.dtype) * mask).sum().detach(),
        "kl_sum": (kl * mask).sum().detach(),
        "tokens": mask.sum().detach(),
    }
    return per_token, mask, stats


def _token_mean(per_token, mask, num_tokens):
    return (per_token * mask).sum() / (num_tokens if num_tokens is not None else mask.sum().clamp(min=1))


@register_loss("token")
def token(
    logp, old_logp, adv, mask, epsilon=0.2, epsilon_high=None, ref_logp=None, beta=0.0, num_tokens=None
):
    """Mean over every completion token of the batch (DAPO, TRL's default): long answers weigh more."""
    high = epsilon if epsilon_high is None else epsilon_high
    per_token, mask, stats = clipped_surrogate(logp, old_logp, adv, mask, epsilon, high, ref_logp, beta)
    return _token_mean(per_token, mask, num_tokens), stats


@register_loss("sequence")
def sequence(
    logp, old_logp, adv, mask, epsilon=0.2, epsilon_high=None, ref_logp=None, beta=0.0, num_seqs=None
):
    """Each sequence's mean over its tokens, then the mean over sequences (the original GRPO)."""
    high = epsilon if epsilon_high is None else epsilon_high
    per_token, mask, stats = clipped_surrogate(logp, old_logp, adv, mask, epsilon, high, ref_logp, beta)
    per_seq = (per_token * mask).sum(1) / mask.sum(1).clamp(min=1)
    return per_seq.sum() / (num_seqs if num_seqs is not None else per_seq.numel()), stats


@dataclass(frozen=True)
class DapoSettings:
    clip_low: float = 0.2  # ratios below 1 - clip_low are clipped (DAPO: 0.2)
    clip_high: float = 0.28  # ratios above 1 + clip_high are clipped (DAPO's clip-higher: 0.28)

    def check(self) -> None:
        interval("loss.dapo.clip_low", self.clip_low, 0, 1, "()")
        positive("loss.dapo.clip_high", self.clip_high)


@register_loss("dapo", settings=DapoSettings)
def dapo(logp, old_logp, adv, mask, ref_logp=None, beta=0.0, num_tokens=None, clip_low=0.2, clip_high=0.28):
    """DAPO (arXiv 2503.14476): the token-level mean with a decoupled clip range [1 - clip_low, 1 + clip_high]
    (its own knobs; algo.epsilon is not read)."""
    per_token, mask, stats = clipped_surrogate(logp, old_logp, adv, mask, clip_low, clip_high, ref_logp, beta)
    return _token_mean(per_token, mask, num_tokens), stats


@dataclass(frozen=True)
class DrGrpoSettings:
    norm_len: int = 0  # the constant every sequence's token sum is divided by; 0: model.max_completion_len

    def check(self) -> None:
        at_least("loss.dr_grpo.norm_len", self.norm_len, 0, " (0 = model.max_completion_len)")


@register_loss("dr_grpo", settings=DrGrpoSettings)
def dr_grpo(
    logp, old_logp, adv, mask, epsilon=0.2, epsilon_high=None, ref_logp=None, beta=0.0, num_seqs=None,
    max_completion_len=None, norm_len=0,
):  # fmt: skip
    """Dr. GRPO (arXiv 2503.20783): each sequence's token sum over a constant (norm_len, else the maximum
    completion length), not its own length, then the mean over sequences: no bias toward long wrong answers."""
    high = epsilon if epsilon_high is None else epsilon_high
    per_token, mask, stats = clipped_surrogate(logp, old_logp, adv, mask, epsilon, high, ref_logp, beta)
    length = norm_len or max_completion_len or mask.shape[1]
    seqs = num_seqs if num_seqs is not None else mask.shape[0]
    return (per_token * mask).sum() / (seqs * length), stats


@dataclass(frozen=True)
class PolicyLoss:
    """The run's loss, built once: entry `name` with what the run fixes (its knobs, the clip range, beta,
    max_completion_len); called per micro-batch with that batch's tensors and totals."""

    name: str = "token"
    fixed: tuple = ()  # (key, value) pairs handed to the entry by name

    @classmethod
    def build(cls, name: str, settings, algo, max_completion_len: int | None = None) -> PolicyLoss:
        """`settings`: the entry's own (its dataclass, from loss.<name>.*); `algo`: the clip range and beta."""
        LOSSES.get_or_raise(name, "loss.name")
        run = {"epsilon": algo.epsilon, "epsilon_high": algo.epsilon_high, "beta": algo.beta}
        return cls(name, tuple({**run, "max_completion_len": max_completion_len, **knobs(settings)}.items()))

    @property
    def grad_at_zero_advantage(self) -> bool:
        return LOSSES.trait(self.name, "grad_at_zero_advantage")

    def __call__(self, logp, old_logp, adv, mask, **context) -> tuple[torch.Tensor, dict]:
        fn = LOSSES[self.name]
        with calling("loss", self.name, fn):
            out = fn(logp, old_logp, adv, mask, **accepted(fn, {**context, **dict(self.fixed)}))
        broken = loss_broken(out, logp)
        if broken:
            raise PluginError(f"loss {self.name!r} returned {broken} ({CONTRACT})")
        return out

    def check_finite(self, value: float, logp, old_logp, adv) -> None:
        """A non-finite loss `value` (read after the backward, where the update reads it anyway: no extra
        sync) is the loss's fault where its inputs are finite; NaN log-probs come from the weights, which
        pods/guard.py names."""
        if math.isfinite(value):
            return
        inputs = (logp.detach(), old_logp, adv)
        if all(bool(torch.isfinite(t).all()) for t in inputs):
            raise PluginError(
                f"loss {self.name!r} returned {value} from finite log-probs and advantages ({CONTRACT})"
            )


CONTRACT = "a loss returns (loss, stats): a finite scalar tensor with a gradient, and a dict"


def loss_broken(out, logp) -> str | None:
    """What is wrong with a loss's answer `out` (None: nothing): its type, shape and gradient, checked without
    reading the value (no device sync); its finiteness: PolicyLoss.check_finite."""
    if not isinstance(out, tuple) or len(out) != 2:
        return shown(out)
    value, stats = out
    if not isinstance(value, torch.Tensor) or value.dim() != 0:
        return f"a loss of {shown(value)}, not a scalar tensor"
    if not isinstance(stats, dict):
        return f"stats of {shown(stats)}, not a dict"
    if logp.requires_grad and not value.requires_grad:
        return f"a loss without a gradient (requires_grad=False: detached?): {shown(value)}"
    return None


def policy_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    adv: torch.Tensor,
    mask: torch.Tensor,
    epsilon: float = 0.2,
    epsilon_high: float | None = None,
    ref_logp: torch.Tensor | None = None,
    beta: float = 0.0,
    agg: str = "token",
    num_tokens: float | None = None,
    num_seqs: float | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The loss entry `agg` (token | sequence, or any registered) with these arguments: the spelling before the
    losses were registered (scripts and tests call it)."""
    fn = LOSSES.get_or_raise(agg, "loss.name")
    context = dict(epsilon=epsilon, epsilon_high=epsilon_high, ref_logp=ref_logp, beta=beta)
    return fn(
        logp, old_logp, adv, mask, **accepted(fn, {**context, "num_tokens": num_tokens, "num_seqs": num_seqs})
    )
