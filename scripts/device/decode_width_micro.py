"""Does a decode step's attention cost follow the width of the KV cache it reads? (issue 38)

The graph loop decodes against a static cache as wide as the widest prompt plus max_completion_len (144 at
headline v4's shape), and every step reads all of it, filled or not: at decode step s only the prompt's
columns and s new ones hold keys. If the cost follows the width read, a loop that reads only the columns
filled so far (a few captured graphs, one per width bucket) would save what this prints.

At the headline policy's shape (rows x 4 heads, one query, head dim 96, bf16, cuDNN's SDPA with the padding
mask; 20 calls captured in a CUDA graph, as the graph loop runs them, the graph replayed 20 times): microseconds
per call for each width W read, at 256 and 1,024 rows.
Then the same at the full width with torch's flex_attention (compiled, 16-column blocks) told that columns
from W on are empty, which skips those blocks without a new shape.

    python3 scripts/device/decode_width_micro.py [--eager]   # on a lent GPU (torch's own build only)

--eager times the calls one by one from Python instead (mean of 200 after 5): launch overhead included.
"""

import sys
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

# headline v4's shape: a cache 144 wide = a 48-column prompt part (left-padded: here filled from column 8 on)
# + model.max_completion_len 96; its decode took 76 steps (results/step_cost/README.md, h200_v4_shape)
FULL, PROMPT, DECODE_STEPS = 144, 48, 76
WIDTHS = (64, 80, 96, 112, 128, 144)


def timed_eager(fn, n: int = 200) -> float:
    """Microseconds a call, eager, from Python (launch overhead included): mean of n calls after 5."""
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    torch.cuda.synchronize()
    return 1e6 * (time.perf_counter() - t) / n


def capture(fn, calls: int = 20) -> torch.cuda.CUDAGraph:
    """`calls` calls of fn captured in one CUDA graph, as the graph loop runs them (3 warm-up calls first, on a
    side stream). flex_block_micro.py and flex_decode_check.py use it too."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(calls):
            fn()
    return g


def replay_us(g: torch.cuda.CUDAGraph, calls: int = 20, replays: int = 20) -> float:
    """Microseconds a call of a graph holding `calls` calls: the mean of `replays` replays after 3."""
    for _ in range(3):
        g.replay()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(replays):
        g.replay()
    torch.cuda.synchronize()
    return 1e6 * (time.perf_counter() - t) / (replays * calls)


def timed_graph(fn, calls: int = 20, replays: int = 20) -> float:
    """Microseconds a call on the GPU: `calls` calls captured in one CUDA graph (no launch overhead from
    Python), the graph replayed `replays` times after a warm-up."""
    return replay_us(capture(fn, calls), calls, replays)


def main() -> None:
    timed = timed_eager if "--eager" in sys.argv else timed_graph
    print(torch.cuda.get_device_name(), torch.__version__, "eager" if timed is timed_eager else "CUDA graph")
    rows_sdpa: dict[tuple[int, int], float] = {}
    for b in (256, 1024):
        q = torch.randn(b, 4, 1, 96, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(b, 4, FULL, 96, device="cuda", dtype=torch.bfloat16)
        v = torch.randn_like(k)
        for w in WIDTHS:
            kw, vw = (
                k[:, :, :w].contiguous(),
                v[:, :, :w].contiguous(),
            )  # the cache as a graph of width w holds it
            m = torch.zeros(b, 1, 1, w, device="cuda", dtype=torch.bool)
            m[:, :, :, 8:] = True  # left padding: the first 8 columns empty
            with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                us = timed(
                    lambda q=q, kw=kw, vw=vw, m=m: F.scaled_dot_product_attention(q, kw, vw, attn_mask=m)
                )
            rows_sdpa[(b, w)] = us
            print(f"sdpa cudnn  rows={b:5d} width={w:4d}: {us:7.1f} us")
    try:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention

        flex = torch.compile(flex_attention, dynamic=False)
        for b in (256, 1024):
            q = torch.randn(b, 4, 1, 96, device="cuda", dtype=torch.bfloat16)
            k = torch.randn(b, 4, FULL, 96, device="cuda", dtype=torch.bfloat16)
            v = torch.randn_like(k)
            for w in WIDTHS:
                filled = torch.full((b,), w, device="cuda")

                def mod(bi, h, qi, kv, filled=filled):
                    return (kv >= 8) & (kv < filled[bi])

                bm = create_block_mask(mod, b, None, 1, FULL, device="cuda", BLOCK_SIZE=16)
                us = timed(lambda q=q, k=k, v=v, bm=bm: flex(q, k, v, block_mask=bm))
                print(f"flex 16-col rows={b:5d} width={w:4d} of {FULL}: {us:7.1f} us")
    except Exception as e:  # a torch without flex_attention's kernels here says so
        print(f"flex_attention: {type(e).__name__}: {str(e)[:160]}")
    # the decode's mean over its steps if each step read only its filled columns (bucketed to WIDTHS) against
    # reading all 144: DECODE_STEPS new tokens after the prompt part
    for b in (256, 1024):
        steps = range(1, DECODE_STEPS + 1)
        bucketed = [rows_sdpa[(b, next(w for w in WIDTHS if w >= PROMPT + s))] for s in steps]
        full = rows_sdpa[(b, FULL)]
        print(
            f"rows={b}: all {len(steps)} steps at width {FULL}: {full:.1f} us a step; bucketed by filled width: "
            f"{sum(bucketed) / len(bucketed):.1f} us a step ({sum(bucketed) / len(bucketed) / full:.2f}x)"
        )


if __name__ == "__main__":
    main()
