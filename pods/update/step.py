"""One policy update: log-probs of the kept completions, the loss in micro-batches, an optimizer step."""

from __future__ import annotations

import math
from contextlib import nullcontext
from dataclasses import dataclass

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from pods.batch import Rollouts
from pods.config import AlgoConfig, OptimConfig, UpdateConfig
from pods.update.layout import micro_view, pad_rows, plan_micro_batches, row_lengths
from pods.update.logprobs import linear_token_logprobs, token_logprobs
from pods.update.loss import PolicyLoss
from pods.update.probe import UpdateProbe


def _plain_head(model) -> torch.nn.Linear | None:
    """The output projection when it is a plain Linear with a whole (unsharded) weight, else None (an
    adapter on the head, an FSDP shard): then the logits come from the model itself."""
    inner = getattr(model, "module", model)  # DDP
    inner = inner.get_base_model() if hasattr(inner, "get_base_model") else inner
    head = inner.get_output_embeddings() if hasattr(inner, "get_output_embeddings") else None
    ok = type(head) is torch.nn.Linear and not hasattr(head.weight, "full_tensor")
    return head if ok else None


def completion_logprobs(
    model,
    input_ids,
    attention_mask,
    prompt_len: int,
    temperature: float = 1.0,
    fused: bool = False,
    prompt_lens: torch.Tensor | None = None,  # (B,) on the host, from causal_layout
    width: int | None = None,  # completion columns scored (None: every column after prompt_len)
) -> torch.Tensor:
    """(B, Lp + Lc) sequences -> (B, Lc) log-probs of each completion token under `model`.

    Logits are divided by the sampling temperature so the ratio compares the policy that sampled.
    Only the last Lc + 1 positions get logits (`logits_to_keep`): the vocabulary projection of the
    prompt is never materialised. `fused`: not even those; the final hidden states go through the head
    a chunk of positions at a time (pods/update/logprobs.py: linear_token_logprobs).

    `attention_mask=None`: the rows are in the layout `causal_layout` makes (real tokens first, padding
    only after them), so causal attention alone is exact for every real token and no padding mask reaches
    the attention (SDPA keeps its flash kernel and grouped KV heads). Row i's completion then starts at
    column `prompt_lens[i]` (None: at `prompt_len` in every row) and runs `Lc` columns (its padding past the real
    tokens is scored too and masked out by the loss). `width` sets Lc when the rows run past the last
    completion (micro_view pads them to a bucketed width); the columns after it are never scored.
    """
    lc = input_ids.shape[1] - prompt_len if width is None else width
    if attention_mask is None:
        b, w = input_ids.shape
        position_ids = torch.arange(w, device=input_ids.device).expand(b, w)
    else:
        position_ids = (attention_mask.cumsum(1) - 1).clamp(min=0)  # left padding: positions start at 0
    head = _plain_head(model) if fused else None
    if prompt_lens is not None:  # per-row completion starts: position p_i - 1 + j predicts token j
        starts = prompt_lens.to(input_ids.device)[:, None] - 1
        cols = starts + torch.arange(lc, device=input_ids.device)  # (B, Lc) in [0, W - 2]
        rows = torch.arange(input_ids.shape[0], device=input_ids.device)[:, None]
        targets = input_ids[rows, cols + 1]
    else:
        targets = input_ids[:, prompt_len : prompt_len + lc]
    if head is not None:
        out = model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            logits_to_keep=torch.zeros(0, dtype=torch.long, device=input_ids.device),  # no logits
            output_hidden_states=True,
            use_cache=False,
        )
        h = out.hidden_states[-1]  # (B, W, H), after the final norm
        hidden = h[rows, cols] if prompt_lens is not None else h[:, prompt_len - 1 : prompt_len - 1 + lc]
        return linear_token_logprobs(hidden, head.weight, targets, temperature)
    earliest = prompt_len if prompt_lens is None else int(prompt_lens.min())  # first completion column
    keep = input_ids.shape[1] - earliest + 1
    out = model(
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=position_ids,
        logits_to_keep=keep,
        use_cache=False,
    )
    if prompt_lens is None:
        # (B, Lc, V): position t predicts token t+1; float32 maths chunk by chunk (pods/update/logprobs.py)
        return token_logprobs(out.logits[:, :lc], targets, temperature)
    # per-row starts: log-probs of the kept positions up to the last one scored (float32, (B, n)), then each
    # row's Lc of them (the head still projects the trailing padding: only the fused path skips it)
    first = input_ids.shape[1] - keep  # column of the first kept position
    n = int(prompt_lens.max()) - 1 + lc - first  # (host tensor: no device sync)
    lp = token_logprobs(out.logits[:, :n], input_ids[:, first + 1 : first + 1 + n], temperature)
    return lp.gather(1, cols - first)


