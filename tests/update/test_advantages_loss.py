import math

import pytest
import torch

from pods.update import group_advantages, policy_loss


def test_advantages_hand_computed():
    r = torch.tensor([[1.0, 0.0, 0.0, 1.0], [0.5, 0.5, 0.5, 0.5]])
    adv = group_advantages(r, eps=0.0 + 1e-4)
    std = math.sqrt(1 / 3)  # sample std of [1, 0, 0, 1]
    assert adv[0].tolist() == pytest.approx(
        [0.5 / (std + 1e-4), -0.5 / (std + 1e-4)] * 1 + [-0.5 / (std + 1e-4), 0.5 / (std + 1e-4)], rel=1e-6
    )
    assert adv[1].tolist() == [0.0] * 4  # zero variance -> zero advantage, no NaN


def test_advantages_without_std_and_full_group_stats():
    r = torch.tensor([[2.0, 0.0]])
    assert group_advantages(r, scale_by_std=False).tolist() == [[1.0, -1.0]]
    full = torch.tensor([[2.0, 0.0, 1.0, 1.0]])
    adv = group_advantages(r, scale_by_std=False, stats_from=full)  # mean of the full group is 1
    assert adv.tolist() == [[1.0, -1.0]]


def test_loss_on_policy_equals_minus_mean_advantage():
    # ratio = 1: per-token loss is -A; token-level mean over 3 + 1 tokens
    logp = torch.zeros(2, 3)
    adv = torch.tensor([1.0, -2.0])
    mask = torch.tensor([[1, 1, 1], [1, 0, 0]])
    loss, st = policy_loss(logp, logp, adv, mask)
    assert loss.item() == pytest.approx((-1.0 * 3 + 2.0 * 1) / 4)
    loss_seq, _ = policy_loss(logp, logp, adv, mask, agg="sequence")
    assert loss_seq.item() == pytest.approx((-1.0 + 2.0) / 2)
    assert st["clipped_tokens"].item() == 0


def test_loss_clipping_hand_computed():
    old = torch.zeros(1, 2)
    logp = torch.log(torch.tensor([[1.5, 0.5]]))  # ratios 1.5 and 0.5
    loss, st = policy_loss(logp, old, torch.tensor([1.0]), torch.ones(1, 2), epsilon=0.2)
    # A>0: token 1 -> min(1.5, 1.2) = 1.2 ; token 2 -> min(0.5, 0.5) = 0.5 -> loss = -(1.2 + 0.5)/2
    assert loss.item() == pytest.approx(-(1.2 + 0.5) / 2)
    assert st["clipped_tokens"].item() == 1
    loss, _ = policy_loss(logp, old, torch.tensor([-1.0]), torch.ones(1, 2), epsilon=0.2)
    # A<0: max(-r*A, -clip(r)*A) = max(r, clip(r)) -> 1.5 and 0.8
    assert loss.item() == pytest.approx((1.5 + 0.8) / 2)


def test_kl_term_k3():
    logp = torch.log(torch.tensor([[0.5]]))
    ref = torch.log(torch.tensor([[0.25]]))
    loss, st = policy_loss(logp, logp.detach(), torch.tensor([0.0]), torch.ones(1, 1), ref_logp=ref, beta=0.1)
    d = math.log(0.25) - math.log(0.5)
    assert loss.item() == pytest.approx(0.1 * (math.exp(d) - d - 1))


def test_micro_batch_losses_sum_to_the_full_batch():
    torch.manual_seed(0)
    logp, old = torch.randn(6, 5) * 0.1, torch.randn(6, 5) * 0.1
    adv, mask = torch.randn(6), (torch.rand(6, 5) > 0.3).long()
    for agg in ("token", "sequence"):
        full, _ = policy_loss(logp, old, adv, mask, agg=agg)
        nt, ns = float(mask.sum()), 6.0
        parts = sum(
            policy_loss(
                logp[s : s + 2],
                old[s : s + 2],
                adv[s : s + 2],
                mask[s : s + 2],
                agg=agg,
                num_tokens=nt,
                num_seqs=ns,
            )[0]
            for s in range(0, 6, 2)
        )
        assert parts.item() == pytest.approx(full.item(), rel=1e-5)


def test_zero_variance_groups_get_exactly_zero_advantage():
    r = torch.full((3, 16), 0.1)  # 0.1 is not exact in binary: the mean differs from it by rounding
    assert torch.equal(group_advantages(r), torch.zeros(3, 16))
