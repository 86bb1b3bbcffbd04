"""The same GRPO step through TRL's GRPOTrainer and through pods, in one process on one machine.

Both get the same random Qwen2 and character tokenizer (built by bench/harness.py, no hub), the same prompts,
1 prompt x n generations per optimizer step, the same completion length, micro-batch, gradient
checkpointing, lr / betas / weight decay / grad clip / temperature / clip epsilon (read from pods' composed
config), beta = 0, token-level loss (TRL loss_type="dapo" = pods loss=token), the same hash reward,
LoRA or not, bf16 on a GPU, transformers generate() (no vLLM). TRL's step is timed from on_step_begin to
on_step_end of a TrainerCallback, pods' around Trainer.train_step; wall and process-CPU seconds (on a
loaded CPU the CPU seconds are the steadier number). The first step of each run is warm-up and dropped;
--repeats runs the frameworks in turn several times. Memory: torch.cuda.max_memory_allocated above the
run's start on a GPU; on a CPU the peak growth of the process RSS (sampled every 20 ms; rough). As extra
information pods also runs PODS (4n generated, n kept by max variance). Results are saved after each run.

    PYTHONPATH=. python scripts/bench_trl.py                       # H100: 0.5B shape, n=16, 512 tokens, 6 steps
    PYTHONPATH=. python scripts/bench_trl.py --lora --out results/bench_trl_cuda_lora
    PYTHONPATH=. python scripts/bench_trl.py --device cpu --threads 1 --layers 2 --hidden 64 --vocab 512 \\
        --n 8 --completion-len 32 --steps 6 --repeats 3              # CPU: results/bench_trl_cpu.{md,json}
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import tempfile
import traceback
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback

from bench.harness import (
    MemoryTrace,
    PeakMemory,
    StepClock,
    add_model_args,
    bench_hash,
    build_model_dir,
    pods_cfg,
    run_pods,
    set_threads,
    write_data,
)


def trl_hash_reward(completions, **kw) -> list[float]:
    """bench.harness's hash reward with TRL's signature (completions are strings for a plain-text prompt)."""
    return bench_hash(list(completions))


class StepTimer(TrainerCallback):
    """Times each optimizer step (generation, reward, forward/backward and optimizer included)."""

    def __init__(self, device: str):
        self.clock = StepClock(device)

    def on_step_begin(self, args, state, control, **kw):
        self.clock.start()

    def on_step_end(self, args, state, control, **kw):
        self.clock.stop()


# --- the two runs -------------------------------------------------------------------------------


def trl_config(cfg, args, out_dir: Path):
    """GRPOConfig matching the pods config: one optimizer step = 1 prompt x n generations."""
    from trl import GRPOConfig

    n, mb = args.n, min(cfg["update"].micro_batch_size, args.n)
    if n % mb:
        raise SystemExit(f"--n={n} must be a multiple of the micro-batch size {mb} for TRL")
    return GRPOConfig(
        output_dir=str(out_dir),
        per_device_train_batch_size=mb,
        gradient_accumulation_steps=n // mb,  # generation batch = mb x n/mb = n = one prompt's group
        num_generations=n,
        max_completion_length=args.completion_len,
        max_steps=args.steps,
        learning_rate=cfg.optim.lr,
        adam_beta1=cfg.optim.betas[0],
        adam_beta2=cfg.optim.betas[1],
        weight_decay=cfg.optim.weight_decay,
        max_grad_norm=cfg.optim.grad_clip,
        lr_scheduler_type="constant",
        temperature=cfg.sampling.temperature,
        epsilon=cfg.algo.epsilon,
        beta=0.0,
        num_iterations=1,
        loss_type="dapo",  # token-level mean over the step's tokens, as pods' loss=token
        scale_rewards="group",
        gradient_checkpointing=cfg["update"].gradient_checkpointing,
        bf16=args.device == "cuda",
        use_cpu=args.device == "cpu",
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        seed=cfg.seed,
        log_completions=False,
    )


def run_trl(cfg, args, model_dir: Path, rows: list[dict], root: Path, master: str = "auto") -> dict:
    """master: the dtype TRL keeps the weights in. "auto" (TRL's usual recipe on a GPU) loads them in bf16,
    so weights, gradients and AdamW states are bf16; "float32" keeps float32 master weights and computes
    in bf16 under autocast (bf16=True), the numerical safety pods uses for full fine-tuning."""
    from datasets import Dataset
    from peft import LoraConfig
    from trl import GRPOTrainer

    dtype = torch.bfloat16 if args.device == "cuda" and master == "auto" else torch.float32
    lc = cfg.model.lora
    peft = LoraConfig(r=lc.r, lora_alpha=lc.alpha, target_modules=list(lc.targets), task_type="CAUSAL_LM")
    data = Dataset.from_list([{"prompt": r["question"] + "\n", "answer": r["answer"]} for r in rows])
    timer = StepTimer(args.device)
    with PeakMemory(args.device) as mem:
        trainer = GRPOTrainer(
            model=AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype, attn_implementation="sdpa"),
            reward_funcs=trl_hash_reward,
            args=trl_config(cfg, args, root / "trl"),
            train_dataset=data,
            processing_class=AutoTokenizer.from_pretrained(model_dir, padding_side="left"),
            peft_config=peft if args.lora else None,
            callbacks=[timer],
        )
        trainer.train()
    logs = [h for h in trainer.state.log_history if "frac_reward_zero_std" in h][1:]  # one per step
    return {
        "step_times": timer.clock.wall[1:],  # the first step is warm-up
        "step_cpu": timer.clock.cpu[1:],
        "peak_mem_gib": mem.gib,
        "start_mem_gib": mem.start_gib,
        "zero_var": [h["frac_reward_zero_std"] for h in logs],
        "lengths": [h["completions/mean_length"] for h in logs],
    }


def run_pods_timed(cfg, args) -> dict:
    run = run_pods(cfg, args.device)
    recs = [r for r in run["records"] if r.get("kind") == "train"][1:]
    phases = sorted({k for r in recs for k in r if k.startswith("timing/")})
    return {
        "phases_s": {k.removeprefix("timing/"): sum(r.get(k, 0.0) for r in recs) / len(recs) for k in phases},
        "step_times": run["wall_steps"][1:],  # the first step is warm-up
        "step_cpu": run["cpu_steps"][1:],
        "peak_mem_gib": run["peak_mem_gib"],
        "start_mem_gib": run["start_mem_gib"],
        "zero_var": [r["update/skipped"] for r in recs],
        "lengths": [r["completions/mean_length"] for r in recs],
    }


def guarded(fn, *a) -> dict:
    """Run one benchmark; a failure is recorded with its traceback instead of ending the comparison."""
    try:
        return fn(*a)
    except Exception as e:  # noqa: BLE001 - the report must say what failed, whatever it was
        traceback.print_exc()
        return {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()}


def merged(parts: list[dict]) -> dict:
    """One run's repeats as one: per-step lists joined, memory the largest; the first failure if any."""
    failed = [p for p in parts if "error" in p]
    if failed:
        return failed[0]
    out = {k: [x for p in parts for x in p[k]] for k in ("step_times", "step_cpu", "zero_var", "lengths")}
    out.update({k: max(p[k] for p in parts) for k in ("peak_mem_gib", "start_mem_gib")})
    if "phases_s" in parts[0]:
        out["phases_s"] = parts[-1]["phases_s"]
    t, lengths = out["step_times"], out["lengths"]
    out["steps_measured"], out["repeats"] = len(t), len(parts)
    out["step_s"] = sum(t) / len(t) if t else float("nan")
    out["step_cpu_s"] = sum(out["step_cpu"]) / len(t) if t else float("nan")
    out["zero_var_steps"] = int(sum(v == 1 for v in out["zero_var"]))  # groups with nothing to learn
    out["mean_len"] = sum(lengths) / len(lengths) if lengths else float("nan")
    return out


# --- report -------------------------------------------------------------------------------------


def markdown(res: dict) -> str:
    a = res["args"]
    lines = [
        f"# pods vs TRL GRPOTrainer, one step ({res['device_name']})",
        "",
        f"Setting: 1 prompt x n={a['n']}, at most {a['completion_len']} completion tokens (a random model "
        f"rarely ends early: see mean len), {a['steps']} steps x {a['repeats']} repeat(s), the first step of "
        f"each dropped; LoRA={a['lora']}; model {res['model_params'] / 1e6:.1f}M params; torch {res['torch']}, "
        f"transformers {res['transformers']}, trl {res['trl']}.",
        f"Memory: {res['memory_metric']}. Load average at start: {res['loadavg']}; "
        f"torch threads: {res['torch_threads']}.",
        "",
        "| run | step s (wall) | step s (process CPU) | peak GiB | mean len | steps | zero-variance steps | error |",
        "|---|---|---|---|---|---|---|---|",
    ]
    nan = float("nan")
    for name, r in res["runs"].items():
        cells = [f"{r.get(k, nan):.3f}" for k in ("step_s", "step_cpu_s", "peak_mem_gib")]
        cells.append(f"{r.get('mean_len', nan):.1f}")
        cells += [str(r.get("steps_measured", 0)), str(r.get("zero_var_steps", 0)), r.get("error", "")]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += ["", *[f"- {k}: {v:.3f}" for k, v in res["ratios"].items()]]
    for name, r in res["runs"].items():
        if "phases_s" in r:  # pods' own per-phase seconds (compile: one-time warm-up, outside the step)
            split = ", ".join(f"{k} {v:.3f}" for k, v in r["phases_s"].items())
            lines += ["", f"- {name} phases (s/step): {split}"]
    for name, r in res["runs"].items():
        if "traceback" in r:
            lines += ["", f"## {name} failed", "", "```", r["traceback"].strip()[-3000:], "```"]
    return "\n".join(lines) + "\n"


def ratios(runs: dict, n: int) -> dict:
    trl, out = runs["trl_grpo"], {}
    for name in runs:
        if name != "trl_grpo" and "error" not in runs[name] and "error" not in trl:
            out[f"step time {name} / trl_grpo (n={n})"] = runs[name]["step_s"] / trl["step_s"]
            out[f"step CPU time {name} / trl_grpo"] = runs[name]["step_cpu_s"] / trl["step_cpu_s"]
            out[f"peak memory {name} / trl_grpo"] = runs[name]["peak_mem_gib"] / max(
                trl["peak_mem_gib"], 1e-9
            )
    return out


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_model_args(p)
    p.add_argument("--n", type=int, default=16, help="generations per prompt (GRPO: all trained on)")
    p.add_argument("--repeats", type=int, default=1, help="run each framework this many times, in turn")
    p.add_argument("--no-pods-extra", action="store_true", help="skip the PODS n'=4n run")
    p.add_argument("--trl-fp32", action="store_true", help="also run TRL with float32 master weights")
    p.add_argument("--out", default="", help="default: results/bench_trl_<device>")
    args = p.parse_args(argv)
    args.prompts_per_step = 1
    return args


def run_all(args, root: Path, res: dict) -> None:
    """TRL GRPO, pods GRPO and pods PODS on the same model and prompts, in turn, --repeats times (so a
    drifting machine load hits all alike). Each failure is recorded; results are saved after each run."""
    model_dir, data = build_model_dir(args, root), write_data(root)
    rows = [json.loads(x) for x in data[0].read_text().splitlines()]  # the prompts pods trains on
    res["model_params"] = sum(p.numel() for p in AutoModelForCausalLM.from_pretrained(model_dir).parameters())
    parts = {}
    for rep in range(args.repeats):
        grpo = pods_cfg(args, model_dir, data, root / f"pods-grpo-{rep}", "none", args.n, args.n)
        todo = [
            ("trl_grpo", run_trl, (grpo, args, model_dir, rows, root)),
            ("pods_grpo", run_pods_timed, (grpo, args)),
        ]
        if args.trl_fp32 and not args.lora:  # equal numerical safety: float32 master weights in both
            todo.insert(1, ("trl_grpo_fp32_master", run_trl, (grpo, args, model_dir, rows, root, "float32")))
        if not args.no_pods_extra:
            pods = pods_cfg(
                args, model_dir, data, root / f"pods-pods-{rep}", "max_variance", 4 * args.n, args.n
            )
            todo.append((f"pods_pods_n{4 * args.n}_m{args.n}", run_pods_timed, (pods, args)))
        for name, fn, fn_args in todo:
            trace = Path(args.memory_trace) / f"{name}-{rep}.md" if args.memory_trace else None
            with MemoryTrace(trace, args.device):  # what is live at the run's peak (GPU, --memory-trace)
                parts.setdefault(name, []).append(guarded(fn, *fn_args))
            res["runs"] = {k: merged(v) for k, v in parts.items()}
            res["ratios"] = ratios(res["runs"], args.n)
            save(res, args)


def save(res: dict, args) -> None:
    out = Path(args.out or f"results/bench_trl_{args.device}")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(res, indent=2, default=str))
    out.with_suffix(".md").write_text(markdown(res))


def version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def main(argv=None) -> None:
    args = parse_args(argv)
    set_threads(args.threads)
    res = {
        "device_name": torch.cuda.get_device_name() if args.device == "cuda" else "cpu",
        "args": vars(args),
        **{k: version(k) for k in ("torch", "transformers", "trl")},
        "memory_metric": "torch.cuda.max_memory_allocated above the run's start"
        if args.device == "cuda"
        else "peak RSS growth during the run (sampled every 20 ms; rough)",
        "loadavg": " ".join(f"{x:.2f}" for x in os.getloadavg()),
        "torch_threads": torch.get_num_threads(),
    }
    with tempfile.TemporaryDirectory(prefix="pods-bench-trl-") as tmp:
        run_all(args, Path(tmp), res)
    print(markdown(res))


if __name__ == "__main__":
    main()
