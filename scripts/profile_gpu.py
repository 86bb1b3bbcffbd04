"""Where a decode step's GPU time goes, and what a new attention shape costs the update (issue 18, targets 3
and 5). Two parts, each a markdown table:

- `decode`: one rollout of the hf backend (random model of the given shape, bf16, 1 prompt x batch samples)
  under torch.profiler, for each loop (`graph`: the step replayed as a CUDA graph, `graph_split` without
  fused projections, `graph_nocudnn` without cuDNN attention; `generate`: the same
  compiled forward under transformers' loop). Kernels are summed by name per decode step: how many, how
  long, and their total against the wall time per step.
- `sdpa`: causal scaled_dot_product_attention forward + backward at the update's head layout (grouped KV
  heads, `enable_gqa`, as transformers calls it without a mask), per backend and sequence width: the first
  call at a width (where a backend that builds a plan per shape pays for it) and the median of later ones.

    PYTHONPATH=. python scripts/profile_gpu.py --out results/profile_gpu            # 0.5B shape, one GPU
    PYTHONPATH=. python scripts/profile_gpu.py --layers 36 --hidden 2048 --heads 16 --kv-heads 2 \\
        --intermediate 11008 --parts sdpa                                          # 3B shape, sdpa only
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from transformers import AutoModelForCausalLM, AutoTokenizer

from bench.harness import add_model_args, build_model_dir, save_results
from pods.rollout.hf import HFGenerator

PROMPT = ["What is 12 + 34? please add the numbers carefully then explain each step and answer"]


def kernel_table(prof, steps: int) -> list[dict]:
    """Device kernels of a profile summed by name: calls and microseconds per decode step, longest first."""
    us, calls = defaultdict(float), defaultdict(int)
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            us[e.name] += e.time_range.elapsed_us()
            calls[e.name] += 1
    rows = [{"kernel": k, "calls": calls[k] / steps, "us": us[k] / steps} for k in us]
    return sorted(rows, key=lambda r: -r["us"])


def profile_decode(model, tok, batch: int, loop: str, new_tokens: int) -> dict:
    """loop: graph | graph_split (fuse_projections off) | graph_nocudnn (cuDNN attention off: torch's next
    choice decodes) | generate."""
    cudnn = torch.backends.cuda.cudnn_sdp_enabled()
    torch.backends.cuda.enable_cudnn_sdp(cudnn and loop != "graph_nocudnn")
    torch._dynamo.reset()  # this loop's own compile (dynamo reuses a compiled step across backend settings)
    try:
        gen = HFGenerator(model, tok, "cuda", batch, new_tokens, compiled=True, dtype=torch.bfloat16,
                          max_prompt_len=128, loop=loop.split("_")[0],
                          fuse_projections=loop != "graph_split")  # fmt: skip
        gen.generate(PROMPT, [0], batch, 1.0)  # warm-up: compile and capture
        gen.generate(PROMPT, [0], batch, 1.0)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        r = gen.generate(PROMPT, [0], batch, 1.0)
        torch.cuda.synchronize()
        wall_ms = (time.perf_counter() - t0) * 1e3 / r.completion_mask.shape[1]
        acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
        with torch.profiler.profile(activities=acts) as prof:
            r = gen.generate(PROMPT, [0], batch, 1.0)
            torch.cuda.synchronize()
    finally:
        torch.backends.cuda.enable_cudnn_sdp(cudnn)
    steps = r.completion_mask.shape[1]
    table = kernel_table(prof, steps)
    return {"loop": loop, "batch": batch, "steps": steps, "wall_ms": wall_ms, "kernels": table,
            "kernel_ms": sum(k["us"] for k in table) / 1e3, "kernel_calls": sum(k["calls"] for k in table)}  # fmt: skip


BACKENDS = {
    "cudnn": SDPBackend.CUDNN_ATTENTION,
    "flash": SDPBackend.FLASH_ATTENTION,
    "efficient": SDPBackend.EFFICIENT_ATTENTION,
    "default": None,  # torch's own choice
}


def time_sdpa(backend, rows: int, heads: int, kv_heads: int, width: int, head_dim: int, repeats: int = 5):
    """(first call ms, median later ms) of forward + backward, or the error a backend raised."""
    q = torch.randn(rows, heads, width, head_dim, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    k = torch.randn(rows, kv_heads, width, head_dim, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    v = torch.randn_like(k, requires_grad=True)
    ms = []
    for _ in range(repeats + 1):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        ctx = sdpa_kernel([backend]) if backend is not None else torch.enable_grad()
        with ctx:
            out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
            out.sum().backward()
        torch.cuda.synchronize()
        ms.append((time.perf_counter() - t0) * 1e3)
    return ms[0], statistics.median(ms[1:])


def sdpa_rows(args, heads: int, kv: int, head_dim: int) -> list[dict]:
    rows = []
    for name, backend in BACKENDS.items():
        for width in [int(w) for w in args.widths.split(",")]:
            row = {"backend": name, "width": width, "rows": args.sdpa_rows}
            try:
                row["first_ms"], row["steady_ms"] = time_sdpa(
                    backend, args.sdpa_rows, heads, kv, width, head_dim
                )
            except RuntimeError as e:  # a backend that cannot take this call says so
                row["error"] = str(e).splitlines()[0][:120]
            rows.append(row)
            print(row, flush=True)
    return rows


def markdown(res: dict) -> str:
    lines = [f"# GPU profile ({res['device']}, torch {res['torch']})", ""]
    for d in res.get("decode", []):
        lines += [
            f"## Decode, {d['loop']} loop, batch {d['batch']}: {d['wall_ms']:.3f} ms per step wall, "
            f"{d['kernel_ms']:.3f} ms of kernels in {d['kernel_calls']:.0f} launches per step",
            "",
            "| kernel | calls/step | us/step |",
            "|---|---|---|",
        ]
        lines += [f"| `{k['kernel'][:90]}` | {k['calls']:.2f} | {k['us']:.1f} |" for k in d["kernels"][:25]]
        lines.append("")
    if res.get("sdpa"):
        lines += ["## Causal SDPA forward + backward at the update's layout", "",
                  "| backend | rows | width | first call ms | later ms (median) | error |", "|---|---|---|---|---|---|"]  # fmt: skip
        for r in res["sdpa"]:
            first, steady = r.get("first_ms"), r.get("steady_ms")
            cells = [f"{first:.2f}" if first else "", f"{steady:.2f}" if steady else ""]
            lines.append(
                f"| {r['backend']} | {r['rows']} | {r['width']} | {cells[0]} | {cells[1]} | {r.get('error', '')} |"
            )
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_model_args(p)
    p.add_argument("--parts", default="decode,sdpa")
    p.add_argument("--batches", default="16,64")
    p.add_argument("--loops", default="graph,generate")
    p.add_argument("--new-tokens", type=int, default=128)
    p.add_argument("--widths", default="576,640,704,768", help="sdpa: sequence widths, each a new shape")
    p.add_argument("--sdpa-rows", type=int, default=16)
    p.add_argument("--out", default="results/profile_gpu")
    args = p.parse_args()
    args.device = "cuda"
    heads = args.heads or max(args.hidden // 64, 1)
    kv = args.kv_heads or max(heads // 7, 1)
    res = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "args": vars(args)}
    parts = args.parts.split(",")
    if "sdpa" in parts:  # first: nothing else has met these shapes yet
        res["sdpa"] = sdpa_rows(args, heads, kv, args.hidden // heads)
        save_results(Path(args.out), res, markdown(res))
    if "decode" in parts:
        res["decode"] = []
        with tempfile.TemporaryDirectory() as tmp:
            path = build_model_dir(args, Path(tmp))
            tok = AutoTokenizer.from_pretrained(path)
            model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16).cuda().eval()
            for batch in [int(b) for b in args.batches.split(",")]:
                for loop in args.loops.split(","):
                    res["decode"].append(profile_decode(model, tok, batch, loop, args.new_tokens))
                    save_results(Path(args.out), res, markdown(res))
    print(markdown(res))


if __name__ == "__main__":
    main()
