"""Chunked token log-probs: same values and gradients as the plain float64 log-softmax, any chunking."""

from __future__ import annotations

import pytest
import torch

from pods.update.logprobs import token_logprobs
from tests.conftest import random_qwen2


def _reference(logits, target, temperature):
    x = logits.double() / temperature
    return x.log_softmax(-1).gather(-1, target.unsqueeze(-1)).squeeze(-1)


@pytest.mark.parametrize("chunk", [1, 7, 50, 1 << 25])  # 1 element -> one row per chunk; uneven; one chunk
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_values_and_gradients_match_log_softmax(chunk, temperature):
    g = torch.Generator().manual_seed(0)
    logits = (torch.randn(3, 5, 11, generator=g) * 4).requires_grad_()
    target = torch.randint(0, 11, (3, 5), generator=g)
    upstream = torch.randn(3, 5, generator=g)

    got = token_logprobs(logits, target, temperature, chunk_elements=chunk)
    (got * upstream).sum().backward()
    grad = logits.grad.clone()
    logits.grad = None
    ref = _reference(logits, target, temperature)
    (ref * upstream.double()).sum().backward()

    assert got.dtype == torch.float32 and got.shape == (3, 5)
    torch.testing.assert_close(got.double(), ref.detach(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(grad.double(), logits.grad.double(), rtol=1e-5, atol=1e-6)


def test_gradient_matches_the_analytic_formula():
    logits = torch.randn(4, 6, dtype=torch.float64, requires_grad=True)
    target = torch.tensor([0, 5, 2, 2])
    # chunks of one row; the maths inside is float32, so compare with (onehot - softmax) / t, not finite differences
    out = token_logprobs(logits, target, 1.3, chunk_elements=6)
    (out.sum()).backward()
    p = (logits.detach() / 1.3).softmax(-1)
    onehot = torch.nn.functional.one_hot(target, 6).double()
    torch.testing.assert_close(logits.grad, (onehot - p) / 1.3, rtol=1e-5, atol=1e-6)


def test_bfloat16_logits_keep_their_dtype_for_the_gradient():
    logits = torch.randn(2, 4, 9).bfloat16().requires_grad_()
    target = torch.randint(0, 9, (2, 4))
    out = token_logprobs(logits, target)
    out.sum().backward()
    assert out.dtype == torch.float32 and logits.grad.dtype == torch.bfloat16
    ref = _reference(logits.detach().float(), target, 1.0)
    torch.testing.assert_close(out.double(), ref, rtol=1e-5, atol=1e-5)  # float32 maths on bf16 inputs


def test_rejects_nonpositive_temperature():
    with pytest.raises(ValueError, match="temperature"):
        token_logprobs(torch.zeros(1, 3), torch.zeros(1, dtype=torch.long), 0.0)


def test_linear_token_logprobs_match_log_softmax_values_and_gradients():
    from pods.update.logprobs import linear_token_logprobs

    torch.manual_seed(0)
    h = torch.randn(3, 7, 16, dtype=torch.float64, requires_grad=True)
    w = torch.randn(50, 16, dtype=torch.float64, requires_grad=True)
    y, g = torch.randint(0, 50, (3, 7)), torch.randn(3, 7, dtype=torch.float64)
    got = linear_token_logprobs(h, w, y, 0.7, rows=4)  # chunks that do not divide the 21 positions
    (got.double() * g).sum().backward()
    grads = h.grad.clone(), w.grad.clone()
    h.grad = w.grad = None
    want = torch.log_softmax((h @ w.T) / 0.7, -1).gather(-1, y[..., None]).squeeze(-1)
    (want * g).sum().backward()
    assert torch.allclose(got.double(), want, atol=1e-5)
    assert torch.allclose(grads[0], h.grad, atol=1e-5) and torch.allclose(grads[1], w.grad, atol=1e-5)


def test_fused_completion_logprobs_equal_the_logits_path():
    """The update's fused path (hidden states through the tied head in chunks) gives the logits path's
    log-probs and gradients on a left-padded batch."""
    from pods.update.step import completion_logprobs

    model = random_qwen2(vocab=97, hidden=32, heads=4, kv_heads=2, tie_word_embeddings=True)
    ids = torch.randint(3, 97, (3, 12))
    am = torch.ones_like(ids)
    am[0, :3] = 0
    out = []
    for fused in (False, True):
        model.zero_grad()
        lp = completion_logprobs(model, ids, am, 5, 0.9, fused=fused)
        lp.sum().backward()
        out.append((lp.detach(), model.model.embed_tokens.weight.grad.clone()))
    assert torch.allclose(out[0][0], out[1][0], atol=1e-5)
    assert torch.allclose(out[0][1], out[1][1], atol=1e-5)


def test_linear_token_logprobs_compute_in_the_autocast_dtype_with_float32_grads():
    """Under autocast (float32 master weights, bf16 compute) the chunks run in bf16 in both passes; the
    log-probs and gradients come back float32, close to the float32 values."""
    from pods.update.logprobs import linear_token_logprobs

    torch.manual_seed(0)
    h = torch.randn(2, 5, 16, requires_grad=True)
    w = (0.3 * torch.randn(40, 16)).requires_grad_()
    y = torch.randint(0, 40, (2, 5))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = linear_token_logprobs(h, w, y, 0.9, rows=3)
    got.sum().backward()
    want = torch.log_softmax((h @ w.T) / 0.9, -1).gather(-1, y[..., None]).squeeze(-1)
    assert got.dtype == h.grad.dtype == w.grad.dtype == torch.float32
    assert torch.allclose(got, want, atol=0.05)
