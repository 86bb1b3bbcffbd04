"""The rollout's defaults that depend on the machine: rows per generate call and the fast decode (issue 52).

PODS generates n = 64 rollouts a prompt to train on 16: that costs little more than 16 only if the rows of a
step decode *together*, one generate call, since a decode step of a small policy costs about the same at 256
rows as at 1,024. So on a GPU `rollout.batch_size=auto` (the default) sizes a call from memory:

    rows = the largest power of two with  rows x bytes a row  <=  memory_fraction x card  - what this run
           already holds  - the update's weight-sized state not yet allocated   (and <= the card's free memory,
           counting this process's cached, unused blocks as free)
    bytes a row = its static KV cache (2 x layers x KV heads x head dim x cache length x dtype bytes)
                  + the sampling step's float32 logits (3 vocab-sized rows) + one layer's prefill activations

The update's activations are not counted: the graph loop frees its caches before the update
(`rollout.hf.release_cache`, on); with it off they are reserved too. A number set in the config wins. On a CPU
the rows stay CPU_ROWS, the earlier default, so a CPU run draws what it drew before; on the 2-core machine the
default run's 512 rollout rows cost the same in calls of 128, 256 or 512 (min 2,857 / 2,825 / 2,864 ms,
`scripts/bench_cpu_batch.py`, results/step_cost/cpu_batch/, 2026-11-29).

`rollout.hf.decode_attention=auto` takes flex_attention over the filled cache blocks where the graph loop runs
on CUDA and the model's attention is one it can express, SDPA otherwise; `rollout.hf.share_prefill=auto` prefills each
distinct prompt once where the graph loop runs. Both are settled before the model loads (pods/memory.py: settle_rollout), so
config.yaml and every checkpoint hold what ran, and one log line says which and why.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch

log = logging.getLogger("pods")

CPU_ROWS = 256  # rows per generate call on a CPU: the earlier default (see the module docstring)
MAX_ROWS = 8192  # at most this many rows a call: one CUDA graph capture per row count, and bounded waits
RESERVE_BYTES = 1 << 30  # kept free beside the estimate: the allocator's blocks, cuBLAS workspaces, graphs


@dataclass(frozen=True)
class RowChoice:
    rows: int  # rows per generate call
    why: str  # one line: how it was chosen


def kv_bytes_per_token(hf_config, dtype_bytes: int) -> int:
    """Bytes of keys and values one token takes in every layer's cache.

    >>> from transformers import Qwen2Config  # Qwen2.5-0.5B's attention: 24 layers, 2 KV heads of 64
    >>> kv_bytes_per_token(Qwen2Config(num_hidden_layers=24, hidden_size=896, num_attention_heads=14,
    ...                                num_key_value_heads=2), 2)
    12288
    """
    heads = hf_config.num_attention_heads
    kv_heads = getattr(hf_config, "num_key_value_heads", None) or heads
    head_dim = getattr(hf_config, "head_dim", None) or hf_config.hidden_size // heads
    return 2 * hf_config.num_hidden_layers * kv_heads * head_dim * dtype_bytes


def bytes_per_row(hf_config, cache_len: int, prompt_len: int, dtype_bytes: int) -> int:
    """Device bytes one row of a generate call needs: its KV cache of `cache_len` tokens, the sampling step's
    float32 logits (logits, warped, probabilities) and one layer's activations of its `prompt_len`-token
    prefill (hidden states, q/k/v/o and the MLP's three projections; layers run one after another)."""
    kv = kv_bytes_per_token(hf_config, dtype_bytes) * cache_len
    logits = 3 * 4 * hf_config.vocab_size
    inter = getattr(hf_config, "intermediate_size", None) or 4 * hf_config.hidden_size
    prefill = prompt_len * (6 * hf_config.hidden_size + 3 * inter) * dtype_bytes
    return kv + logits + prefill


def rows_that_fit(budget: int, per_row: int, cap: int = MAX_ROWS) -> int:
    """The largest power of two of rows whose bytes fit `budget`, at most `cap`; 0 if not even one fits.

    >>> rows_that_fit(100 * 2**20, 2**20), rows_that_fit(2**40, 2**20), rows_that_fit(10, 2**20)
    (64, 8192, 0)
    """
    fit = budget // per_row if per_row > 0 else cap
    return 0 if fit < 1 else min(cap, 1 << (int(fit).bit_length() - 1))


def update_state_bytes(model) -> int:
    """Weight-sized state the update allocates at its first step (pods/memory.py counts it): AdamW's two
    moments and a gradient per trainable parameter, in the parameter's dtype (float32 master weights: 12
    bytes). The policy's own weights are on the device already."""
    return sum(3 * p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)


def choose_rows(
    hf_config, device, cache_len: int, prompt_len: int, dtype_bytes: int, model, fraction: float,
    update_reserve: int = 0,
) -> RowChoice:  # fmt: skip
    """rollout.batch_size=auto: rows per generate call for this device (see the module docstring)."""
    device = torch.device(device)
    if device.type != "cuda":
        return RowChoice(
            CPU_ROWS, f"{device.type}: {CPU_ROWS}, the earlier default (a CPU run draws as before)"
        )
    total = torch.cuda.get_device_properties(device).total_memory
    held = torch.cuda.memory_allocated(device)
    # free on the card, plus what this process's allocator holds cached but unused (its to reuse): the driver
    # counts the cache as taken, so a second Trainer in one process (a benchmark's next setting) saw too little
    free = torch.cuda.mem_get_info(device)[0] + torch.cuda.memory_reserved(device) - held
    state = update_state_bytes(model) + update_reserve
    budget = min(int(fraction * total) - held, free) - state - RESERVE_BYTES
    per_row = bytes_per_row(hf_config, cache_len, prompt_len, dtype_bytes)
    rows = rows_that_fit(budget, per_row)
    gib = 2**30
    why = (
        f"{per_row / 2**20:.1f} MiB a row (KV cache of {cache_len} tokens, logits, prefill) into "
        f"{max(budget, 0) / gib:.1f} GiB: rollout.memory_fraction={fraction} of {total / gib:.0f} GiB, less "
        f"{held / gib:.1f} GiB held, {state / gib:.1f} GiB for the update's state and {RESERVE_BYTES / gib:.0f} "
        f"GiB spare (free now {free / gib:.1f} GiB)"
    )
    if rows == 0:
        from pods.errors import ConfigError

        raise ConfigError(
            f"rollout.batch_size=auto: not one row fits: {why}; raise rollout.memory_fraction, shorten "
            "model.max_prompt_len / model.max_completion_len, or set rollout.batch_size"
        )
    return RowChoice(rows, f"{rows} rows, at most {MAX_ROWS}: {why}")


def fast_decode(
    hf, graph_loop: bool, attn_implementation: str, hf_config, device_type: str = "cuda"
) -> tuple[str, bool, str]:
    """rollout.hf.decode_attention and share_prefill with `auto` decided: (attention, share_prefill, why).
    Flex only on CUDA: its decode kernel is a compiled Triton one; the graph loop on a CPU (rollout.hf.compile=
    true) runs flex_attention eagerly, unfused: the CPU tests that train on it took 41-44 CPU-s with flex and
    14-18 with SDPA (results/ci_time/, 2026-11-29)."""
    from pods.rollout.attention import flex_decode_refusal

    share = hf.share_prefill if hf.share_prefill != "auto" else graph_loop
    attn = hf.decode_attention
    if attn != "auto":
        return attn, share, f"decode attention {attn}, share_prefill {share}: set in the config"
    if not graph_loop:
        why = "no graph loop here (transformers' generate() decodes: rollout.hf.compile is on for CUDA only)"
        return "sdpa", share, f"decode attention sdpa, share_prefill {share}: {why}"
    if device_type != "cuda":
        why = (
            f"flex's decode kernel is CUDA's (on {device_type} flex_attention runs eagerly, slower than SDPA)"
        )
        return "sdpa", share, f"share_prefill {share}, decode attention sdpa: {why}"
    refusal = f"attention {attn_implementation!r}: only sdpa" if attn_implementation != "sdpa" else None
    if refusal is None and hf_config is not None:
        cfg = hf_config.__class__.from_dict(hf_config.to_dict())
        cfg._attn_implementation = attn_implementation
        refusal = flex_decode_refusal(cfg)
    head = f"share_prefill {share}, decode attention"
    if refusal is not None:
        return "sdpa", share, f"{head} sdpa: flex cannot decode this policy: {refusal}"
    return "flex", share, f"{head} flex (graph loop; the cache blocks filled so far)"
