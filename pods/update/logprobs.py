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


class _LinearTokenLogprobs(torch.autograd.Function):
    """log p(target) of logits = hidden @ weight.T / t, computed `rows` positions at a time: the (N, V)
    logits never exist whole, in the forward or the backward (which recomputes each chunk's logits)."""

    @staticmethod
    def forward(ctx, hidden, weight, target, temperature: float, rows: int):
        dtype = _compute_dtype(hidden)
        w = weight.to(dtype)  # the master weight may be float32: matmuls run in the compute dtype
        out = torch.empty(hidden.shape[0], dtype=torch.float32, device=hidden.device)
        lse = torch.empty_like(out)
        for s in range(0, hidden.shape[0], rows):
            x = (hidden[s : s + rows].to(dtype) @ w.T).float().div_(temperature)  # in place: one float copy
            lse[s : s + rows] = torch.logsumexp(x, -1)
            out[s : s + rows] = x.gather(-1, target[s : s + rows, None]).squeeze(-1) - lse[s : s + rows]
        ctx.save_for_backward(hidden, weight, target, lse)
        ctx.temperature, ctx.rows, ctx.dtype = temperature, rows, dtype
        return out

    @staticmethod
    def backward(ctx, grad_out):
        hidden, weight, target, lse = ctx.saved_tensors
        t, rows, dtype = ctx.temperature, ctx.rows, ctx.dtype  # backward runs outside autocast
        w = weight.to(dtype)
        grad_h = torch.empty_like(hidden) if ctx.needs_input_grad[0] else None
        grad_w = torch.zeros_like(weight, dtype=torch.float32) if ctx.needs_input_grad[1] else None
        g = grad_out.float()
        for s in range(0, hidden.shape[0], rows):
            h = hidden[s : s + rows].to(dtype)
            gs = g[s : s + rows, None]
            # d/dlogits [x_y / t - logsumexp(x / t)] = (onehot(y) - softmax(x / t)) / t
            gx = (h @ w.T).float().div_(t).sub_(lse[s : s + rows, None]).exp_().mul_(-gs)  # in place
            gx.scatter_add_(-1, target[s : s + rows, None], gs)
            gx = gx.div_(t).to(dtype)
            if grad_h is not None:
                grad_h[s : s + rows] = gx @ w
            if grad_w is not None:
                grad_w.add_(gx.T @ h)  # (V, H) in the compute dtype, summed in float32
        return grad_h, grad_w.to(weight.dtype) if grad_w is not None else None, None, None, None


def _compute_dtype(x: torch.Tensor) -> torch.dtype:
    """The dtype autocast would run a matmul of `x` in (its own dtype outside autocast)."""
    dev = x.device.type
    if torch.is_autocast_enabled(dev):
        return torch.get_autocast_dtype(dev)
    return x.dtype


def linear_token_logprobs(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    target: torch.Tensor,
    temperature: float = 1.0,
    rows: int | None = None,
) -> torch.Tensor:
    """(..., H) final hidden states, (V, H) output-embedding weight, (...) target ids -> (...) float32
    log p(target) under softmax(hidden @ weight.T / temperature), without the (..., V) logits: peak extra
    memory is about two chunks of `rows` x V float32 logits. Differentiable in both.

    `rows` (None: CHUNK_ELEMENTS / V, 220 positions for a 152k vocabulary) trades memory for matmul size:
    1024 positions hold ~2 GB of temporaries at once at V = 152k by count (the bf16 product, its float32
    copy, logsumexp's), 220 positions ~0.4 GB; a
    (220 x H) @ (H x 152k) matmul is still large enough to run near the card's peak."""
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    rows = rows or _rows_per_chunk(weight.shape[0], CHUNK_ELEMENTS)
    shape = target.shape
    flat = hidden.reshape(-1, hidden.shape[-1])
    out = _LinearTokenLogprobs.apply(flat, weight, target.reshape(-1), float(temperature), int(rows))
    return out.view(shape)
