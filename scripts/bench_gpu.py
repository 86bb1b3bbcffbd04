"""Throughput of one pods step on a GPU: GRPO n=m=16 vs PODS n=64 m=16 vs GRPO n=m=64.

Builds a random Qwen2 (Qwen2.5-0.5B's shape by default) and a character tokenizer, with no hub access,
writes prompts of 60-100 tokens, and runs the real `pods.trainer.Trainer` (rollout=hf, bf16, eval and
checkpoints off) for --steps steps per setting; the first is warm-up and dropped. A random model seldom
samples EOS, so completions run (nearly) the full --completion-len tokens: the mean is reported. The reward
is a hash of the completion text (0/1), so groups have variance and the update always runs.

The model, tokenizer, data, config and timed Trainer run are shared with bench_trl.py and bench_decode.py
and live in bench/harness.py.

Per setting: mean seconds per phase (pods' timing/*; "step" is their sum, the training clock), generation
tokens/s, update tokens/s (prompt + completion tokens of the rows trained), update MFU against a measured
bf16 matmul peak, peak GPU memory (the run's, and each phase's: the largest over the measured steps); then
the step-time ratios PODS / GRPO(n=64) and PODS / GRPO(n=16).
MFU counts 6 FLOPs per token per trainable parameter and 4 per frozen one (LoRA still runs the forward and
input-gradient backward through frozen weights): 6N with full fine-tuning; no attention FLOPs, no
gradient-checkpointing recompute. Results are saved after each setting (results.json has per-step times and
the update's per-step diagnostics: micro-batch shapes, allocator counters and gc seconds).

    PYTHONPATH=. python scripts/bench_gpu.py                         # H100: 0.5B shape, 512 tokens, 6 steps
    PYTHONPATH=. python scripts/bench_gpu.py --lora --out results/bench_gpu_lora
    PYTHONPATH=. python scripts/bench_gpu.py --device cpu --layers 2 --hidden 64 --vocab 512 \\
        --completion-len 16 --steps 2                                # CPU smoke test
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import torch

from bench.harness import (
    MemoryTrace,
    add_model_args,
    build_model_dir,
    matmul_peak_flops,
    pods_cfg,
    run_pods,
    save_results,
    set_threads,
    write_data,
)

# name -> (selector, n, m)
SETTINGS = {"grpo16": ("none", 16, 16), "pods64": ("max_variance", 64, 16), "grpo64": ("none", 64, 64)}
UPDATE_DIAGNOSTICS = (
    *("micro_batches", "width_max", "masked_micro_batches", "new_shapes"),
    *("cuda_mallocs", "cuda_frees", "alloc_retries", "gc_s"),
)


def summarize(run: dict, peak_flops: float) -> dict:
    """Means over the steps after the first (warm-up)."""
    recs = [r for r in run["records"] if r.get("kind") == "train"][1:]
    walls = run["wall_steps"][1:]
    mean = lambda k: sum(r.get(k) or 0.0 for r in recs) / max(len(recs), 1)  # noqa: E731
    phases = sorted({k for r in recs for k in r if k.startswith("timing/") and k != "timing/step"})
    peaks = sorted({k for r in recs for k in r if k.startswith("memory/peak_")})  # GPU only
    trained = [r.get("update/prompt_tokens", 0.0) + r["update/tokens"] for r in recs]  # prompt + completion
    update_s = sum(r["timing/update"] for r in recs)
    gen_s = sum(r["timing/generation"] for r in recs)
    flops_per_token = 6 * run["trainable_params"] + 4 * run["frozen_params"]
    return {
        "steps_measured": len(recs),
        "phases_s": {p.removeprefix("timing/"): mean(p) for p in phases},
        "step_s": mean("timing/step"),
        "wall_step_s": sum(walls) / max(len(walls), 1),
        "mean_completion_len": mean("completions/mean_length"),
        "rollout_tokens": mean("rollout/tokens"),
        "update_rows": mean("update/rows"),
        "update_tokens": sum(trained) / max(len(trained), 1),
        "generation_tok_s": sum(r["rollout/tokens"] for r in recs) / max(gen_s, 1e-9),
        "update_tok_s": sum(trained) / max(update_s, 1e-9),
        "update_mfu": flops_per_token * sum(trained) / max(update_s, 1e-9) / peak_flops,
        "peak_mem_gib": run["peak_mem_gib"],
        "phase_peak_gib": {
            p.removeprefix("memory/peak_").removesuffix("_gib"): max(r.get(p) or 0.0 for r in recs)
            for p in peaks
        },
        "per_step_s": {
            k: [round(r[f"timing/{k}"], 3) for r in recs] for k in ("step", "generation", "update")
        },
        # why a step's update is slow (one over 2x the median): its micro-batch shapes (a first-time one?),
        # the allocator's cudaMallocs, cudaFrees and retries (GPU only) and Python's gc seconds
        "per_step_update_diagnostics": {k: [r.get(f"update/{k}") for r in recs] for k in UPDATE_DIAGNOSTICS},
        "trainable_params": run["trainable_params"],
        "frozen_params": run["frozen_params"],
    }


# --- report -------------------------------------------------------------------------------------


def markdown(results: dict) -> str:
    s = results["settings"]
    phases = sorted({p for v in s.values() for p in v["phases_s"]})
    head = ["setting", "n", "m", "step s", *[f"{p} s" for p in phases]]
    head += ["gen tok/s", "update tok/s", "update MFU", "peak GiB", "mean len"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, v in s.items():
        _, n, m = SETTINGS[name]
        cells = [name, n, m, f"{v['step_s']:.2f}", *[f"{v['phases_s'].get(p, 0.0):.3f}" for p in phases]]
        cells += [f"{v['generation_tok_s']:.0f}", f"{v['update_tok_s']:.0f}", f"{v['update_mfu']:.1%}"]
        cells += [f"{v['peak_mem_gib']:.2f}", f"{v['mean_completion_len']:.0f}"]
        lines.append("| " + " | ".join(map(str, cells)) + " |")
    ratios = "\n".join(f"- step time {k}: {v:.2f}" for k, v in results["ratios"].items())
    return (
        f"# pods step throughput ({results['device_name']})\n\n"
        f"Measured matmul peak: {results['peak_flops'] / 1e12:.3g} TFLOP/s. Args: `{results['args']}`\n\n"
        + "\n".join(lines)
        + phase_peaks_table(s)
        + f"\n\nRatios (mean step time, first step excluded):\n{ratios}\n"
    )


def phase_peaks_table(s: dict) -> str:
    """Peak allocated GiB of each phase, the largest over the measured steps ("" on a CPU: none logged)."""
    phases = sorted({p for v in s.values() for p in v.get("phase_peak_gib", {})})
    if not phases:
        return ""
    lines = ["| setting | " + " | ".join(phases) + " |", "|" + "---|" * (len(phases) + 1)]
    for name, v in s.items():
        cells = [f"{v['phase_peak_gib'][p]:.2f}" if p in v["phase_peak_gib"] else "" for p in phases]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n\nPeak allocated GiB per phase (largest over the measured steps):\n\n" + "\n".join(lines)


def ratios(s: dict) -> dict:
    out = {}
    for a, b in [("pods64", "grpo64"), ("pods64", "grpo16")]:
        if a in s and b in s:
            out[f"{a}/{b}"] = s[a]["step_s"] / s[b]["step_s"]
    return out


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_model_args(p)
    p.add_argument("--prompts-per-step", type=int, default=1)
    p.add_argument("--settings", default=",".join(SETTINGS), help=f"comma list of {', '.join(SETTINGS)}")
    p.add_argument("--out", default="results/bench_gpu")
    return p.parse_args(argv)


def save(results: dict, out: Path) -> None:
    save_results(out, results, markdown(results))


def main(argv=None) -> None:
    args = parse_args(argv)
    set_threads(args.threads)
    peak = matmul_peak_flops(args.device)
    print(f"measured matmul peak: {peak / 1e12:.3g} TFLOP/s")
    dev = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
    results = {"device_name": dev, "args": vars(args), "peak_flops": peak, "torch": torch.__version__}
    settings = results["settings"] = {}
    with tempfile.TemporaryDirectory(prefix="pods-bench-") as tmp:
        root = Path(tmp)
        model_dir, data = build_model_dir(args, root), write_data(root)
        for name in args.settings.split(","):
            cfg = pods_cfg(args, model_dir, data, root / f"run-{name}", *SETTINGS[name])
            trace = Path(args.memory_trace) / f"{name}.md" if args.memory_trace else None
            with MemoryTrace(trace, args.device):
                settings[name] = summarize(run_pods(cfg, args.device), peak)
            print(f"{name}: {settings[name]['step_s']:.2f} s/step")
            results["ratios"] = ratios(settings)
            save(results, Path(args.out))  # after each setting: a run cut short keeps what it measured
    print(markdown(results))


if __name__ == "__main__":
    main()
