"""One policy update: log-probs of the kept completions, the loss in micro-batches, an optimizer step."""

from __future__ import annotations

import math
from contextlib import nullcontext
from dataclasses import dataclass

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from pods.batch import Rollouts
from pods.update.logprobs import linear_token_logprobs, token_logprobs
from pods.update.loss import policy_loss
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


def row_lengths(batch: Rollouts) -> tuple[torch.Tensor, torch.Tensor]:
    """(B,) real prompt tokens and (B,) real completion tokens of every row."""
    return batch.attention_mask[:, : batch.prompt_len].sum(1), batch.completion_mask.sum(1)


def plan_micro_batches(
    rows: torch.Tensor, prompt_lens: torch.Tensor, comp_lens: torch.Tensor, max_rows: int, max_tokens: int
) -> list[torch.Tensor]:
    """Split `rows` into micro-batches of at most `max_rows` rows and, when `max_tokens` > 0, at most
    `max_tokens` padded tokens (rows x (longest prompt + longest completion) in the micro-batch).

    Rows are taken longest first, so rows of similar length share a micro-batch and little compute goes to
    padding; a single row longer than the budget still gets a micro-batch of its own. The gradient is the
    same for any split (the loss normalisers are batch totals), only the memory and the speed change.

    >>> [m.tolist() for m in plan_micro_batches(torch.arange(4), torch.tensor([2, 2, 2, 2]),
    ...                                         torch.tensor([1, 8, 2, 6]), 8, 20)]
    [[1, 3], [2, 0]]
    """
    if len(rows) == 0:
        return []
    p, c = prompt_lens[rows], comp_lens[rows]
    order = rows[torch.argsort(p + c, descending=True, stable=True)]
    out, cur, pmax, cmax = [], [], 0, 0
    for r in order.tolist():
        pm, cm = max(pmax, int(prompt_lens[r])), max(cmax, int(comp_lens[r]))
        full = len(cur) >= max_rows or (max_tokens > 0 and (len(cur) + 1) * (pm + cm) > max_tokens)
        if cur and full:
            out.append(torch.tensor(cur))
            cur, pm, cm = [], int(prompt_lens[r]), int(comp_lens[r])
        cur.append(r)
        pmax, cmax = pm, cm
    out.append(torch.tensor(cur))
    return out


