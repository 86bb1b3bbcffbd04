"""Weak and strong scaling of the real Trainer under torchrun (issue 28): one table of step, generation,
update, metrics (cross-rank gathers), the part of the step no phase claims, peak memory and efficiency.

Each point is `torchrun --nproc_per_node k -m bench.scaling_rank ...` (pods.train's run, the real Trainer) on a
random Qwen2 of the given shape with the `bench_hash` reward (bench/harness.py, loaded with `plugins=`), n=m=16,
eval and checkpoints off; steps 3 onward are read (median over rank 0's records). With `--profile` the last
step runs under torch.profiler on every rank and is not read: its NCCL kernel time (the largest over ranks;
a kernel waiting for a slower rank counts) is the table's NCCL column, and its top kernels and host ops go to
<out>.profile.md. Each point's table, raw records and profile are written as soon as it ends. Weak scaling
keeps the work per process fixed (one prompt per process per step: efficiency = step at 1 / step at k); strong
scaling keeps the global batch fixed (`--strong 8`: 8 prompts per step over k processes, the headline's n=64,
m=16). `--dist fsdp_keep` is FSDP with update.fsdp_reshard_after_forward=false, `fsdp_prefetch` FSDP with
update.fsdp_prefetch=1, `fsdp_units` / `fsdp_per_layer` / `fsdp_one_unit` FSDP with the layers in units of about
1e8 parameters (the default) / one per layer / all in one (update.fsdp_unit_params). `--side-by-side` runs the
1-process points of the dists at once, one GPU each, as many as there are GPUs, the rest after the multi-GPU
points (they share the host's CPUs, not a GPU). `--repeats N` runs the whole sequence N times in turn (1, 4, 1,
4, ...), pools each point's steps and lists each repeat's own efficiency below the table, paired with the same
repeat's 1-process point. `--decode-parts` splits rank 0's generation by the graph loop's parts (reclaim,
prefill, eager, capture, replay, other; bench/scaling_rank.py's DecodeParts) in a second table. Each launch
prints where its seconds went: warm-up compiles, steps, and the rest (start-up, model load, teardown).
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

import torch

ROOT = Path(__file__).resolve().parents[1]
PHASES = ("generation", "gather", "reward", "update", "metrics", "weight_sync", "unattributed")


DISTS = {  # --dist name -> (hardware preset on a GPU, hardware.distributed, extra overrides)
    "ddp": ("multi_gpu", "ddp", []),
    "fsdp": ("fsdp", "fsdp", []),
    # FSDP, a layer's gathered weights kept through the optimizer step (one all-gather per unit per step)
    "fsdp_keep": ("fsdp", "fsdp", ["update.fsdp_reshard_after_forward=false"]),
    # FSDP, each layer starting the next layer's all-gather explicitly (forward and backward)
    "fsdp_prefetch": ("fsdp", "fsdp", ["update.fsdp_prefetch=1"]),
    # FSDP with the decoder layers in units of about 1e8 parameters (3 units of 8 layers at 0.5B; the default
    # since results/scaling/h200x4/, where `fsdp` still meant a unit per layer), a unit per layer, all in one
    "fsdp_units": ("fsdp", "fsdp", ["update.fsdp_unit_params=100000000"]),
    "fsdp_per_layer": ("fsdp", "fsdp", ["update.fsdp_unit_params=0"]),
    "fsdp_one_unit": ("fsdp", "fsdp", ["update.fsdp_unit_params=1000000000000"]),
}


def point_overrides(
    a, model_dir: Path, data: tuple[Path, Path], procs: int, dist: str, run_dir: Path
) -> list[str]:
    prompts = a.strong or procs  # strong: fixed global batch; weak: one prompt per process
    n, m = (64, 16) if a.strong else (16, 16)
    preset, distributed, extra = DISTS[dist]
    hw = preset if a.device == "cuda" else "cpu"
    return [
        f"run_dir={run_dir}", "model=qwen2.5-0.5b", "model.name=bench", f"model.path={model_dir}",
        "model.use_chat_template=false", f"model.max_completion_len={a.completion_len}",
        "dataset=arithmetic", "dataset.name=bench", "dataset.source=local", f"dataset.task={data[0]}",
        f"dataset.eval_task={data[1]}", "dataset.train_size=0", "dataset.eval_size=0",
        f"selector.n={n}", f"selector.m={m}", "rollout=hf", "logger=none", f"hardware={hw}",
        f"hardware.distributed={distributed}", f"hardware.lora={str(a.lora).lower()}",
        f"algo.prompts_per_step={prompts}", f"max_steps={a.steps}", "eval.at_start=false", "eval.at_end=false",
        "eval.every_steps=0", "checkpoint.every_steps=0", "checkpoint.save_final=false", "plugins=[bench.harness]",
        "reward=format", "reward.weights.format=0", "+reward.weights.bench_hash=1.0", *extra, *a.set,
    ]  # fmt: skip


def launch(a, model_dir: Path, data, procs: int, dist: str, run_dir: Path, gpus: str | None = None):
    """Start one torchrun launch (on the GPUs `gpus` names, e.g. "1", when given); finish() collects it."""
    from bench.harness import torchrun_command

    prof = ["--profile-step", str(a.steps)] if a.profile else []
    prof += ["--decode-parts"] if a.decode_parts else []
    cmd = [*torchrun_command(procs), "-m", "bench.scaling_rank", *prof, "--"]
    env = {**os.environ, "OMP_NUM_THREADS": str(a.threads)}
    if gpus is not None:
        env["CUDA_VISIBLE_DEVICES"] = gpus
    log = open(run_dir.with_suffix(".log"), "w")  # noqa: SIM115 (closed by finish())
    run_dir.mkdir(parents=True, exist_ok=True)
    overrides = point_overrides(a, model_dir, data, procs, dist, run_dir)
    proc = subprocess.Popen(
        cmd + overrides, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, text=True
    )
    return proc, log, time.perf_counter()


def finish(a, launched, procs: int, dist: str, run_dir: Path) -> tuple[list[dict], list[dict], dict]:
    """Wait for a launch: its rank-0 train records (the read steps), every rank's profile summary, and where
    the launch's seconds went (whole launch, warm-up compiles, steps; the rest is start-up and teardown)."""
    proc, log, t0 = launched
    rc = proc.wait()
    log.close()
    seconds = time.perf_counter() - t0
    if rc != 0:
        raise SystemExit(f"{dist} x{procs} failed:\n{run_dir.with_suffix('.log').read_text()[-3000:]}")
    recs = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    profiles = [json.loads(f.read_text()) for f in sorted(run_dir.glob("profile_rank*.json"))]
    train = [r for r in recs if r.get("kind") == "train"]
    merge_decode_parts(train, run_dir / "decode_parts_rank0.jsonl")
    cost = {
        "launch_s": seconds,
        "compile_s": sum(r.get("timing/compile", 0.0) for r in train),
        "steps_s": sum(r.get("timing/wall_step", 0.0) for r in train),
    }
    # the first two steps carry warm-ups and compiles; with --profile the last ran under the profiler
    last = a.steps - 1 if a.profile else a.steps
    return [r for r in train if 2 < r["step"] <= last], profiles, cost


