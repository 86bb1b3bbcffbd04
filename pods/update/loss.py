"""The clipped policy-gradient loss of GRPO, with optional k3 KL to a reference policy."""

from __future__ import annotations

import torch


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
    """Loss of one micro-batch, scaled so that summing over micro-batches gives the batch loss.

    Args:
        logp, old_logp, ref_logp: (B, T) log-probs of the completion tokens under the current, the
            behaviour (rollout-time) and the reference policy.
        adv: (B,) advantages, one per sequence.
        mask: (B, T) 1 for completion tokens, 0 for padding.
        agg: 'token' averages over all completion tokens of the whole batch (DAPO / TRL default);
            'sequence' averages each sequence over its tokens, then over sequences (original GRPO).
        num_tokens, num_seqs: totals over the whole batch (all micro-batches); default: this micro-batch.
    Returns:
        (loss, stats) where stats hold token sums for clip fraction and KL (divide by num_tokens to log).
    """
    mask = mask.to(logp.dtype)
    eps_high = epsilon if epsilon_high is None else epsilon_high
    ratio = torch.exp(logp - old_logp)
    a = adv.unsqueeze(1)
    unclipped = -a * ratio
    clipped = -a * torch.clamp(ratio, 1 - epsilon, 1 + eps_high)
    per_token = torch.maximum(unclipped, clipped)  # (B, T)
    kl = torch.zeros_like(per_token)
    if ref_logp is not None and beta > 0:
        d = ref_logp - logp
        kl = torch.exp(d) - d - 1  # k3 estimator of KL(pi || ref), >= 0
        per_token = per_token + beta * kl
    if agg == "token":
        loss = (per_token * mask).sum() / (num_tokens if num_tokens is not None else mask.sum().clamp(min=1))
    elif agg == "sequence":
        per_seq = (per_token * mask).sum(1) / mask.sum(1).clamp(min=1)
        loss = per_seq.sum() / (num_seqs if num_seqs is not None else per_seq.numel())
    else:
        raise ValueError(f"algo.loss_agg={agg!r}; allowed: token, sequence")
    stats = {
        "clipped_tokens": ((clipped > unclipped).to(mask.dtype) * mask).sum().detach(),
        "kl_sum": (kl * mask).sum().detach(),
        "tokens": mask.sum().detach(),
    }
    return loss, stats
