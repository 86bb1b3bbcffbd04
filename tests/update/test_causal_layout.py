"""The update hands the model no padding mask (issue 18, target 5): rows are shifted past their left padding
so causal attention alone is exact. Same log-probs and gradients as the masked layout; SDPA sees no mask."""

from __future__ import annotations

import pytest
import torch

from pods.batch import Rollouts
from pods.update import layout as layout_mod
from pods.update.layout import causal_layout, micro_view, row_lengths
from pods.update.step import completion_logprobs
from tests.conftest import random_qwen2


def _batch(prompt_lens, comp_lens, lp=6, lc=7, vocab=97, seed=0) -> Rollouts:
    """Rows of the generation layout: left-padded prompts, right-padded completions (pad id 0)."""
    g = torch.Generator().manual_seed(seed)
    b = len(prompt_lens)
    ids = torch.randint(3, vocab, (b, lp + lc), generator=g)
    pm = torch.arange(lp)[None] >= lp - torch.tensor(prompt_lens)[:, None]
    cm = torch.arange(lc)[None] < torch.tensor(comp_lens)[:, None]
    am = torch.cat([pm, cm], 1).long()
    ids = ids * am  # padding: id 0
    return Rollouts(ids, am, lp, cm.long(), [""] * b, [0], b, advantages=torch.ones(b))


def _scored(model, batch, causal: bool, fused: bool, bucket: int = 0):
    """micro_view of the whole batch, then the completion log-probs and the gradient of their masked sum:
    (ids, attention mask, real-token log-probs, flattened gradients)."""
    mb, lengths = torch.arange(len(batch.texts)), row_lengths(batch)
    cmask = batch.completion_mask.bool()
    model.zero_grad()
    ids, am, pw, cw, plens = micro_view(batch, mb, lengths, torch.device("cpu"), bucket, causal)
    lp = completion_logprobs(model, ids, am, pw, 0.9, fused, plens, cw)
    assert lp.shape == (len(mb), cw)
    (lp * cmask[:, :cw]).sum().backward()
    grads = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
    return ids, am, lp.detach()[cmask[:, :cw]], grads


def _assert_same(a, b) -> None:
    """Two _scored results: the same log-probs and gradients (float32)."""
    assert torch.allclose(a[2], b[2], atol=1e-5), (a[2] - b[2]).abs().max()
    assert torch.allclose(a[3], b[3], atol=1e-5), (a[3] - b[3]).abs().max()


CASES = {
    "all full length": ([6, 6, 6], [7, 7, 7]),
    "one stopped early": ([6, 6, 6], [7, 2, 7]),
    "left and right padding": ([6, 3, 1], [7, 2, 5]),
}


@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("case", list(CASES))
def test_causal_layout_gives_the_masked_log_probs_and_gradients(case, fused):
    model = random_qwen2(vocab=97, hidden=32, heads=4, kv_heads=2, tie_word_embeddings=True).float()
    batch = _batch(*CASES[case])
    masked, causal = _scored(model, batch, False, fused), _scored(model, batch, True, fused)
    assert masked[1] is not None and causal[1] is None  # every case here has one run of real tokens per row
    _assert_same(masked, causal)


def test_sdpa_gets_no_mask_and_keeps_grouped_heads_when_a_completion_stops_early(monkeypatch):
    """The call 4 case: one completion shorter than the rest. The masked layout made transformers pass a 4D
    mask and repeat the KV heads (no flash kernel on CUDA); the causal layout passes is_causal and GQA."""
    model = random_qwen2(vocab=97, hidden=32, heads=4, kv_heads=2, tie_word_embeddings=True).float()
    calls = []
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def spy(q, k, v, attn_mask=None, **kw):
        calls.append((attn_mask is None, kw.get("is_causal"), kw.get("enable_gqa"), k.shape[1]))
        return sdpa(q, k, v, attn_mask=attn_mask, **kw)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)
    for case in ("one stopped early", "left and right padding"):
        batch = _batch(*CASES[case])
        calls.clear()
        ids, am, pw, _, plens = micro_view(batch, torch.arange(3), row_lengths(batch), torch.device("cpu"))
        completion_logprobs(model, ids, am, pw, 1.0, True, plens).sum().backward()
        assert calls and all(c == (True, True, True, 2) for c in calls), (case, calls)
    monkeypatch.setattr(layout_mod, "CAUSAL_LAYOUT", False)  # the old path, for contrast
    calls.clear()
    batch = _batch(*CASES["one stopped early"])
    ids, am, pw, _, plens = micro_view(batch, torch.arange(3), row_lengths(batch), torch.device("cpu"))
    completion_logprobs(model, ids, am, pw, 1.0, True, plens)
    assert calls and all(c[0] is False and c[3] == 4 for c in calls)  # a mask, KV heads repeated


def test_causal_layout_declines_rows_it_cannot_make_exact():
    ids = torch.arange(1, 9).reshape(2, 4)
    hole = torch.tensor([[1, 1, 0, 1], [1, 1, 1, 1]])  # a padding column between real tokens
    assert causal_layout(ids, hole, 2) is None
    no_prompt = torch.tensor([[0, 0, 1, 1], [1, 1, 1, 1]])
    assert causal_layout(ids, no_prompt, 2) is None
    full = torch.ones(2, 4, dtype=torch.long)
    out, plens = causal_layout(ids, full, 2)
    assert out is ids and plens is None


@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("case", list(CASES))
def test_width_padded_past_the_batch_gives_the_unbucketed_log_probs_and_gradients(case, fused):
    """Under the causal layout the row width is a multiple of the bucket even past the batch's own 13 columns
    (pad tokens on the right, never scored): the masked, unbucketed path's log-probs and gradients."""
    model = random_qwen2(vocab=97, hidden=32, heads=4, kv_heads=2, tie_word_embeddings=True).float()
    batch = _batch(*CASES[case])
    masked, bucketed = _scored(model, batch, False, fused), _scored(model, batch, True, fused, bucket=8)
    assert bucketed[1] is None and bucketed[0].shape[1] == 16  # 6 + 7 columns, padded up to 16
    _assert_same(masked, bucketed)


def test_a_row_that_breaks_the_layout_keeps_the_mask_within_the_batch_width():
    """Where causal_layout declines (a hole in a row), the bucketed widths stay within the batch's own."""
    batch = _batch([6, 3, 1], [7, 2, 5])
    batch.attention_mask[0, 2] = 0  # a hole inside row 0's prompt
    ids, am, pw, cw, plens = micro_view(batch, torch.arange(3), row_lengths(batch), torch.device("cpu"), 4)
    assert am is not None and plens is None
    assert (pw, cw) == (6, 7) and ids.shape == (3, 13)  # 6 -> 8 and 7 -> 8, each capped at the batch's
