"""Milliseconds per decode step of pods' hf rollout backend against the memory-bandwidth limit.

Modes: `dynamic` (generate on the model, dynamic cache), `repeat_kv` (the compiled path with transformers'
sdpa attention, which expands the grouped KV heads every step), `compiled` (the compiled path with
transformers' generate loop: grouped attention that reads each KV head once, pods/rollout/attention.py),
`graph` (the compiled path with `rollout.hf.loop=graph`: the whole decode step replayed as one CUDA graph,
pods/rollout/step_graph.py, q/k/v and gate/up one GEMM each: pods/rollout/fused.py), `graph_split` (the same
with rollout.hf.fuse_projections=false: one GEMM per projection). The limit: every decode step
reads every weight once and the whole static KV cache once (batch x (prompt width + new tokens) positions):
(weight bytes + cache bytes) / measured copy bandwidth.

A random model of the given shape in bf16 (no hub; Qwen2.5-0.5B's by default), 1 prompt x `batch` samples
at T=1, --new-tokens per call. ms/step = seconds of a timed call / decode steps it ran (its longest
completion). The compiled path's first call at each batch size (compile + CUDA-graph capture) is reported
as compile seconds.

    PYTHONPATH=. python scripts/bench_decode.py --out results/bench_decode        # one GPU, ~3 min
    PYTHONPATH=. python scripts/bench_decode.py --layers 36 --hidden 2048 --heads 16 --kv-heads 2 \
        --intermediate 11008 --batches 16,64 --modes repeat_kv,compiled          # Qwen2.5-3B shape
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from bench.harness import add_model_args, build_model_dir, save_results
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
    p.add_argument("--modes", default="dynamic,repeat_kv,compiled,graph")
    p.add_argument("--max-prompt-len", type=int, default=128)
    p.add_argument("--out", default="results/bench_decode")
    args = p.parse_args()
    args.device = "cuda"
    bw = copy_bandwidth()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        stage = lambda what: print(f"{time.perf_counter() - t0:7.1f} s  {what}", flush=True)  # noqa: E731
        path = build_model_dir(args, Path(tmp))
        stage("model built")
        tok = AutoTokenizer.from_pretrained(path)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16).cuda().eval()
        stage("model loaded")
        weight_bytes = sum(t.numel() * t.element_size() for t in model.parameters())
        c = model.config
        kv_bytes_per_pos = (
            c.num_hidden_layers * 2 * c.num_key_value_heads * (c.hidden_size // c.num_attention_heads) * 2
        )
        modes = args.modes.split(",")
        for batch in [int(b) for b in args.batches.split(",")]:
            row = {"batch": batch}
            for name in modes:
                # each mode compiles afresh: dynamo would otherwise reuse the last mode's compiled step for a
                # copy of the same structure, whatever the backend's settings (call 20)
                torch._dynamo.reset()
                gen = HFGenerator(
                    model,
                    tok,
                    "cuda",
                    batch,
                    args.new_tokens,
                    compiled=name != "dynamic",
                    dtype=torch.bfloat16,
                    max_prompt_len=args.max_prompt_len,
                    loop="graph" if name.startswith("graph") else "generate",
                    fuse_projections=name != "graph_split",
                )
                if name == "repeat_kv":
                    gen.decoder.set_attn_implementation("sdpa")
                first, ms = time_call(gen, batch, args.repeats)
                stage(f"batch {batch} {name}: first call {first:.1f} s, {ms:.2f} ms per step")
                row[f"{name}_ms"], row[f"{name}_first_s"] = ms, first
                if name != "dynamic":
                    row[f"{name}_compile_s"] = gen.compile_seconds
                row["prompt_width"] = gen.tokenize(["x" * 80], False)[0].shape[1]
                del gen
                torch.cuda.empty_cache()
            cache_bytes = batch * (row["prompt_width"] + args.new_tokens) * kv_bytes_per_pos
            row["limit_ms"] = (weight_bytes + cache_bytes) / bw * 1e3
            for name in modes:
                row[f"{name}_x_limit"] = row[f"{name}_ms"] / row["limit_ms"]
            rows.append(row)
            print(json.dumps(row), flush=True)
            save_results(Path(args.out), {"rows": rows, "args": vars(args)}, "partial\n")
    res = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "weight_gib": weight_bytes / 2**30,
        "copy_bandwidth_tb_s": bw / 1e12,
        "args": vars(args),
        "rows": rows,
    }
    lines = [
        f"# Decode ms per step ({res['device']}, torch {res['torch']})",
        "",
        f"{args.layers} layers, hidden {args.hidden}, bf16, {res['weight_gib']:.2f} GiB of weights; measured copy "
        f"bandwidth {res['copy_bandwidth_tb_s']:.2f} TB/s; limit = (weights + static KV cache) / bandwidth. "
        f"1 prompt x batch samples, {args.new_tokens} new tokens, mean of {args.repeats} calls after the first.",
        "",
        "| batch | limit ms | " + " | ".join(f"{m} ms/step | {m} / limit" for m in modes) + " |",
        "|---|---|" + "---|---|" * len(modes),
    ]
    for r in rows:
        cells = [f"{r[m + '_ms']:.2f} | {r[m + '_x_limit']:.1f}x" for m in modes]
        lines.append(f"| {r['batch']} | {r['limit_ms']:.2f} | " + " | ".join(cells) + " |")
    save_results(Path(args.out), res, "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