def merge_decode_parts(train: list[dict], path: Path) -> None:
    """Rank 0's generation parts of each step (bench/scaling_rank.py's DecodeParts; absent without
    --decode-parts) into that step's record as `decode/<part>`; steps whose decoders were not yet timed get
    none."""
    if not path.exists():
        return
    parts = {p["step"]: p for p in map(json.loads, path.read_text().splitlines()) if p["timed"]}
    for r in train:
        for k, v in parts.get(r["step"], {}).items():
            if k not in ("step", "timed"):
                r[f"decode/{k}"] = v


def decode_table(rows: list[tuple[str, int, list[dict]]]) -> str:
    """Generation by the graph loop's part: median seconds over the read steps of rank 0, per point. A new
    shape's warm-up decodes (timed as compile, outside generation) are in the parts, so the first column is
    generation plus compile; medians of the parts need not add up to the median total."""
    from bench.scaling_rank import DECODE_PARTS

    cols = (*DECODE_PARTS, "other")
    head = (
        "| dist | procs | generation + compile s | "
        + " | ".join(f"{c} s" for c in cols)
        + " | decode steps |"
    )
    lines = ["\nGeneration by part (rank 0; a device sync at each part's edges):\n", head,
             "|" + "---|" * (4 + len(cols))]  # fmt: skip
    for d, k, recs in rows:
        timed = [r for r in recs if "decode/replay" in r]
        if not timed:
            continue
        med = lambda key, timed=timed: st.median(r.get(key, 0.0) for r in timed)  # noqa: E731
        spent = st.median(r.get("timing/generation", 0.0) + r.get("timing/compile", 0.0) for r in timed)
        cells = [d, str(k), f"{spent:.3f}", *(f"{med('decode/' + c):.3f}" for c in cols)]
        lines.append("| " + " | ".join(cells) + f" | {med('decode/tokens'):.0f} |")
    return "\n".join(lines) + "\n" if len(lines) > 3 else ""


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
            phases = sorted(pr.get("phases", {}).items(), key=lambda x: -x[1]["kernels_ms"])
            if phases:  # device time of the kernels each phase launched (NCCL's includes waiting for peers)
                out.append("| phase | kernels ms | NCCL ms |\n|---|---|---|")
                out += [f"| {n} | {v['kernels_ms']:.1f} | {v['nccl_ms']:.1f} |" for n, v in phases]
                out.append("")
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


