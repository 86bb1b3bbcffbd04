"""Grouped-query attention for decoding that reads each key/value head once.

transformers' `sdpa` attention expands the grouped KV heads (`repeat_kv`) whenever an attention mask is
given, which with left-padded rollouts is always: every decode step then writes and reads the whole KV cache
`num_heads / num_kv_heads` times over (8x at Qwen2.5-3B's shape, 7x at 0.5B), a cost that grows with rows
and cache length. Here the query heads of a group are folded into the query length instead:

    query (B, Hkv * G, q, D) -> (B, Hkv, G * q, D)     key, value (B, Hkv, L, D) as they are
    mask  (B, 1, q, L)       -> (B, 1, G * q, L)       (a view for q = 1, one copy of the mask otherwise)

which is the same attention (each query row still sees its own mask row), computed by one SDPA call that
reads K and V once. Registered as `pods_sdpa`; only the generation copy uses it.
"""

from __future__ import annotations

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

NAME = "pods_sdpa"


def grouped_sdpa_forward(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """Same signature and result as transformers' sdpa_attention_forward: (B, q, H, D) and None."""
    groups = getattr(module, "num_key_value_groups", 1)
    if groups == 1 or attention_mask is None:  # nothing to expand, or SDPA's own enable_gqa applies
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout, scaling, **kwargs)
    b, h, q, d = query.shape
    hkv = key.shape[1]
    folded = query.reshape(b, hkv, groups * q, d)  # head j * G + g, position t -> row g * q + t of group j
    if attention_mask.shape[1] != 1:
        raise ValueError("pods_sdpa: a per-head attention mask cannot be folded")
    if q > 1:
        mask = attention_mask.unsqueeze(2).expand(-1, -1, groups, -1, -1).reshape(b, 1, groups * q, -1)
    else:
        mask = attention_mask  # (B, 1, 1, L) broadcasts over the G rows
    out = torch.nn.functional.scaled_dot_product_attention(
        folded, key, value, attn_mask=mask, dropout_p=dropout, scale=scaling
    )  # (B, Hkv, G * q, D)
    return out.reshape(b, h, q, d).transpose(1, 2).contiguous(), None


def register() -> str:
    """Make `pods_sdpa` a valid attn_implementation (idempotent); returns its name."""
    AttentionInterface.register(NAME, grouped_sdpa_forward)
    AttentionMaskInterface.register(NAME, sdpa_mask)
    return NAME
