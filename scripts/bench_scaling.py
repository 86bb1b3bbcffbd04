"""Weak and strong scaling of the real Trainer under torchrun (issue 28): one table of step, generation,
update, metrics (cross-rank gathers), the part of the step no phase claims, peak memory and efficiency.

Each point is `torchrun --nproc_per_node k -m bench.scaling_rank ...` (pods.train's run, the real Trainer) on a
random Qwen2 of the given shape with the `bench_hash` reward (bench/harness.py, loaded with `plugins=`), n=m=16,
eval and checkpoints off; steps 3 onward are read (median over rank 0's records). With `--profile` the last
step runs under torch.profiler on every rank and is not read: its NCCL kernel time (the largest over ranks;
a kernel waiting for a slower rank counts) is the table's NCCL column, and its top kernels and host ops go to
<out>.profile.md. Each point's table, raw records and profile are written as soon as it ends. Weak scaling keeps the work per process fixed (one
prompt per process per step: efficiency = step at 1 / step at k); strong scaling keeps the global batch fixed
(`--strong 8`: 8 prompts per step over k processes, the headline's n=64, m=16).

    python scripts/bench_scaling.py --procs 1,2,4 --dist ddp,fsdp --out results/scaling/h100_0.5b.md   # GPUs
    python scripts/bench_scaling.py --procs 1,2,4 --dist ddp --lora --layers 36 --hidden 2048 --heads 16 \\
        --kv-heads 2 --intermediate 11008 --out results/scaling/h100_3b_lora.md
    python scripts/bench_scaling.py --procs 1,2,4 --dist ddp --strong 8 --out results/scaling/strong.md
    python scripts/bench_scaling.py --device cpu --procs 1,2 --dist ddp,fsdp --layers 2 --hidden 64 \\
        --vocab 512 --completion-len 16 --steps 5 --out /tmp/scaling.md             # CPU smoke, gloo
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics as st
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PHASES = ("generation", "gather", "reward", "update", "metrics", "weight_sync", "unattributed")


def run_point(
    a, model_dir: Path, data: tuple[Path, Path], procs: int, dist: str, run_dir: Path
) -> tuple[list[dict], list[dict]]:
    """One torchrun launch; its rank-0 train records (unprofiled steps) and every rank's profile summary."""
    prompts = a.strong or procs  # strong: fixed global batch; weak: one prompt per process
    n, m = (64, 16) if a.strong else (16, 16)
    hw = {"ddp": "multi_gpu", "fsdp": "fsdp"}[dist] if a.device == "cuda" else "cpu"
    overrides = [
        f"run_dir={run_dir}", "model=qwen2.5-0.5b", "model.name=bench", f"model.path={model_dir}",
        "model.use_chat_template=false", f"model.max_completion_len={a.completion_len}",
        "dataset=arithmetic", "dataset.name=bench", "dataset.source=local", f"dataset.task={data[0]}",
        f"dataset.eval_task={data[1]}", "dataset.train_size=0", "dataset.eval_size=0",
        f"selector.n={n}", f"selector.m={m}", "rollout=hf", "logger=none", f"hardware={hw}",
        f"hardware.distributed={dist}", f"hardware.lora={str(a.lora).lower()}", f"algo.prompts_per_step={prompts}",
        f"max_steps={a.steps}", "eval.at_start=false", "eval.at_end=false", "eval.every_steps=0",
        "checkpoint.every_steps=0", "checkpoint.save_final=false", "plugins=[bench.harness]",
        "reward=format", "reward.weights.format=0", "+reward.weights.bench_hash=1.0", *a.set,
    ]  # fmt: skip
    from bench.harness import torchrun_command

    prof = ["--profile-step", str(a.steps)] if a.profile else []
    cmd = [*torchrun_command(procs), "-m", "bench.scaling_rank", *prof, "--"]
    env = {**os.environ, "OMP_NUM_THREADS": str(a.threads)}
    proc = subprocess.run(cmd + overrides, cwd=ROOT, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{dist} x{procs} failed:\n{proc.stderr[-3000:]}")
    recs = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    profiles = [json.loads(f.read_text()) for f in sorted(run_dir.glob("profile_rank*.json"))]
    # the first two steps carry warm-ups and compiles; with --profile the last ran under the profiler
    last = a.steps - 1 if a.profile else a.steps
    return [r for r in recs if r.get("kind") == "train" and 2 < r["step"] <= last], profiles


def summarize(recs: list[dict], profiles: list[dict]) -> dict:
    med = lambda k: st.median(r.get(f"timing/{k}", 0.0) for r in recs)  # noqa: E731
    peak = max((v for r in recs for k, v in r.items() if k.startswith("memory/peak_")), default=float("nan"))
    nccl = max((pr["nccl_ms"] / 1e3 for pr in profiles), default=float("nan"))
    return {"wall": med("wall_step"), "step": med("step"), **{p: med(p) for p in PHASES}, "nccl": nccl,
            "peak_gib": peak}  # fmt: skip


def profile_md(points: list[tuple[str, int, list[dict]]]) -> str:
    """Rank 0's profiled step of each point: NCCL and kernel totals, top kernels and host ops by self time."""
    out = []
    for d, k, profiles in points:
        for pr in profiles[:1]:
            out.append(f"### {d} x{k} (rank 0, step {pr['step']}): NCCL {pr['nccl_ms']:.1f} ms in "
                       f"{pr['nccl_kernels']} kernels; all kernels {pr['kernels_ms']:.1f} ms\n")  # fmt: skip
            out.append(
                "| top kernels | ms | calls | | top host ops (self) | ms | calls |\n|---|---|---|---|---|---|---|"
            )
            for dv, hs in zip(pr["top_device"] + [["", 0, 0]] * 12, pr["top_host"]):
                cell = f"{dv[0][:60]} | {dv[1]:.2f} | {dv[2]}" if dv[0] else " | | "
                out.append(f"| {cell} | | {hs[0][:60]} | {hs[1]:.2f} | {hs[2]} |")
            out.append("")
    return "\n".join(out) + "\n"


def table(rows: list[tuple[str, int, dict]], weak: bool) -> str:
    head = "| dist | procs | wall step s | timed step s | " + " | ".join(f"{p} s" for p in PHASES)
    head += " | NCCL s (profiled step) | peak GiB | " + ("weak efficiency |" if weak else "speedup over 1 |")
    lines = [head, "|" + "---|" * (7 + len(PHASES))]
    base = {d: s["wall"] for d, k, s in rows if k == 1}
    for d, k, s in rows:
        eff = base[d] / s["wall"] if d in base else float("nan")
        cells = [d, str(k), f"{s['wall']:.3f}", f"{s['step']:.3f}", *(f"{s[p]:.3f}" for p in PHASES)]
        cells += [f"{s['nccl']:.3f}", f"{s['peak_gib']:.1f}", f"{eff:.2f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    sys.path.insert(0, str(ROOT))
    from bench.harness import add_model_args, build_model_dir, write_data

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_args(p)
    p.add_argument("--procs", default="1,2,4", help="comma list of process counts (one GPU each)")
    p.add_argument("--dist", default="ddp,fsdp", help="comma list of ddp, fsdp")
    p.add_argument(
        "--strong", type=int, default=0, help="a fixed global batch of this many prompts (n=64, m=16)"
    )
    p.add_argument("--out", required=True, help="the table (markdown); raw records beside it as .jsonl")
    p.add_argument(
        "--profile", action="store_true", help="profile the last step (NCCL column, <out>.profile.md)"
    )
    a = p.parse_args()
    a.threads = a.threads or 1
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    kind = f"strong, {a.strong} prompts x n=64, m=16" if a.strong else "weak, 1 prompt per process, n=m=16"
    shape = f"layers {a.layers}, hidden {a.hidden}, vocab {a.vocab}, LoRA {a.lora}, {a.completion_len} tokens"
    read = f"median over steps 3 to {a.steps - 1}" + (f"; step {a.steps} profiled" if a.profile else "")
    work = Path(tempfile.mkdtemp(prefix="pods_scaling_"))
    t0 = time.perf_counter()
    model_dir, data = build_model_dir(a, work), write_data(work)
    print(f"model and data built in {time.perf_counter() - t0:.0f} s", flush=True)
    rows, raw, profs = [], [], []
    for dist in a.dist.split(","):
        for k in map(int, a.procs.split(",")):
            t0 = time.perf_counter()
            recs, profiles = run_point(a, model_dir, data, k, dist, work / f"{dist}_{k}")
            rows.append((dist, k, summarize(recs, profiles)))
            profs.append((dist, k, profiles))
            raw += [{"dist": dist, "procs": k, **r} for r in recs]
            raw += [{"dist": dist, "procs": k, "profile": pr} for pr in profiles]
            # written after every point: a run stopped by a time limit keeps the points it finished
            out.write_text(
                f"Scaling ({kind}; {shape}; device {a.device}; {read}):\n\n" + table(rows, not a.strong)
            )
            out.with_suffix(".jsonl").write_text("".join(json.dumps(r) + "\n" for r in raw))
            if a.profile:
                out.with_suffix(".profile.md").write_text(profile_md(profs))
            print(f"{dist} x{k}: {time.perf_counter() - t0:.0f} s for the launch", flush=True)
            print(table(rows, not a.strong), flush=True)
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
