"""Which block size should the flex decode attention visit the cache in? (issue 38; follows flex_decode_check.py)

pods' DecodeBlockMask (pods/rollout/attention.py) visits the cache in blocks of `block` columns up to the filled
width. Small blocks skip more empty columns; large ones let the kernel read more keys per iteration. At headline
v4's decode shape (4 query heads over 2 KV heads of 96, bf16, a 144-wide cache, one query a row) and its two row
counts (GRPO 16/16: 256 rows; PODS 64/16: 1,024), each call is timed inside a captured CUDA graph of 20 calls
(the decoder's own path: the compiled flex_forward, the block count set in place) at filled widths 64 to 144,
for blocks of 16, 32, 64 and 128 columns, beside the grouped cuDNN SDPA over the whole cache that decode steps use
by default. Outputs are checked against SDPA (max |difference|) at each setting.

    python3 scripts/device/flex_block_micro.py     # on a lent GPU; prints one markdown table
"""

import torch
import torch.nn.functional as F
from decode_width_micro import capture, replay_us  # this folder's (run as scripts/device/...py)

from pods.rollout.attention import DecodeBlockMask, flex_forward
from pods.rollout.hf import _raise_recompile_limit

H, HKV, D, FULL = 4, 2, 96, 144
WIDTHS = (64, 96, 124, 144)


def measure(rows: int, flex) -> list[str]:
    """Table lines for one row count: cuDNN SDPA, then flex at each block size."""
    g = torch.Generator(device="cuda").manual_seed(rows)
    q = torch.randn(rows, H, 1, D, device="cuda", dtype=torch.bfloat16, generator=g)
    k, v = torch.randn(2, rows, HKV, FULL, D, device="cuda", dtype=torch.bfloat16, generator=g)
    start = torch.randint(0, 9, (rows,), device="cuda", generator=g)  # each row's left padding
    cols = torch.arange(FULL, device="cuda")
    keep = torch.zeros(rows, FULL, dtype=torch.bool, device="cuda")
    out = torch.empty(rows, 1, H, D, device="cuda", dtype=torch.bfloat16)

    def set_width(w: int) -> None:
        keep.copy_((cols >= start[:, None]) & (cols < w))

    def sdpa() -> None:  # pods_sdpa's grouped call: the query heads of a group folded into its length
        o = F.scaled_dot_product_attention(
            q.reshape(rows, HKV, H // HKV, D), k, v, attn_mask=keep[:, None, None]
        )
        out.copy_(o.reshape(rows, H, 1, D).transpose(1, 2))

    graph = capture(sdpa)
    cells = []
    for w in WIDTHS:
        set_width(w)
        cells.append(f"{replay_us(graph):.1f}")
    lines = [f"| {rows} | cuDNN SDPA, whole cache | " + " | ".join(cells) + " | - |"]
    filled = torch.zeros(1, dtype=torch.long, device="cuda")
    for block in (16, 32, 64, 128):
        bm = DecodeBlockMask(keep, block=block)

        def call(bm=bm) -> None:
            bm.fill_to(filled)  # in the graph, as in the decoder's step
            out.copy_(flex(q, k, v, bm.mask, None))

        graph = capture(call)
        cells, diff = [], 0.0
        for w in WIDTHS:
            set_width(w)
            filled.fill_(w)
            cells.append(f"{replay_us(graph):.1f}")
            ref = F.scaled_dot_product_attention(q, k, v, attn_mask=keep[:, None, None], enable_gqa=True)
            diff = max(diff, (out.float() - ref.transpose(1, 2).float()).abs().max().item())
        lines.append(f"| {rows} | flex, {block}-column blocks | " + " | ".join(cells) + f" | {diff:.1e} |")
    return lines


def main() -> None:
    print(torch.cuda.get_device_name(), torch.__version__)
    _raise_recompile_limit(64)  # one compile per (rows, block size)
    flex = torch.compile(flex_forward, dynamic=False)
    lines = ["| rows | attention | " + " | ".join(f"width {w} us" for w in WIDTHS) + " | max abs diff vs SDPA |",
             "|---|---|" + "---|" * (len(WIDTHS) + 1)]  # fmt: skip
    for rows in (256, 1024):
        lines += measure(rows, flex)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