# update.sdpa -> the backend tried first; the rest follow as fallbacks for calls it cannot take
SDPA_FIRST = {
    "flash": SDPBackend.FLASH_ATTENTION,
    "cudnn": SDPBackend.CUDNN_ATTENTION,
    "efficient": SDPBackend.EFFICIENT_ATTENTION,
    "math": SDPBackend.MATH,
}


def sdpa_preference(name: str):
    """A context in which scaled_dot_product_attention tries backend `name` first ("auto": torch's order,
    untouched). On an H100, torch 2.11 tries cuDNN first; cuDNN builds an execution plan for every new
    attention shape, a first-time cost the flash kernel does not have (issue 18, target 5)."""
    if name == "auto":
        return nullcontext()
    first = SDPA_FIRST[name]
    return sdpa_kernel([first, *(b for b in SDPA_FIRST.values() if b != first)], set_priority=True)


@torch.no_grad()
def batch_logprobs(
    model,
    batch: Rollouts | None,
    mbs: list[torch.Tensor],
    device,
    dist=None,
    passes: int = 0,
    bucket: int = 0,
    fused: bool = False,
    row_bucket: int = 0,
) -> torch.Tensor | None:
    """Log-probs of the rows of micro-batches `mbs` at the batch's sampling temperature; under lock-step
    (FSDP) `dist` runs empty forwards up to `passes` in all. A rank with no groups (batch None) returns None.
    `bucket`, `row_bucket`: the update's width and row buckets, so these forwards meet its shapes."""
    out = None if batch is None else torch.zeros(batch.completion_mask.shape, dtype=torch.float32)
    lengths = row_lengths(batch) if mbs else None
    for mb in mbs:
        ids, am, pw, cw, plens = micro_view(batch, pad_rows(mb, row_bucket), lengths, device, bucket)
        t = batch.sampling.temperature
        lp = completion_logprobs(model, ids, am, pw, t, fused, plens, cw)
        out[mb, :cw] = lp[: len(mb)].cpu()
    for _ in range(passes - len(mbs)):
        dist.empty_forward(model, device)
    return out


@dataclass
class _Step:
    """One optimizer step's fixed inputs, shared by its micro-batches."""

    batch: Rollouts
    lengths: tuple[torch.Tensor, torch.Tensor]  # (B,) real prompt and completion tokens per row
    old: torch.Tensor | None  # (B, Lc) behaviour log-probs when mu > 1, else None (on-policy)
    ref: torch.Tensor | None  # (B, Lc) reference log-probs when beta > 0
    num_tokens: float  # loss normalisers: totals over the whole batch (all ranks)
    num_seqs: float
    loss: PolicyLoss


