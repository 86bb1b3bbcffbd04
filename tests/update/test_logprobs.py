"""Chunked token log-probs: same values and gradients as the plain float64 log-softmax, any chunking."""

from __future__ import annotations

import pytest
import torch

from pods.update.logprobs import token_logprobs


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
