"""Grouped-query attention for decoding that reads each key/value head once.

transformers' `sdpa` attention expands the grouped KV heads (`repeat_kv`) whenever an attention mask is
given, which with left-padded rollouts is always: every decode step then writes and reads the whole KV cache
`num_heads / num_kv_heads` times over (8x at Qwen2.5-3B's shape, 7x at 0.5B), a cost that grows with rows
and cache length. Here the query heads of a group are folded into the query length instead:

    query (B, Hkv * G, q, D) -> (B, Hkv, G * q, D)     key, value (B, Hkv, L, D) as they are
    mask  (B, 1, q, L)       -> (B, 1, G * q, L)       (a view for q = 1, one copy of the mask otherwise)

which is the same attention (each query row still sees its own mask row), computed by one SDPA call that
reads K and V once. Registered as `pods_sdpa`; only the generation copy uses it.

Given a flex_attention `BlockMask` instead of a mask tensor (the graph loop's decode step with
`rollout.hf.decode_attention=flex`, issue 38), the same function runs torch's flex_attention, which visits
only the cache blocks the mask names: `DecodeBlockMask` names each row's blocks from its first prompt token to
the last filled column, so a decode step reads the columns filled so far (prompt plus tokens decoded) instead of
the whole static cache.
cuDNN's SDPA, the default, costs nearly the same at every filled width (one H200: 108-109 us a layer-step from
80 to 128 columns at 1,024 rows); flex_attention's compiled decode kernel follows the width (46.7 us at 64 to
89.9 at 144; results/step_cost/h200_decode_width/). Same attention up to rounding: another summation order.
"""

from __future__ import annotations

import warnings

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

try:  # torch >= 2.5 (flex decode tested on 2.11 and 2.13); older: rollout.hf.decode_attention=flex is refused
    from torch.nn.attention.flex_attention import BlockMask, flex_attention
except ImportError:  # pragma: no cover - the project's torch has it
    BlockMask = flex_attention = None

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
    if BlockMask is not None and isinstance(attention_mask, BlockMask):
        unsupported = {
            k: kwargs[k] for k in ("sliding_window", "softcap", "s_aux") if kwargs.get(k) is not None
        }
        if unsupported:  # the block mask encodes full attention over the filled cache only
            raise ValueError(f"pods_sdpa: the flex decode mask cannot apply {unsupported}")
        return flex_forward(query, key, value, attention_mask, scaling), None
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
    return out.reshape(b, h, q, value.shape[-1]).transpose(1, 2).contiguous(), None


def flex_decode_refusal(config) -> str | None:
    """Why a model's decode steps cannot take the flex block mask (None if they can): DecodeBlockMask encodes
    full causal attention over the filled cache and nothing else, and flex_forward replaces SDPA inside the
    `sdpa` / pods_sdpa attention only.

    >>> from transformers import Qwen2Config
    >>> flex_decode_refusal(Qwen2Config(attn_implementation="sdpa")) is None
    True
    >>> flex_decode_refusal(Qwen2Config(attn_implementation="sdpa", layer_types=["sliding_attention"] * 32))
    "layer types ['sliding_attention']: only full attention"
    """
    attn = getattr(config, "_attn_implementation", None)
    if attn not in ("sdpa", NAME):
        return f"attention {attn!r}: only sdpa"
    if BlockMask is None:
        return f"torch {torch.__version__} has no flex_attention (2.5 or later; tested on 2.11 and 2.13)"
    types = set(getattr(config, "layer_types", None) or [])
    if types - {"full_attention"}:
        return f"layer types {sorted(types)}: only full attention"
    if getattr(config, "sliding_window", None) and not types:  # no layer types to say the window is unused
        return f"sliding_window={config.sliding_window}: only full attention"
    for key in ("attn_logit_softcapping", "attention_chunk_size"):
        if getattr(config, key, None):
            return f"{key}={getattr(config, key)}: only plain softmax attention"
    return None


def decode_queries(heads: int, kv_heads: int) -> int:
    """Query rows per KV head that a flex decode step passes: 1 (the query heads grouped by `enable_gqa`) where
    torch's flex decoding kernel takes the group, i.e. a power-of-two number of query heads per KV head; else the
    group's size G, its query heads folded into the query length as pods_sdpa folds them (Qwen2.5-0.5B and 7B:
    G = 7, 1.5B: 6), since flex_attention's other kernel cannot run on 16-column blocks.

    >>> [decode_queries(h, kv) for h, kv in ((4, 2), (16, 2), (14, 2), (12, 2), (8, 8))]
    [1, 1, 7, 6, 1]
    """
    groups = heads // kv_heads
    return 1 if groups & (groups - 1) == 0 else groups


