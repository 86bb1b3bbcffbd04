"""Can flex_attention be the graph loop's decode attention? (issue 38; follows decode_width_micro.py)

Three questions at headline v4's shape (1,024 rows x 4 heads, one query, head dim 96, bf16, a static cache
144 wide, 16-column blocks), each row with its own left padding and its own filled width:

1. Does it give SDPA's output? Max |difference| against cuDNN SDPA and the math backend (float32 inputs cast
   from the same bf16 values) with the equivalent boolean mask.
2. Inside one captured CUDA graph, does an in-place update of the rows' filled widths (the tensor the mask reads
   and the block mask's per-row block counts) take effect on replay? Output checked against SDPA after each of
   several updates, with no new capture.
3. What does one call cost inside that graph as the filled width grows, with no re-capture?

    python3 scripts/device/flex_decode_check.py     # on a lent GPU (torch's own build only)
"""

import torch
import torch.nn.functional as F
from decode_width_micro import capture, replay_us  # this folder's (run as scripts/device/...py)
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.attention.flex_attention import BlockMask, flex_attention

B, H, D, FULL, BLOCK = 1024, 4, 96, 144, 16
NBLK = FULL // 16 + (FULL % 16 > 0)


def main() -> None:
    print(torch.cuda.get_device_name(), torch.__version__)
    g = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(B, H, 1, D, device="cuda", dtype=torch.bfloat16, generator=g)
    k = torch.randn(B, H, FULL, D, device="cuda", dtype=torch.bfloat16, generator=g)
    v = torch.randn(B, H, FULL, D, device="cuda", dtype=torch.bfloat16, generator=g)
    start = torch.randint(0, 9, (B,), device="cuda", generator=g)  # each row's left padding
    filled = torch.zeros(B, dtype=torch.long, device="cuda")  # columns < filled hold keys (updated in place)

    def mod(b, h, qi, kv):
        return (kv >= start[b]) & (kv < filled[b])

    kv_num_blocks = torch.zeros(B, 1, 1, dtype=torch.int32, device="cuda")  # the blocks to visit, per row
    kv_indices = torch.arange(NBLK, device="cuda", dtype=torch.int32).expand(B, 1, 1, NBLK).contiguous()
    bm = BlockMask.from_kv_blocks(kv_num_blocks, kv_indices, BLOCK_SIZE=(BLOCK, BLOCK), mask_mod=mod,
                                  seq_lengths=(1, FULL))  # fmt: skip
    flex = torch.compile(flex_attention, dynamic=False)

    def set_filled(widths: torch.Tensor) -> None:
        filled.copy_(widths)
        kv_num_blocks.copy_(((widths + BLOCK - 1) // BLOCK).to(torch.int32).view(B, 1, 1))

    def reference(backend) -> torch.Tensor:
        cols = torch.arange(FULL, device="cuda")
        m = (cols >= start[:, None]) & (cols < filled[:, None])  # (B, FULL)
        with sdpa_kernel([backend]):
            if backend == SDPBackend.MATH:
                return F.scaled_dot_product_attention(
                    q.float(), k.float(), v.float(), attn_mask=m[:, None, None]
                )
            return F.scaled_dot_product_attention(q, k, v, attn_mask=m[:, None, None])

    out = torch.empty_like(q)
    set_filled(torch.randint(49, 125, (B,), device="cuda", generator=g))

    def call() -> None:
        out.copy_(flex(q, k, v, block_mask=bm))

    graph = capture(call, calls=1)

    print("1-2. outputs after in-place updates of the filled widths, one capture (max |flex - SDPA|):")
    for trial in range(4):
        lo, hi = 49 + 18 * trial, 60 + 20 * trial  # the widths grow as a decode's do
        set_filled(torch.randint(lo, hi, (B,), device="cuda", generator=g))
        graph.replay()
        torch.cuda.synchronize()
        d_cudnn = (out.float() - reference(SDPBackend.CUDNN_ATTENTION).float()).abs().max().item()
        d_math = (out.float() - reference(SDPBackend.MATH)).abs().max().item()
        print(f"   widths {lo}-{hi - 1}: vs cuDNN {d_cudnn:.2e}, vs math (float32) {d_math:.2e}")

    graph20 = capture(call, calls=20)  # 20 calls a replay, so that the graph's launch is not what is timed
    print("3. one call (and its copy to the output) inside a graph of 20, all rows at one filled width:")
    for w in (64, 96, 124, 144):
        set_filled(torch.full((B,), w, device="cuda"))
        print(f"   width {w}: {replay_us(graph20, calls=20, replays=20):.1f} us")


if __name__ == "__main__":
    main()