def policy_update(
    model,
    batch: Rollouts | None,
    optimizer,
    scheduler,
    algo: AlgoConfig,
    layout: UpdateConfig,
    optim: OptimConfig,
    device,
    dist,
    ref_model=None,
    loss: PolicyLoss | None = None,
) -> dict[str, float]:
    """Run algo.mu optimizer steps on `batch` (advantages set): the loss is `loss` (None: the token mean, or
    `algo.loss_agg`, with algo's clip range and beta), the micro-batches are cut
    and shaped as `layout` (the update section) says, gradients clipped at optim.grad_clip. Returns update/*
    metrics.

    Rows whose advantage is exactly 0 (zero-variance groups) contribute no gradient when beta = 0, so
    they are left out of the forward/backward pass but still count in the loss normaliser: the
    gradient is exactly the one of the full batch, computed on fewer rows. Normalisers are totals over
    all ranks (`dist` turns each rank's loss into its share of the global mean). The update's gc seconds
    and, on CUDA, allocator counters come with the metrics (pods/update/probe.py).
    """
    with UpdateProbe(device) as probe, sdpa_preference(layout.sdpa):
        if loss is None:
            loss = PolicyLoss.build(getattr(algo, "loss_agg", None) or "token", None, algo)
        stats = _update(
            model, batch, optimizer, scheduler, algo, layout, optim.grad_clip, device, dist, ref_model, loss
        )
    return {**stats, **probe.metrics()}


def _update(
    model,
    batch,
    optimizer,
    scheduler,
    algo: AlgoConfig,
    layout: UpdateConfig,
    grad_clip: float,
    device,
    dist,
    ref_model,
    loss: PolicyLoss,
) -> dict[str, float]:
    if batch is None:  # this rank got no groups this step
        adv, mask = torch.zeros(0), torch.zeros(0, 0)
    else:
        adv, mask = batch.advantages, batch.completion_mask
    num_tokens = max(dist.sum(float(mask.sum())), 1.0)
    num_seqs = max(dist.sum(float(len(adv))), 1.0)
    every_row = algo.beta > 0 or loss.grad_at_zero_advantage  # else a 0 advantage gives no gradient
    live = torch.ones_like(adv, dtype=torch.bool) if every_row else adv != 0
    rows = (
        torch.nonzero(live & (mask.sum(1) > 0)).squeeze(1) if len(adv) else torch.zeros(0, dtype=torch.long)
    )
    global_rows = dist.sum(float(len(rows)))
    lengths = row_lengths(batch) if len(rows) else None
    prompt_tokens = float(lengths[0][rows].sum()) if len(rows) else 0.0
    stats = {
        "update/rows": global_rows,
        "update/tokens": dist.sum(float(mask[rows].sum()) if len(rows) else 0.0),
        "update/prompt_tokens": dist.sum(prompt_tokens),  # real prompt tokens of those rows
        "update/skipped": 0.0,
    }
    if global_rows == 0:  # every group had zero variance: nothing to learn, keep the schedule moving
        for _ in range(algo.mu):
            scheduler.step()
        stats["update/skipped"] = 1.0
        return stats
    micro = (
        plan_micro_batches(rows, *lengths, layout.micro_batch_size, layout.micro_batch_tokens)
        if len(rows)
        else []
    )
    passes = dist.passes(len(micro))  # FSDP: every rank runs as many passes as the busiest one
    fwd = dist.forward_passes(len(micro))
    wb, rb, fu = layout.width_bucket, layout.row_bucket, layout.fused_logprobs
    old = batch_logprobs(model, batch, micro, device, dist, fwd, wb, fu, rb) if algo.mu > 1 and fwd else None
    ref = (
        batch_logprobs(ref_model, batch, micro, device, bucket=wb, row_bucket=rb)
        if algo.beta > 0 and len(rows)
        else None
    )
    step = _Step(batch, lengths, old, ref, num_tokens, num_seqs, loss)
    params = [p for p in model.parameters() if p.requires_grad]
    tot = {"loss": 0.0, "clipped_tokens": 0.0, "kl_sum": 0.0, "grad_norm": 0.0, "nonfinite": 0.0}
    tot.update(width_max=0, masked=0.0, new_shapes=0.0)  # this rank's micro-batch shapes (not summed)
    keep = not layout.fsdp_reshard_after_forward  # FSDP: one all-gather per layer per optimizer step
    for _ in range(algo.mu):
        optimizer.zero_grad(set_to_none=True)
        for i in range(passes):
            if keep:
                dist.keep_gathered(model, True, last=i == passes - 1)
            with dist.no_sync(model, enabled=i < passes - 1):  # one gradient reduction per step
                if i < len(micro):
                    _micro_step(model, step, micro[i], algo, layout, device, dist, tot)
                else:  # a rank with fewer rows still joins every collective
                    dist.empty_backward(model, device)
        if keep:  # the last backward resharded every layer; back to FSDP2's defaults
            dist.keep_gathered(model, False, last=True)
        max_norm = grad_clip if grad_clip > 0 else math.inf
        gnorm = torch.nn.utils.clip_grad_norm_(params, max_norm)
        gnorm = float(gnorm.full_tensor() if hasattr(gnorm, "full_tensor") else gnorm)  # FSDP: a DTensor
        if not math.isfinite(gnorm):  # never let a NaN/inf gradient reach the weights
            optimizer.zero_grad(set_to_none=True)
            tot["nonfinite"] += 1
        else:
            optimizer.step()
        scheduler.step()
        tot["grad_norm"] += gnorm / algo.mu
    live_tokens = max(stats["update/tokens"] * algo.mu, 1.0)
    stats.update(
        {
            "update/loss": dist.sum(tot["loss"]),
            "update/grad_norm": tot["grad_norm"],
            "update/clip_frac": dist.sum(tot["clipped_tokens"]) / live_tokens,
            "update/kl": dist.sum(tot["kl_sum"]) / live_tokens,
            "update/nonfinite_grad_steps": tot["nonfinite"],
            "update/lr": scheduler.get_last_lr()[0],
            # this rank's micro-batches, per optimizer step: how many, the widest (prompt + completion
            # columns), how many passed a padding mask, how many had a shape not trained on before
            "update/micro_batches": float(len(micro)),
            "update/width_max": float(tot["width_max"]),
            "update/masked_micro_batches": tot["masked"] / algo.mu,
            "update/new_shapes": tot["new_shapes"],
        }
    )
    return stats


