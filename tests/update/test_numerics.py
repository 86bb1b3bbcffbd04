"""No NaN reaches the loss or the weights: zero-variance groups, non-finite rewards, empty completions."""

from dataclasses import asdict
from types import SimpleNamespace

import torch

from pods.batch import Rollouts
from pods.config import UpdateConfig
from pods.distributed import Dist
from pods.reward.registry import sanitize_rewards
from pods.update import group_advantages
from pods.update.step import policy_update


class TinyLM(torch.nn.Module):
    def __init__(self, vocab=11):
        super().__init__()
        self.emb = torch.nn.Embedding(vocab, 8)
        self.head = torch.nn.Linear(8, vocab)

    def forward(self, input_ids, attention_mask=None, position_ids=None, logits_to_keep=0, use_cache=False):
        logits = self.head(self.emb(input_ids))
        return SimpleNamespace(logits=logits[:, -logits_to_keep:] if logits_to_keep else logits)


def cfg():
    return SimpleNamespace(
        algo=SimpleNamespace(beta=0.0, mu=1, epsilon=0.2, epsilon_high=None, loss_agg="token"),
        hardware=SimpleNamespace(distributed="none"),
        # every field of the update section at its default (mutable here: tests set their layout)
        update=SimpleNamespace(**asdict(UpdateConfig(micro_batch_size=2))),
        optim=SimpleNamespace(grad_clip=1.0),
    )


def batch(adv, lengths=(3, 3, 3, 3)):
    B, lp, lc = len(adv), 2, 3
    cmask = torch.tensor([[1] * n + [0] * (lc - n) for n in lengths])
    ids = torch.randint(1, 10, (B, lp + lc))
    am = torch.cat([torch.ones(B, lp, dtype=torch.long), cmask], 1)
    return Rollouts(
        ids, am, lp, cmask, [""] * B, [0, 1], 2, advantages=torch.tensor(adv, dtype=torch.float32)
    )


def run_update(adv, lengths=(3, 3, 3, 3)):
    torch.manual_seed(0)
    model = TinyLM()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    opt = torch.optim.AdamW(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    c = cfg()
    stats = policy_update(
        model,
        batch(adv, lengths),
        opt,
        sched,
        c.algo,
        c.update,
        c.optim,
        torch.device("cpu"),
        Dist(c.hardware, None),
    )
    changed = any(not torch.equal(before[k], v) for k, v in model.state_dict().items())
    finite = all(torch.isfinite(v).all() for v in model.state_dict().values())
    return stats, changed, finite


def test_sanitize_rewards_counts_and_zeroes_nonfinite():
    r, bad = sanitize_rewards(torch.tensor([[1.0, float("nan")], [float("inf"), -float("inf")]]))
    assert bad == 3 and r.tolist() == [[1.0, 0.0], [0.0, 0.0]]


def test_all_equal_rewards_give_zero_advantages_and_no_update():
    adv = group_advantages(torch.full((2, 2), 0.7)).reshape(-1)
    assert torch.equal(adv, torch.zeros(4))
    stats, changed, finite = run_update(adv.tolist())
    assert stats["update/skipped"] == 1.0 and not changed and finite


def test_normal_update_changes_weights():
    stats, changed, finite = run_update([1.0, -1.0, 0.5, -0.5])
    assert changed and finite and stats["update/skipped"] == 0.0 and stats["update/rows"] == 4


def test_nonfinite_gradient_never_reaches_the_weights():
    stats, changed, finite = run_update([float("nan"), 1.0, -1.0, 0.0])
    assert stats["update/nonfinite_grad_steps"] == 1.0
    assert not changed and finite


def test_empty_completions_are_left_out():
    stats, changed, finite = run_update([1.0, -1.0, 1.0, -1.0], lengths=(0, 3, 0, 3))
    assert stats["update/rows"] == 2 and changed and finite


def test_lockstep_rank_without_groups_runs_only_dummy_forwards():
    """FSDP with mu > 1: a rank that got no groups still joins every forward (a collective) and returns None."""
    from pods.update.step import batch_logprobs

    calls = []

    def model(**kw):
        calls.append(kw["input_ids"].shape)
        return SimpleNamespace(logits=torch.zeros(1, 1, 4))

    out = batch_logprobs(model, None, [], torch.device("cpu"), Dist(cfg().hardware, None), passes=3)
    assert out is None and calls == [torch.Size([1, 1])] * 3
