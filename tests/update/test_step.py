"""Micro-batches planned by a token budget: every row once, the budget kept, the same update for any split."""

from __future__ import annotations

import copy

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from pods.distributed import Dist
from pods.update.step import UpdateSettings, plan_micro_batches, policy_update
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
        c.hardware.micro_batch_size, c.hardware.micro_batch_tokens = rows, tokens
        c.hardware.width_bucket = bucket  # padded widths: more masked columns, the same gradient
        us = UpdateSettings.from_config(c)
        stats = policy_update(model, b, opt, sched, us, torch.device("cpu"), Dist(c.hardware, None))
        results.append((stats["update/loss"], [p.detach().clone() for p in model.parameters()]))
    for loss, params in results[1:]:
        assert abs(loss - results[0][0]) < 1e-6
        for p, q in zip(params, results[0][1]):
            assert torch.allclose(p, q, atol=1e-6)
    assert not torch.equal(results[0][1][0], next(model0.parameters()))  # the update did something