# (rows, width, masked) of every micro-batch this process has trained on: update/new_shapes counts first
# sightings, the steps where a first-time allocation or kernel choice can cost time (issue 18, target 5)
_SEEN_SHAPES: set[tuple[int, int, bool]] = set()


def _micro_step(
    model, step: _Step, mb: torch.Tensor, algo: AlgoConfig, layout: UpdateConfig, device, dist, tot: dict
) -> None:
    b = step.batch
    idx = pad_rows(mb, layout.row_bucket)  # (R,) mb, then padding rows that count for nothing
    real = torch.arange(len(idx)) < len(mb)  # (R,)
    ids, am, pw, cw, plens = micro_view(b, idx, step.lengths, device, layout.width_bucket)
    shape = (len(idx), ids.shape[1], am is not None)
    tot["width_max"] = max(tot["width_max"], ids.shape[1])
    tot["masked"] += float(am is not None)
    tot["new_shapes"] += float(shape not in _SEEN_SHAPES)
    _SEEN_SHAPES.add(shape)
    logp = completion_logprobs(model, ids, am, pw, b.sampling.temperature, layout.fused_logprobs, plens, cw)
    old = step.old[idx, :cw].to(device) if step.old is not None else logp.detach()  # on-policy: ratio 1
    adv = torch.where(real, b.advantages[idx], 0.0).to(device, logp.dtype)
    loss, st = step.loss(
        logp,
        old,
        adv,
        (b.completion_mask[idx, :cw] * real[:, None]).to(device),
        ref_logp=step.ref[idx, :cw].to(device) if step.ref is not None else None,
        num_tokens=step.num_tokens,
        num_seqs=step.num_seqs,
    )
    dist.backward_share(loss)  # the loss is already a global mean: each rank backpropagates its share
    value = loss.item()
    step.loss.check_finite(value, logp, old, adv)  # before any optimizer step of a NaN: named, not the lr
    tot["loss"] += value / algo.mu
    tot["clipped_tokens"] += float(st.get("clipped_tokens", 0.0))
    tot["kl_sum"] += float(st.get("kl_sum", 0.0))
