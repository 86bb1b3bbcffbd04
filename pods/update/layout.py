"""How the update lays out its rows: micro-batches planned by a row and token budget, widths and row counts on
a grid (few shapes), and the causal layout that lets the model run without a padding mask."""

from __future__ import annotations

import torch

from pods.batch import Rollouts


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
