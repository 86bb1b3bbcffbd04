"""Milliseconds per decode step of pods' hf rollout backend, dynamic cache vs the compiled path, against
the memory-bandwidth limit (every decode step reads every weight once: weight bytes / copy bandwidth).

A random model of Qwen2.5-0.5B's shape in bf16 (no hub), 1 prompt x `batch` samples at T=1, --new-tokens
per call. ms/step = seconds of a timed call / decode steps it ran (its longest completion). The compiled
path's first call at each batch size (compile + CUDA-graph capture) is reported as compile seconds.

    PYTHONPATH=. python scripts/bench_decode.py --out results/bench_decode        # one GPU, ~3 min
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from pods.bench import add_model_args, build_model_dir, save_results
from pods.rollout.hf import HFGenerator


def copy_bandwidth() -> float:
    """Bytes per second of a 1 GiB device-to-device copy, counting bytes read and written."""
    x = torch.empty(1 << 29, dtype=torch.bfloat16, device="cuda")
    y = torch.empty_like(x)
    for _ in range(3):
        y.copy_(x)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(20):
        y.copy_(x)
    torch.cuda.synchronize()
    return 2 * x.numel() * 2 * 20 / (time.perf_counter() - t0)


def time_call(gen: HFGenerator, batch: int, repeats: int) -> tuple[float, float]:
    """(first call seconds, mean ms per decode step over `repeats` later calls)."""
    prompt = ["What is 12 + 34? please add the numbers carefully then explain each step and answer"]
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    gen.generate(prompt, [0], batch, 1.0)
    torch.cuda.synchronize()
    first = time.perf_counter() - t0
    ms = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        r = gen.generate(prompt, [0], batch, 1.0)
        torch.cuda.synchronize()
        ms.append((time.perf_counter() - t0) * 1e3 / r.completion_mask.shape[1])
    return first, sum(ms) / len(ms)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_model_args(p)
    p.add_argument("--batches", default="16,64,256")
    p.add_argument("--new-tokens", type=int, default=256)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--out", default="results/bench_decode")
    args = p.parse_args()
    args.device = "cuda"
    bw = copy_bandwidth()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        path = build_model_dir(args, Path(tmp))
        tok = AutoTokenizer.from_pretrained(path)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16).cuda().eval()
        weight_bytes = sum(t.numel() * t.element_size() for t in model.parameters())
        limit_ms = weight_bytes / bw * 1e3
        for batch in [int(b) for b in args.batches.split(",")]:
            row = {"batch": batch}
            for name, compiled in (("dynamic", False), ("compiled", True)):
                gen = HFGenerator(
                    model,
                    tok,
                    "cuda",
                    batch,
                    args.new_tokens,
                    compiled=compiled,
                    dtype=torch.bfloat16,
                    max_prompt_len=128,
                )
                first, ms = time_call(gen, batch, args.repeats)
                row[f"{name}_ms"], row[f"{name}_first_s"] = ms, first
                if compiled:
                    row["compile_s"] = gen.compile_seconds
                del gen
                torch.cuda.empty_cache()
            row["speedup"] = row["dynamic_ms"] / row["compiled_ms"]
            row["x_limit"] = row["compiled_ms"] / limit_ms
            rows.append(row)
            print(json.dumps(row), flush=True)
    res = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "weight_gib": weight_bytes / 2**30,
        "copy_bandwidth_tb_s": bw / 1e12,
        "limit_ms": limit_ms,
        "args": vars(args),
        "rows": rows,
    }
    lines = [
        f"# Decode ms per step ({res['device']}, torch {res['torch']})",
        "",
        f"Qwen2.5-0.5B shape, bf16, {res['weight_gib']:.2f} GiB of weights; measured copy bandwidth "
        f"{res['copy_bandwidth_tb_s']:.2f} TB/s, so the bandwidth limit is {limit_ms:.2f} ms per step. "
        f"1 prompt x batch samples, {args.new_tokens} new tokens, mean of {args.repeats} calls after the first.",
        "",
        "| batch | dynamic ms/step | compiled ms/step | speedup | compiled / limit | compile s |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['batch']} | {r['dynamic_ms']:.2f} | {r['compiled_ms']:.2f} | {r['speedup']:.1f}x | "
            f"{r['x_limit']:.1f}x | {r['compile_s']:.0f} |"
        )
    save_results(Path(args.out), res, "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
