"""Per-token log-probabilities from logits without a float32 copy of the whole (B, L, V) tensor.

The textbook `logits.float().log_softmax(-1).gather(...)` keeps several float32 tensors of the full
vocabulary size alive (the cast, the scaled copy saved for backward, exp() inside logsumexp), and its
backward allocates more: for a 151k-token vocabulary, 16 completions of 512 tokens that is ~5 GB per
float32 copy. Here the forward and the backward both walk over chunks of positions: the only full-size
tensors are the logits themselves and their gradient, in the logits' own dtype. The maths is float32.
"""

from __future__ import annotations

import torch

CHUNK_ELEMENTS = 1 << 25  # float32 temporaries per chunk: 32M elements = 128 MB


def _rows_per_chunk(vocab: int, chunk_elements: int) -> int:
    return max(1, chunk_elements // max(vocab, 1))


class _TokenLogprobs(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, target, temperature: float, chunk_elements: int):
        n, v = logits.shape
        rows = _rows_per_chunk(v, chunk_elements)
        out = torch.empty(n, dtype=torch.float32, device=logits.device)
        lse = torch.empty(n, dtype=torch.float32, device=logits.device)
        for s in range(0, n, rows):
            x = logits[s : s + rows].float() / temperature
            lse[s : s + rows] = torch.logsumexp(x, -1)
            out[s : s + rows] = x.gather(-1, target[s : s + rows, None]).squeeze(-1) - lse[s : s + rows]
        ctx.save_for_backward(logits, target, lse)
        ctx.temperature, ctx.rows = temperature, rows
        return out

    @staticmethod
    def backward(ctx, grad_out):
        logits, target, lse = ctx.saved_tensors
        t, rows = ctx.temperature, ctx.rows
        grad = torch.empty_like(logits)
        g = grad_out.float()
        for s in range(0, logits.shape[0], rows):
            # d/dx [x_y / t - logsumexp(x / t)] = (onehot(y) - softmax(x / t)) / t
            gs = g[s : s + rows, None]
            gx = torch.exp(logits[s : s + rows].float() / t - lse[s : s + rows, None]).mul_(-gs)
            gx.scatter_add_(-1, target[s : s + rows, None], gs)
            grad[s : s + rows] = gx.div_(t)
        return grad, None, None, None


def token_logprobs(
    logits: torch.Tensor, target: torch.Tensor, temperature: float = 1.0, chunk_elements: int = CHUNK_ELEMENTS
) -> torch.Tensor:
    """(..., V) logits and (...) target ids -> (...) float32 log p(target) under softmax(logits / temperature).

    Differentiable with respect to `logits`; peak extra memory is one chunk of `chunk_elements` float32
    values, not a float32 copy of `logits`.
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    shape = target.shape
    flat = logits.reshape(-1, logits.shape[-1])
    out = _TokenLogprobs.apply(flat, target.reshape(-1), float(temperature), int(chunk_elements))
    return out.view(shape)
