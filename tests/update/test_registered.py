"""The registered advantage estimators and losses (pods/update/advantages.py, loss.py): today's give the bits
of the functions they replaced, the new ones match a hand computation, and all pass pods.testing."""

from __future__ import annotations

import pytest
import torch

from pods.testing import check_advantage, check_loss
from pods.update import ADVANTAGES, LOSSES, PolicyLoss, estimate_advantages, group_advantages, policy_loss
from pods.update.advantages import GroupNormSettings, MeanBaselineSettings
from pods.update.loss import DapoSettings, DrGrpoSettings


def old_policy_loss(
    logp, old_logp, adv, mask, epsilon, epsilon_high, ref_logp, beta, agg, num_tokens, num_seqs
):
    """pods/update/loss.py's policy_loss before the losses were registered, verbatim."""
    mask = mask.to(logp.dtype)
    eps_high = epsilon if epsilon_high is None else epsilon_high
    ratio = torch.exp(logp - old_logp)
    a = adv.unsqueeze(1)
    unclipped = -a * ratio
    clipped = -a * torch.clamp(ratio, 1 - epsilon, 1 + eps_high)
    per_token = torch.maximum(unclipped, clipped)
    kl = torch.zeros_like(per_token)
    if ref_logp is not None and beta > 0:
        d = ref_logp - logp
        kl = torch.exp(d) - d - 1
        per_token = per_token + beta * kl
    if agg == "token":
        return (per_token * mask).sum() / num_tokens
    per_seq = (per_token * mask).sum(1) / mask.sum(1).clamp(min=1)
    return per_seq.sum() / num_seqs


def inputs(seed=0, B=5, T=7):
    g = torch.Generator().manual_seed(seed)
    logp = -torch.rand(B, T, generator=g)
    old = logp + 0.2 * torch.randn(B, T, generator=g)
    ref = logp + 0.1 * torch.randn(B, T, generator=g)
    mask = (torch.rand(B, T, generator=g) > 0.3).long()
    return logp, old, torch.randn(B, generator=g), mask, ref


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("agg", ["token", "sequence"])
@pytest.mark.parametrize("beta,eps_high", [(0.0, None), (0.1, 0.28)])
def test_token_and_sequence_entries_give_the_old_loss_bit_for_bit(seed, agg, beta, eps_high):
    logp, old, adv, mask, ref = inputs(seed)
    algo = type("Algo", (), {"epsilon": 0.2, "epsilon_high": eps_high, "beta": beta})
    loss, _ = PolicyLoss.build(agg, None, algo, 512)(logp, old, adv, mask, ref_logp=ref, num_tokens=23.0,
                                                     num_seqs=5.0)  # fmt: skip
    assert torch.equal(loss, old_policy_loss(logp, old, adv, mask, 0.2, eps_high, ref, beta, agg, 23.0, 5.0))


@pytest.mark.parametrize("stats", ["kept", "full"])
@pytest.mark.parametrize("scale", [True, False])
def test_the_grpo_entry_gives_the_old_advantages_bit_for_bit(stats, scale):
    g = torch.Generator().manual_seed(0)
    everything = (torch.rand(6, 8, generator=g) > 0.5).float() + 0.1
    kept = everything[:, :4]
    got = estimate_advantages("grpo", kept, everything, GroupNormSettings(stats, scale))
    ref = everything if stats == "full" else None
    assert torch.equal(got, group_advantages(kept, scale, stats_from=ref).reshape(-1))


def test_rloo_is_the_leave_one_out_baseline_by_hand():
    r = torch.tensor([[1.0, 0.0, 0.0, 1.0], [3.0, 1.0, 2.0, 0.0], [0.1, 0.1, 0.1, 0.1]])
    adv = estimate_advantages("rloo", r, r).view(3, 4)
    # row 0: 1 - (0+0+1)/3 = 2/3 ; 0 - (1+0+1)/3 = -2/3
    assert adv[0].tolist() == pytest.approx([2 / 3, -2 / 3, -2 / 3, 2 / 3])
    # row 1: 3 - 3/3 = 2 ; 1 - 5/3 = -2/3 ; 2 - 4/3 = 2/3 ; 0 - 6/3 = -2
    assert adv[1].tolist() == pytest.approx([2.0, -2 / 3, 2 / 3, -2.0])
    assert adv[2].tolist() == [0.0] * 4  # equal rewards: exactly 0 (0.1 is not exact in binary)


def test_dr_grpo_advantage_is_the_mean_baseline_without_std():
    kept, everything = torch.tensor([[2.0, 0.0, 1.0]]), torch.tensor([[2.0, 0.0, 1.0, 5.0]])
    assert estimate_advantages("dr_grpo", kept, everything).tolist() == [1.0, -1.0, 0.0]  # mean 1
    full = estimate_advantages("dr_grpo", kept, everything, MeanBaselineSettings("full"))  # mean 2
    assert full.tolist() == [0.0, -2.0, -1.0]