def per_repeat(walls: dict[tuple[str, int], list[float]], weak: bool) -> str:
    """Below the table: each repeat's wall step per point and, pairing repeat i at k processes with repeat i at
    1, each repeat's efficiency (weak) or speedup (strong)."""
    what = "efficiency" if weak else "speedup"
    lines = ["\n| dist | procs | wall step s per repeat | " + what + " per repeat |", "|---|---|---|---|"]
    for (d, k), ws in walls.items():
        base = walls.get((d, 1), [])
        ratios = [f"{b / w:.3f}" for b, w in zip(base, ws)] if k != 1 else []
        lines.append(f"| {d} | {k} | {', '.join(f'{w:.3f}' for w in ws)} | {', '.join(ratios) or '-'} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    sys.path.insert(0, str(ROOT))
    from bench.harness import add_model_args, build_model_dir, write_data

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_args(p)
    p.add_argument("--procs", default="1,2,4", help="comma list of process counts (one GPU each)")
    p.add_argument("--dist", default="ddp,fsdp", help=f"comma list of {', '.join(DISTS)}")
    p.add_argument(
        "--strong", type=int, default=0, help="a fixed global batch of this many prompts (n=64, m=16)"
    )
    p.add_argument("--out", required=True, help="the table (markdown); raw records beside it as .jsonl")
    p.add_argument(
        "--profile", action="store_true", help="profile the last step (NCCL column, <out>.profile.md)"
    )
    p.add_argument(
        "--side-by-side", action="store_true",
        help="run the 1-process points of all --dist at once, one GPU each, as many at once as there are GPUs",
    )  # fmt: skip
    p.add_argument(
        "--repeats", type=int, default=1,
        help="run every point this many times, in turn (1, 4, 1, 4, ...): a row pools the repeats' steps, and "
        "each repeat's efficiency is listed below the table (paired, so a machine's drift shows)",
    )  # fmt: skip
    p.add_argument(
        "--decode-parts", action="store_true",
        help="split rank 0's generation by the graph loop's parts (a second table; a device sync at each edge)",
    )  # fmt: skip
    a = p.parse_args()
    a.threads = a.threads or 1
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    kind = f"strong, {a.strong} prompts x n=64, m=16" if a.strong else "weak, 1 prompt per process, n=m=16"
    shape = f"layers {a.layers}, hidden {a.hidden}, vocab {a.vocab}, LoRA {a.lora}, {a.completion_len} tokens"
    last = a.steps - 1 if a.profile else a.steps  # the steps finish() reads
    read = f"median over steps 3 to {last}" + (f"; step {a.steps} profiled" if a.profile else "")
    work = Path(tempfile.mkdtemp(prefix="pods_scaling_"))
    t0 = time.perf_counter()
    model_dir, data = build_model_dir(a, work), write_data(work)
    print(f"model and data built in {time.perf_counter() - t0:.0f} s", flush=True)
    dists, procs = a.dist.split(","), [int(k) for k in a.procs.split(",")]
    unknown = [d for d in dists if d not in DISTS]
    if unknown:
        raise SystemExit(f"--dist: unknown {unknown}; choose from {sorted(DISTS)}")
    points = [(d, k) for d in dists for k in procs]
    # --side-by-side: the 1-process points of all dists at once, one GPU each, then the others one at a time
    batches = [[p] for p in points]
    if a.side_by_side:  # as many at once as there are GPUs; singles that do not fit run after the others
        singles, width = [p for p in points if p[1] == 1], max(1, torch.cuda.device_count())
        chunks = [singles[i : i + width] for i in range(0, len(singles), width)]
        batches = chunks[:1] + [[p] for p in points if p[1] != 1] + chunks[1:]
    if a.repeats < 1:
        raise SystemExit("--repeats must be >= 1")
    # per point, each finished repeat's (records, profiles, cost)
    results: dict[tuple[str, int], list[tuple]] = {}
    side = "; 1-process points side by side, one GPU each" if a.side_by_side else ""
    side += f"; {a.repeats} repeats in turn, steps pooled" if a.repeats > 1 else ""

    def write() -> None:  # after every batch, and before a failure ends the run: finished points are kept
        done = [p for p in points if p in results]
        pooled = {p: [r for recs, _, _ in results[p] for r in recs] for p in done}
        rows = [(d, k, summarize(pooled[(d, k)], results[(d, k)][0][1])) for d, k in done]
        raw = [{"dist": d, "procs": k, "repeat": i, **r} for d, k in done for i, (recs, _, _) in
               enumerate(results[(d, k)]) for r in recs]  # fmt: skip
        raw += [{"dist": d, "procs": k, "repeat": i, "profile": pr} for d, k in done
                for i, (_, prs, _) in enumerate(results[(d, k)]) for pr in prs]  # fmt: skip
        raw += [{"dist": d, "procs": k, "repeat": i, "launch": c} for d, k in done
                for i, (_, _, c) in enumerate(results[(d, k)])]  # fmt: skip
        walls = {p: [summarize(recs, [])["wall"] for recs, _, _ in results[p]] for p in done}
        out.write_text(
            f"Scaling ({kind}; {shape}; device {a.device}; {read}{side}):\n\n"
            + table(rows, not a.strong)
            + (per_repeat(walls, not a.strong) if a.repeats > 1 else "")
            + decode_table([(d, k, pooled[(d, k)]) for d, k in done])
        )
        out.with_suffix(".jsonl").write_text("".join(json.dumps(r) + "\n" for r in raw))
        if a.profile:  # the first repeat's profiled step
            out.with_suffix(".profile.md").write_text(
                profile_md([(d, k, results[(d, k)][0][1]) for d, k in done])
            )
        print(table(rows, not a.strong), flush=True)

    for rep, batch in [(r, b) for r in range(a.repeats) for b in batches]:
        gpus = (
            [str(i) for i in range(len(batch))] if a.side_by_side and len(batch) > 1 else [None] * len(batch)
        )
        dirs = [work / f"{d}_{k}_r{rep}" for d, k in batch]
        started = [launch(a, model_dir, data, k, d, r, g) for (d, k), g, r in zip(batch, gpus, dirs)]
        try:
            for (d, k), launched, r in zip(batch, started, dirs):
                results.setdefault((d, k), []).append(finish(a, launched, k, d, r))
                cost = results[(d, k)][-1][2]
                print(f"{d} x{k}: launch {cost['launch_s']:.0f} s (warm-up compiles {cost['compile_s']:.0f} s, "
                      f"steps {cost['steps_s']:.0f} s; the rest is start-up and teardown)", flush=True)  # fmt: skip
        except BaseException:  # a failed or interrupted point: stop its batch-mates, keep what finished
            for proc, log, _ in started:
                if proc.poll() is None:
                    proc.terminate()
                    proc.wait()
                log.close()
            write()
            raise
        write()
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
