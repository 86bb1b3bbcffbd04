"""One decode step's attention at the headline policy's shape, by SDPA backend (issue 38): rows x 4 heads, one
query, a static KV cache 144 wide (the graph loop's width at 16 prompts of the hard sums), head dim 96, bf16,
with and without a padding mask (keys 100+ masked). Eager calls, mean of 200 after 5, microseconds per call.

    python3 scripts/device/sdpa_decode_micro.py     # on a lent GPU (torch's own build; nothing else needed)
"""

import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

print(torch.cuda.get_device_name())
BACKENDS = [("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION),
            ("efficient", SDPBackend.EFFICIENT_ATTENTION), ("math", SDPBackend.MATH)]  # fmt: skip
for B in (256, 1024):
    q = torch.randn(B, 4, 1, 96, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(B, 4, 144, 96, device="cuda", dtype=torch.bfloat16)
    v = torch.randn_like(k)
    m = torch.ones(B, 1, 1, 144, device="cuda", dtype=torch.bool)
    m[:, :, :, 100:] = False
    for name, be in BACKENDS:
        for mask in (None, m):
            try:
                with sdpa_kernel([be]):
                    for _ in range(5):
                        F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
                    torch.cuda.synchronize()
                    t = time.perf_counter()
                    for _ in range(200):
                        F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
                    torch.cuda.synchronize()
                print(f"B={B} {name:9s} mask={mask is not None}: {1e6 * (time.perf_counter() - t) / 200:.1f} us")
            except Exception as e:  # a backend that has no kernel for this case says so
                print(f"B={B} {name} mask={mask is not None}: {type(e).__name__}: {str(e)[:80]}")
