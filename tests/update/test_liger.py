"""Liger-Kernel's fused linear GRPO loss computes pods' loss: same value, gradients and logged fractions.

pods `loss=token` (with `num_tokens`) is Liger `loss_type="dapo"` (with `num_items_in_batch`), and
`loss=sequence` is `loss_type="grpo"`. Liger's chunked losses are plain torch, so this runs on a CPU
(`compiled=False`); skipped where liger_kernel is not installed, as in CI (scripts/bench_liger.py times both).
"""

from __future__ import annotations

import pytest
import torch

from pods.update.logprobs import linear_token_logprobs
from pods.update.loss import policy_loss

chunked_loss = pytest.importorskip("liger_kernel.chunked_loss")


@pytest.mark.parametrize(("agg", "loss_type"), [("token", "dapo"), ("sequence", "grpo")])
@pytest.mark.parametrize("on_policy", [True, False])
@pytest.mark.parametrize("beta", [0.0, 0.04])
@pytest.mark.parametrize("chunk_size", [1, 3])  # sequences per Liger chunk: one, uneven
def test_liger_grpo_loss_equals_pods(agg, loss_type, on_policy, beta, chunk_size):
    g = torch.Generator().manual_seed(0)
    b, n, h, v, t = 4, 6, 8, 50, 0.9
    hidden, weight = torch.randn(b, n, h, generator=g), torch.randn(v, h, generator=g) * 0.5
    target, adv = torch.randint(0, v, (b, n), generator=g), torch.randn(b, generator=g)
    mask = (torch.arange(n)[None] < torch.tensor([6, 3, 1, 5])[:, None]).long()  # (B, L), early stops
    noise = 0.3 * torch.randn(2, b, n, generator=g)  # off policy: ratios past both clip bounds

    hp, wp = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
    logp = linear_token_logprobs(hp, wp, target, t)
    old = logp.detach() if on_policy else logp.detach() + noise[0]
    ref = logp.detach() + noise[1]
    loss, st = policy_loss(logp, old, adv, mask, 0.2, 0.28, ref, beta, agg, num_tokens=20.0)
    loss.backward()

    hl, wl = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
    liger = chunked_loss.LigerFusedLinearGRPOLoss(
        beta=beta,
        compiled=False,
        use_ref_model=beta > 0,
        chunk_size=chunk_size,
        epsilon_low=0.2,
        epsilon_high=0.28,
        loss_type=loss_type,
        temperature=t,
    )
    got, metrics = liger(
        hl,
        wl,
        target,
        mask,
        adv,
        ref_per_token_logps=ref if beta > 0 else None,
        old_per_token_logps=None if on_policy else old,
        num_items_in_batch=20 if loss_type == "dapo" else None,
    )
    got.backward()

    torch.testing.assert_close(got, loss.detach(), rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(hl.grad, hp.grad, rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(wl.grad, wp.grad, rtol=1e-5, atol=1e-7)
    # metrics: [mean k3 KL if beta > 0, clipped fraction], both over the micro-batch's tokens
    want = [st["kl_sum"] / st["tokens"]] if beta > 0 else []
    torch.testing.assert_close(
        torch.stack(list(metrics)), torch.stack([*want, st["clipped_tokens"] / st["tokens"]])
    )