def flex_forward(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, block_mask: BlockMask, scaling: float | None
) -> torch.Tensor:
    """(B, H, q, D) queries, (B, Hkv, L, D) keys and values, a block mask of (B, 1, q, L) -> (B, q, H, D):
    flex_attention over the blocks the mask visits, grouped KV heads read once: by `enable_gqa`, or, with a
    mask made for G * q query rows (decode_queries), with each group's query heads folded into its query length.
    Compiled with the forward around it on the graph loop's CUDA path; called eagerly (a CPU) it computes the
    same attention densely, which torch warns about (once a process): that warning is silenced here."""
    b, h, q, d = query.shape
    hkv = key.shape[1]
    groups = h // hkv
    fold = groups > 1 and block_mask.seq_lengths[0] == groups * q
    if fold:
        if q != 1:  # the mask's rows would be (head, position) pairs it does not tell apart: decode only
            raise ValueError(f"flex_forward folds grouped heads for one query a row, got {q}")
        query = query.reshape(b, hkv, groups * q, d)  # head j * G + g, position t -> row g * q + t of group j
    kw = dict(block_mask=block_mask, scale=scaling, enable_gqa=groups > 1 and not fold)
    if torch.compiler.is_compiling():
        out = flex_attention(query, key, value, **kw)
    else:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")
            out = flex_attention(query, key, value, **kw)
    return out.reshape(b, h, q, value.shape[-1]).transpose(1, 2).contiguous()


def visited_blocks(filled: torch.Tensor, block: int) -> torch.Tensor:
    """Filled cache columns (a tensor: read on the device, no host sync) -> the number of `block`-column blocks
    that hold them.

    >>> visited_blocks(torch.tensor([1, 16, 17, 144]), 16).tolist()
    [1, 1, 2, 9]
    """
    return (filled + block - 1) // block


class DecodeBlockMask:
    """flex_attention's block mask for one-query decode steps over a static cache whose attendable columns are
    the (B, L) boolean buffer `keep` (read at each call: it may change in place).

    Each row visits the blocks from the one holding its first attendable column (`start_at`: a left-padded
    prompt's padding blocks are skipped) to the one holding column filled - 1 (`fill_to`), and within them
    attends the columns `keep` allows: padding and unfilled columns stay masked as with the tensor mask. Both
    are set in place from device tensors, so a captured CUDA graph that calls `fill_to` follows the decode
    without re-capture (H200: flex outputs equal SDPA's within bf16 rounding after in-place updates inside one
    graph, scripts/device/flex_decode_check.py; this class's mask at hub head shapes, and the headline policy's
    greedy tokens through the decoder, in tests/rollout/test_decode_attention.py's gpu tests). Columns past L,
    in a last partial block, are masked. The visited blocks only spare the compiled kernel what they leave out;
    the mask itself is `keep`, so `keep` must allow no column before a row's start or at or past `filled` (the
    decoder fills columns in order after the left-padded prompt), and the dense eager path, which reads every
    block, gives the same attention.
    `queries`: the query rows a step passes (decode_queries: 1, or a KV group's folded query heads), all in one
    query block."""

    def __init__(self, keep: torch.Tensor, block: int = 16, queries: int = 1):
        if BlockMask is None:
            raise RuntimeError(f"torch {torch.__version__} has no flex_attention")
        rows, width = keep.shape
        self.block, self.nblocks = block, -(-width // block)
        dev = keep.device
        self.counts = torch.zeros(rows, 1, 1, dtype=torch.int32, device=dev)  # blocks visited, per row
        self.first = torch.zeros(rows, 1, 1, dtype=torch.int32, device=dev)  # each row's first visited block
        self.steps = torch.arange(self.nblocks, dtype=torch.int32, device=dev)
        self.order = self.steps.expand(rows, 1, 1, self.nblocks).contiguous()  # the blocks, in visiting order

        def attendable(b, h, q, kv):
            return keep[b, kv.clamp(max=width - 1)] & (kv < width)

        self.mask = BlockMask.from_kv_blocks(
            self.counts,
            self.order,
            BLOCK_SIZE=(block * -(-queries // block), block),
            mask_mod=attendable,
            seq_lengths=(queries, width),
        )

    def start_at(self, first_cols: torch.Tensor) -> None:
        """(B,) each row's first attendable column: its visits begin at that column's block."""
        first = (first_cols.to(self.first.device) // self.block).to(torch.int32).view(-1, 1, 1)
        self.first.copy_(first)
        self.order.copy_((first[..., None] + self.steps).clamp(max=self.nblocks - 1))

    def fill_to(self, filled: torch.Tensor) -> None:
        """Visit the blocks up to the one holding column filled - 1 ((1,) or scalar long tensor, on the device)."""
        self.counts.copy_(visited_blocks(filled, self.block).to(torch.int32).reshape(1, 1, 1) - self.first)


def register() -> str:
    """Make `pods_sdpa` a valid attn_implementation (idempotent); returns its name."""
    AttentionInterface.register(NAME, grouped_sdpa_forward)
    AttentionMaskInterface.register(NAME, sdpa_mask)
    return NAME