def bucket_up(width: int, bucket: int, cap: int | None = None) -> int:
    """`width` rounded up to a multiple of `bucket` (0 = as is), at most `cap` (None: no cap).

    >>> bucket_up(70, 64, 512), bucket_up(70, 0, 512), bucket_up(500, 64, 510), bucket_up(500, 64)
    (128, 70, 510, 512)
    """
    up = -(-width // bucket) * bucket if bucket > 0 else width
    return up if cap is None else min(up, cap)


def pad_rows(mb: torch.Tensor, bucket: int) -> torch.Tensor:
    """(n,) micro-batch rows -> (bucket_up(n, bucket),) rows: `mb`, then copies of its first row. The caller
    gives the copies zero advantage and zero completion mask, so they add exactly zero to the loss and its
    gradient (the normalisers are batch totals) while the micro-batch keeps one of a few row counts.
    Bounded cost: at most bucket - 1 extra rows per micro-batch, which may pass micro_batch_tokens by as much.

    >>> pad_rows(torch.tensor([4, 2, 7]), 4).tolist(), pad_rows(torch.tensor([4, 2, 7]), 0).tolist()
    ([4, 2, 7, 4], [4, 2, 7])
    """
    return torch.cat([mb, mb[:1].expand(bucket_up(len(mb), bucket) - len(mb))])


# The update hands the model no padding mask when it need not (causal_layout). False: the mask path of before,
# kept for benchmarks and tests that compare the two.
CAUSAL_LAYOUT = True


def causal_layout(
    ids: torch.Tensor, am: torch.Tensor, pw: int
) -> tuple[torch.Tensor, torch.Tensor | None] | None:
    """Host tensors (B, W) of the usual layout [left-padded prompt | right-padded completion] -> the same
    rows shifted left past their left padding (which wraps round to the end): (ids, prompt_lens), where
    prompt_lens (B,) is each row's real prompt length, or None when no row had left padding (nothing moved).

    Every real token then sits at its own position (0, 1, ...) with only padding after it, so causal
    attention alone gives each real token exactly the attention of the masked original: the model needs no
    padding mask. With a mask transformers' SDPA path expands the grouped KV heads and leaves the flash
    kernel for a masked one; without one it keeps both. None when some row's real tokens are not one run
    that starts in the prompt block (the caller keeps the mask then).

    >>> ids = torch.tensor([[0, 5, 6, 7, 0], [4, 5, 6, 7, 8]]); am = (ids > 0).long()
    >>> out, plens = causal_layout(ids, am, 2)
    >>> out.tolist(), plens.tolist()
    ([[5, 6, 7, 0, 0], [4, 5, 6, 7, 8]], [1, 2])
    """
    w = am.shape[1]
    n = am.sum(1)
    lead = am.argmax(1)  # first real column
    if bool((lead >= pw).any()) or bool((n == 0).any()):  # a row with no prompt token
        return None
    idx = (torch.arange(w)[None] + lead[:, None]) % w if bool(lead.any()) else None  # None: no left padding
    if idx is not None:
        am = am.gather(1, idx)
    if not torch.equal(am.bool(), torch.arange(w)[None] < n[:, None]):  # a hole in some row's real tokens
        return None
    return (ids, None) if idx is None else (ids.gather(1, idx), pw - lead)


def micro_view(
    batch: Rollouts,
    mb: torch.Tensor,
    lengths: tuple[torch.Tensor, torch.Tensor],
    device,
    bucket: int = 0,
    causal: bool | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None, int, int, torch.Tensor | None]:
    """The rows `mb`, cut to their own width: (ids, attention mask, prompt width, completion width, per-row
    prompt lengths). `lengths`: the batch's row_lengths, computed once per update. `bucket` > 0 rounds the
    completion width up to a multiple of it (at most the batch's) and so the row width (more padding, fewer
    distinct shapes: each is allocated and tuned once).

    `causal` (None: CAUSAL_LAYOUT): the rows in causal_layout and no mask (None) wherever that is exact; the
    prompt lengths are None when no row moved (every completion starts at the prompt width), else (B,) on
    the host. Only padding follows the real tokens there, so the rows are padded on the right to a multiple
    of `bucket`, past the batch's own columns: a run meets a couple of widths, whatever its prompts.
    Otherwise, and where causal_layout declines, the mask of the usual layout, prompt and completion widths
    each rounded up within the batch's, and None."""
    p_len, c_len = lengths
    pw = int(p_len[mb].max())
    cw = bucket_up(int(c_len[mb].max()), bucket, batch.completion_mask.shape[1])
    if CAUSAL_LAYOUT if causal is None else causal:
        cols = slice(batch.prompt_len - pw, batch.prompt_len + cw)
        laid = causal_layout(batch.input_ids[mb, cols], batch.attention_mask[mb, cols], pw)
        if laid is not None:  # pad id 0: any id will do after the real tokens (unscored or masked out)
            ids = torch.nn.functional.pad(laid[0], (0, bucket_up(pw + cw, bucket) - pw - cw))
            return ids.to(device), None, pw, cw, laid[1]
    pw = bucket_up(pw, bucket, batch.prompt_len)
    cols = slice(batch.prompt_len - pw, batch.prompt_len + cw)
    return batch.input_ids[mb, cols].to(device), batch.attention_mask[mb, cols].to(device), pw, cw, None


# hardware.update_sdpa -> the backend tried first; the rest follow as fallbacks for calls it cannot take
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


@dataclass(frozen=True)
class UpdateSettings:
    """What the update needs from the config (algo.*, optim.grad_clip, hardware micro-batching); no defaults
    here: they are the config's (pods/config.py)."""

    epsilon: float
    epsilon_high: float | None
    beta: float
    mu: int
    loss_agg: str
    grad_clip: float  # 0 = off
    micro_batch_size: int
    micro_batch_tokens: int  # 0 = rows only
    width_bucket: int  # 0 = each micro-batch cut to its own width
    row_bucket: int  # 0 = each micro-batch its own row count (pad_rows)
    fused_logprobs: bool  # head + log-prob a chunk at a time: no (B, Lc, V) logits
    sdpa: str  # hardware.update_sdpa: the attention kernel tried first (sdpa_preference)

    @classmethod
    def from_config(cls, cfg) -> UpdateSettings:
        a, hw = cfg.algo, cfg.hardware
        return cls(
            epsilon=a.epsilon,
            epsilon_high=a.epsilon_high,
            beta=a.beta,
            mu=a.mu,
            loss_agg=a.loss_agg,
            grad_clip=cfg.optim.grad_clip,
            micro_batch_size=hw.micro_batch_size,
            micro_batch_tokens=hw.micro_batch_tokens,
            width_bucket=hw.width_bucket,
            row_bucket=hw.row_bucket,
            fused_logprobs=hw.fused_logprobs,
            sdpa=hw.update_sdpa,
        )


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


def policy_update(
    model, batch: Rollouts | None, optimizer, scheduler, us: UpdateSettings, device, dist, ref_model=None
) -> dict[str, float]:
    """Run us.mu optimizer steps on `batch` (advantages set). Returns update/* metrics.

    Rows whose advantage is exactly 0 (zero-variance groups) contribute no gradient when beta = 0, so
    they are left out of the forward/backward pass but still count in the loss normaliser: the
    gradient is exactly the one of the full batch, computed on fewer rows. Normalisers are totals over
    all ranks (`dist` turns each rank's loss into its share of the global mean). The update's gc seconds
    and, on CUDA, allocator counters come with the metrics (pods/update/probe.py).
    """
    with UpdateProbe(device) as probe, sdpa_preference(us.sdpa):
        stats = _update(model, batch, optimizer, scheduler, us, device, dist, ref_model)
    return {**stats, **probe.metrics()}


def _update(
    model, batch, optimizer, scheduler, us: UpdateSettings, device, dist, ref_model
) -> dict[str, float]:
    if batch is None:  # this rank got no groups this step
        adv, mask = torch.zeros(0), torch.zeros(0, 0)
    else:
        adv, mask = batch.advantages, batch.completion_mask
    num_tokens = max(dist.sum(float(mask.sum())), 1.0)
    num_seqs = max(dist.sum(float(len(adv))), 1.0)
    live = adv != 0 if us.beta == 0 else torch.ones_like(adv, dtype=torch.bool)
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
        for _ in range(us.mu):
            scheduler.step()
        stats["update/skipped"] = 1.0
        return stats
    micro = (
        plan_micro_batches(rows, *lengths, us.micro_batch_size, us.micro_batch_tokens) if len(rows) else []
    )
    passes = dist.passes(len(micro))  # FSDP: every rank runs as many passes as the busiest one
    fwd = dist.forward_passes(len(micro))
    wb, rb, fu = us.width_bucket, us.row_bucket, us.fused_logprobs
    old = batch_logprobs(model, batch, micro, device, dist, fwd, wb, fu, rb) if us.mu > 1 and fwd else None
    ref = (
        batch_logprobs(ref_model, batch, micro, device, bucket=wb, row_bucket=rb)
        if us.beta > 0 and len(rows)
        else None
    )
    step = _Step(batch, lengths, old, ref, num_tokens, num_seqs)
    params = [p for p in model.parameters() if p.requires_grad]
    tot = {"loss": 0.0, "clipped_tokens": 0.0, "kl_sum": 0.0, "grad_norm": 0.0, "nonfinite": 0.0}
    tot.update(width_max=0, masked=0.0, new_shapes=0.0)  # this rank's micro-batch shapes (not summed)
    for _ in range(us.mu):
        optimizer.zero_grad(set_to_none=True)
        for i in range(passes):
            with dist.no_sync(model, enabled=i < passes - 1):  # one gradient reduction per step
                if i < len(micro):
                    _micro_step(model, step, micro[i], us, device, dist, tot)
                else:  # a rank with fewer rows still joins every collective
                    dist.empty_backward(model, device)
        max_norm = us.grad_clip if us.grad_clip > 0 else math.inf
        gnorm = torch.nn.utils.clip_grad_norm_(params, max_norm)
        gnorm = float(gnorm.full_tensor() if hasattr(gnorm, "full_tensor") else gnorm)  # FSDP: a DTensor
        if not math.isfinite(gnorm):  # never let a NaN/inf gradient reach the weights
            optimizer.zero_grad(set_to_none=True)
            tot["nonfinite"] += 1
        else:
            optimizer.step()
        scheduler.step()
        tot["grad_norm"] += gnorm / us.mu
    live_tokens = max(stats["update/tokens"] * us.mu, 1.0)
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
            "update/masked_micro_batches": tot["masked"] / us.mu,
            "update/new_shapes": tot["new_shapes"],
        }
    )
    return stats


