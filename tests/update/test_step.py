"""Micro-batches planned by a token budget: every row once, the budget kept, the same update for any split."""

from __future__ import annotations

import copy

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from pods.distributed import Dist
from pods.update import layout as layout_mod
from pods.update import step as step_mod
from pods.update.layout import plan_micro_batches
from pods.update.step import policy_update
from tests.conftest import random_qwen2
from tests.update.test_causal_layout import _batch
from tests.update.test_numerics import TinyLM, batch, cfg


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.integers(1, 30), st.integers(1, 40)), min_size=1, max_size=40),
    st.integers(1, 16),
    st.integers(0, 400),
)
def test_plan_covers_every_row_once_within_the_budget(lengths, max_rows, max_tokens):
    p = torch.tensor([a for a, _ in lengths])
    c = torch.tensor([b for _, b in lengths])
    rows = torch.arange(len(lengths))
    plan = plan_micro_batches(rows, p, c, max_rows, max_tokens)
    assert sorted(torch.cat(plan).tolist()) == rows.tolist()
    for mb in plan:
        assert 1 <= len(mb) <= max_rows
        if max_tokens and len(mb) > 1:  # a lone row longer than the budget is allowed
            assert len(mb) * (int(p[mb].max()) + int(c[mb].max())) <= max_tokens


def test_plan_uses_the_rows_given():
    plan = plan_micro_batches(torch.tensor([5, 2]), torch.ones(8), torch.arange(8), 4, 0)
    assert [m.tolist() for m in plan] == [[5, 2]]


def test_any_split_gives_the_same_update():
    """Rows of different lengths; the loss normalisers are batch totals, so splitting by tokens or by rows
    changes only the summation order."""
    results = []
    torch.manual_seed(0)
    b = batch([1.0, -1.0, 0.5, -0.5], lengths=(3, 1, 2, 3))
    model0 = TinyLM()
    for rows, tokens, bucket in [(4, 0, 0), (1, 0, 0), (4, 5, 0), (2, 8, 0), (2, 8, 2), (1, 0, 4)]:
        model = copy.deepcopy(model0)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
        c = cfg()
        c.update.micro_batch_size, c.update.micro_batch_tokens = rows, tokens
        c.update.width_bucket = bucket  # padded widths: more masked columns, the same gradient
        stats = policy_update(
            model, b, opt, sched, c.algo, c.update, c.optim, torch.device("cpu"), Dist(c.hardware, None)
        )
        results.append((stats["update/loss"], [p.detach().clone() for p in model.parameters()]))
    for loss, params in results[1:]:
        assert abs(loss - results[0][0]) < 1e-6
        for p, q in zip(params, results[0][1]):
            assert torch.allclose(p, q, atol=1e-6)
    assert not torch.equal(results[0][1][0], next(model0.parameters()))  # the update did something


@pytest.mark.parametrize("agg", ["token", "sequence"])
@pytest.mark.parametrize("mu,beta", [(1, 0.0), (2, 0.1)])
def test_bucketed_rows_and_widths_give_the_same_update_on_a_real_model(agg, mu, beta):
    """Qwen2 rows of different prompt and completion lengths: rows padded to a multiple of 4 with rows that
    count for nothing, widths to a multiple of 8 past the batch's own (causal layout), against the masked
    unbucketed update. Same loss and weights; every micro-batch shape on the bucket grid."""
    b = _batch([6, 3, 1, 5, 2], [7, 2, 5, 1, 6])
    b.advantages = torch.tensor([1.0, -0.5, 0.25, -1.0, 0.5])
    model0 = random_qwen2(vocab=97, hidden=32, heads=4, kv_heads=2, tie_word_embeddings=True).float()
    results = []
    for causal, width, rows in [(False, 0, 0), (True, 8, 4), (True, 8, 8)]:
        model = copy.deepcopy(model0)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
        c = cfg()
        c.algo.loss_agg, c.algo.mu, c.algo.beta = agg, mu, beta
        c.update.micro_batch_size, c.update.fused_logprobs = 3, True  # micro-batches of 3 and 2 rows
        c.update.width_bucket, c.update.row_bucket = width, rows
        ref = copy.deepcopy(model0) if beta else None
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(layout_mod, "CAUSAL_LAYOUT", causal)
            stats = policy_update(
                model,
                b,
                opt,
                sched,
                c.algo,
                c.update,
                c.optim,
                torch.device("cpu"),
                Dist(c.hardware, None),
                ref,
            )
        if width:
            assert stats["update/width_max"] % width == 0 and stats["update/masked_micro_batches"] == 0
        results.append((stats["update/loss"], torch.cat([p.detach().flatten() for p in model.parameters()])))
    for loss, params in results[1:]:
        assert loss == pytest.approx(results[0][0], abs=1e-6)
        assert torch.allclose(params, results[0][1], atol=1e-6), (params - results[0][1]).abs().max()
    assert not torch.equal(results[0][1], torch.cat([p.flatten() for p in model0.parameters()]))


def test_sdpa_preference_puts_one_backend_first_and_restores_the_order():
    before = torch._C._get_sdp_priority_order()
    with step_mod.sdpa_preference("flash"):
        assert torch._C._get_sdp_priority_order()[0] == int(step_mod.SDPBackend.FLASH_ATTENTION)
    assert torch._C._get_sdp_priority_order() == before
    with step_mod.sdpa_preference("auto"):
        assert torch._C._get_sdp_priority_order() == before


@pytest.mark.parametrize("first", ["flash", "efficient", "math"])
def test_the_sdpa_backend_tried_first_does_not_change_the_update(first):
    """On a CPU flash and math run and efficient falls back to the others: the same weights after one step."""
    b = _batch([6, 3, 1, 5, 2], [7, 2, 5, 1, 6])
    b.advantages = torch.tensor([1.0, -0.5, 0.25, -1.0, 0.5])
    model0 = random_qwen2(vocab=97, hidden=32, heads=4, kv_heads=2).float()
    out = []
    for choice in ("auto", first):
        model = copy.deepcopy(model0)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
        c = cfg()
        c.update.sdpa = choice
        policy_update(
            model, b, opt, sched, c.algo, c.update, c.optim, torch.device("cpu"), Dist(c.hardware, None)
        )
        out.append(torch.cat([p.detach().flatten() for p in model.parameters()]))
    assert torch.allclose(out[0], out[1], atol=1e-5)
    assert not torch.equal(out[0], torch.cat([p.flatten() for p in model0.parameters()]))