def test_dr_grpo_loss_divides_by_a_constant_not_the_length_by_hand():
    """On policy (ratio 1) the per-token loss is -A: sequence sums -3 (3 tokens, A=1) and +2 (1 token, A=-2),
    each over the constant 10, then the mean over the 2 sequences."""
    logp, adv = torch.zeros(2, 3), torch.tensor([1.0, -2.0])
    mask = torch.tensor([[1, 1, 1], [1, 0, 0]])
    loss, _ = LOSSES["dr_grpo"](logp, logp, adv, mask, num_seqs=2.0, max_completion_len=10)
    assert loss.item() == pytest.approx((-3.0 + 2.0) / (2 * 10))
    loss, _ = LOSSES["dr_grpo"](logp, logp, adv, mask, num_seqs=2.0, max_completion_len=10, norm_len=4)
    assert loss.item() == pytest.approx((-3.0 + 2.0) / (2 * 4))  # loss.dr_grpo.norm_len wins


def test_dapo_loss_clips_low_and_high_apart_by_hand():
    old = torch.zeros(1, 3)
    logp = torch.log(torch.tensor([[1.5, 0.5, 1.25]]))  # ratios 1.5, 0.5, 1.25
    fn = LOSSES["dapo"]
    loss, st = fn(logp, old, torch.tensor([1.0]), torch.ones(1, 3), clip_low=0.2, clip_high=0.28)
    # A > 0: min(r, 1.28) per token -> 1.28, 0.5, 1.25 (the high clip is 0.28, not 0.2)
    assert loss.item() == pytest.approx(-(1.28 + 0.5 + 1.25) / 3) and st["clipped_tokens"].item() == 1
    loss, st = fn(logp, old, torch.tensor([-1.0]), torch.ones(1, 3), clip_low=0.2, clip_high=0.28)
    # A < 0: max(r, clip(r)) -> 1.5, 0.8 (the low clip), 1.25
    assert loss.item() == pytest.approx((1.5 + 0.8 + 1.25) / 3) and st["clipped_tokens"].item() == 1
    same, _ = policy_loss(logp, old, torch.tensor([-1.0]), torch.ones(1, 3), 0.2, 0.28)
    assert torch.equal(loss, same)  # = the token loss with algo.epsilon_high


@pytest.mark.parametrize("name", sorted(ADVANTAGES))
def test_every_shipped_advantage_conforms(name):
    check_advantage(name)


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_every_shipped_loss_conforms(name):
    check_loss(name)


def test_check_loss_catches_a_per_micro_batch_mean():
    def micro_mean(logp, old_logp, adv, mask):
        return (-adv[:, None] * torch.exp(logp - old_logp) * mask).sum() / mask.sum(), {}

    with pytest.raises(AssertionError, match="micro-batch losses sum to"):
        check_loss(micro_mean)


def test_check_loss_catches_a_gradient_on_padding_and_zero_advantage_rows():
    with pytest.raises(AssertionError, match="padding token"):
        check_loss(
            lambda logp, old_logp, adv, mask, num_tokens: (-(adv[:, None] * logp).sum() / num_tokens, {})
        )
    entropy = lambda logp, old_logp, adv, mask, num_tokens: (((-adv[:, None] - 0.01) * logp * mask).sum(), {})  # noqa: E731
    with pytest.raises(AssertionError, match="grad_at_zero_advantage"):
        check_loss(entropy)


def test_check_advantage_catches_a_flattened_result():
    with pytest.raises(AssertionError, match="shape"):
        check_advantage(lambda rewards: rewards.reshape(-1) - rewards.mean())


def test_settings_check_their_knobs():
    from pods.config import ConfigError

    for bad, key in [(DapoSettings(clip_low=1.0), "loss.dapo.clip_low"), (DrGrpoSettings(norm_len=-2), "norm_len"),
                     (MeanBaselineSettings("all"), "advantage.dr_grpo.stats")]:  # fmt: skip
        with pytest.raises(ConfigError, match=key):
            bad.check()


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_the_update_trains_with_every_shipped_loss(name):
    """policy_update with the loss built as UpdateStage builds it: the weights move and stay finite; the
    default (no loss given: the token mean) is the `token` entry, bit for bit, and the others differ from it."""
    import copy

    from pods.distributed import Dist
    from pods.update.step import policy_update
    from tests.update.test_numerics import TinyLM, batch, cfg

    torch.manual_seed(0)
    b, model0 = batch([1.0, -1.0, 0.5, -0.5], lengths=(3, 1, 2, 3)), TinyLM()
    weights = []
    for loss in (PolicyLoss.build(name, None, cfg().algo, 3), None):
        model = copy.deepcopy(model0)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
        c = cfg()
        policy_update(model, b, opt, sched, c.algo, c.update, c.optim, torch.device("cpu"), Dist(c.hardware, None),
                      None, loss)  # fmt: skip
        weights.append(torch.cat([p.detach().flatten() for p in model.parameters()]))
    before = torch.cat([p.flatten() for p in model0.parameters()])
    assert bool(torch.isfinite(weights[0]).all()) and not torch.equal(weights[0], before)
    # on policy (algo.mu = 1) every ratio is 1, so DAPO's clip range cannot act: it is the token mean too
    assert torch.equal(weights[0], weights[1]) == (name in ("token", "dapo"))