# (rows, width, masked) of every micro-batch this process has trained on: update/new_shapes counts first
# sightings, the steps where a first-time allocation or kernel choice can cost time (issue 18, target 5)
_SEEN_SHAPES: set[tuple[int, int, bool]] = set()


def _micro_step(model, step: _Step, mb: torch.Tensor, us: UpdateSettings, device, dist, tot: dict) -> None:
    b = step.batch
    idx = pad_rows(mb, us.row_bucket)  # (R,) mb, then padding rows that count for nothing
    real = torch.arange(len(idx)) < len(mb)  # (R,)
    ids, am, pw, cw, plens = micro_view(b, idx, step.lengths, device, us.width_bucket)
    shape = (len(idx), ids.shape[1], am is not None)
    tot["width_max"] = max(tot["width_max"], ids.shape[1])
    tot["masked"] += float(am is not None)
    tot["new_shapes"] += float(shape not in _SEEN_SHAPES)
    _SEEN_SHAPES.add(shape)
    logp = completion_logprobs(model, ids, am, pw, b.sampling.temperature, us.fused_logprobs, plens, cw)
    loss, st = policy_loss(
        logp,
        step.old[idx, :cw].to(device) if step.old is not None else logp.detach(),  # on-policy: ratio 1
        torch.where(real, b.advantages[idx], 0.0).to(device, logp.dtype),
        (b.completion_mask[idx, :cw] * real[:, None]).to(device),
        us.epsilon,
        us.epsilon_high,
        step.ref[idx, :cw].to(device) if step.ref is not None else None,
        us.beta,
        us.loss_agg,
        step.num_tokens,
        step.num_seqs,
    )
    dist.backward_share(loss)  # the loss is already a global mean: each rank backpropagates its share
    tot["loss"] += loss.item() / us.mu
    tot["clipped_tokens"] += st["clipped_tokens"].item()
    tot["kl_sum"] += st["kl_sum"].item()
