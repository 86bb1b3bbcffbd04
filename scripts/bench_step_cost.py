"""Where a training step's milliseconds go, GRPO 16/16 against PODS 64/16 (issue 38), and which parts grow
with the rows generated per step.

The real Trainer runs a few steps of each setting; its phase timers (pods/timing.py) give generation, reward,
selector, advantages, update, weight sync and the rest. Generation is split further by instrumenting this
process's HF backend (benchmark only; nothing in pods changes):

    tokenize       prompts -> ids (once per prompt, then repeated n times)
    prefill        the prompt forward of every row (StepDecoder's "prefill": P x n rows today)
    decode         every decode step after the prefill (graph replays on CUDA; eager steps on a CPU), of which
      tail         the steps after 90% of a chunk's rows had finished (their share of decode, pro rata: each
                   step costs the same in a fixed-shape batch)
    warm-up        the two eager steps and the capture of a released graph (CUDA, every call)
    sampling       (CPU only, inside decode) the warpers, softmax and draw of every step (step_graph.pick)
    detokenize     the completions' texts (host: HFGenerator.detokenize, each distinct row decoded once)
    gen. other     the rest of generation: padding rows, the device-to-host copy, the completion mask,
                   merging a LoRA adapter in and out, building the Rollouts
    logprobs       old / reference log-probs of the update (only with mu > 1 or beta > 0)

On a GPU the decode step's parts run inside one CUDA graph; `--pick-micro` times the sampling alone at each
row count (eager, synchronised), for the sampling's share there.

The headline shape (default): model=headline, 8 prompts per step, T=0.9, rollout.batch_size=auto (the default;
headline v4 ran 512). `--random-shape` with bench/harness.py's model flags builds a random Qwen2 instead (the 3B LoRA
shape of results/h100_3b/: --layers 36 --hidden 2048 --heads 16 --kv-heads 2 --intermediate 11008 --lora),
on bench/harness.py's arithmetic-looking prompts and its bench_hash reward.

    PYTHONPATH=. python scripts/bench_step_cost.py --device cpu --steps 3 --out results/step_cost/cpu
    PYTHONPATH=. python scripts/bench_step_cost.py --device cpu --sweep 8,16,32,64 --settings "" --steps 2
    PYTHONPATH=. python scripts/bench_step_cost.py --device cuda --steps 8 --sweep 8,16,32,64,128
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.harness import (  # noqa: E402
    add_model_args,
    build_model_dir,
    compose_train,
    pods_cfg,
    save_results,
    sync,
    write_data,
)
from bench.step_parts import ROWS, Probe, StepRecorder  # noqa: E402
from pods.config import validate  # noqa: E402
from pods.rollout import step_graph  # noqa: E402
from pods.train import preflight  # noqa: E402
from pods.trainer import Trainer  # noqa: E402


def fixed_rows(args) -> int:
    """--rollout-batch as a number, for the A/B benchmarks that build an HFGenerator directly (auto: 1,024)."""
    return 1024 if args.rollout_batch == "auto" else int(args.rollout_batch)


def headline_cfg(args, run_dir: Path, selector: str, n: int, m: int, own: list[str]):
    overrides = f"""run_dir={run_dir} model=headline dataset={args.dataset} logger=none
        hardware={"gpu" if args.device == "cuda" else "cpu"} rollout.batch_size={args.rollout_batch}
        sampling.temperature=0.9 algo.prompts_per_step={args.prompts_per_step} selector={selector}
        selector.n={n} selector.m={m} max_steps={args.steps} seed={args.seed} eval.at_start=false
        eval.at_end=false eval.every_steps=0 eval.every_seconds=0 checkpoint.every_steps=0
        checkpoint.every_seconds=0 checkpoint.save_final=false""".split()
    overrides += list(args.set or []) + own
    cfg = compose_train(overrides)
    validate(cfg)
    return cfg


def run_setting(
    args, name: str, selector: str, n: int, m: int, own: list[str], tmp: Path, model_dir, data
) -> dict:
    run_dir = tmp / f"{name}-{time.monotonic_ns()}"
    if args.random_shape:
        saved, args.set = args.set, list(args.set or []) + own
        cfg = pods_cfg(args, model_dir, data, run_dir, selector, n, m)
        args.set = saved
    else:
        cfg = headline_cfg(args, run_dir, selector, n, m, own)
    trainer = Trainer(preflight(cfg), run_dir)
    trainer.reward_fn.grader.wait_ready(120) if hasattr(trainer.reward_fn, "grader") else None
    probe = Probe(trainer.backend, args.device)
    if trainer.backend.loop == "generate":  # no decoder phases: the generate() call is the decode
        trainer.backend._decode = probe.timed("decode_generate", trainer.backend._decode)
    rec = StepRecorder(probe)
    trainer.callbacks.append(rec)
    trainer.train()
    trainer.reward_fn.close()
    decoders = getattr(trainer.backend, "step_decoders", {}).values()  # the graph loop's: which attention ran
    attention = sorted({"sdpa" if d.flex is None else "flex" for d in decoders}) or ["generate()"]
    steps = rec.steps[args.skip :] or rec.steps
    keys = [k for k in steps[0] if isinstance(steps[0][k], (int, float))]
    mean = {k: statistics.fmean(s[k] for s in steps) for k in keys}
    return {
        "name": name,
        "selector": selector,
        "n": n,
        "m": m,
        "overrides": own,
        "decode attention": "+".join(attention),
        "mean": mean,
        "steps": rec.steps,
    }


def pick_micro(device: str, rows_list: list[int], vocab: int, reps: int = 50) -> dict:
    """ms of one eager sampling call (warpers at T=0.9, softmax, draw) on (rows, vocab) float32 logits."""
    out = {}
    for rows in rows_list:
        x = torch.randn(rows, vocab, device=device)
        for _ in range(3):
            step_graph.pick(x, 0.9, 1.0, 0)
        sync(device)
        t0 = time.perf_counter()
        for _ in range(reps):
            step_graph.pick(x, 0.9, 1.0, 0)
        sync(device)
        out[rows] = 1e3 * (time.perf_counter() - t0) / reps
    return out


def headline_prompts(cfg, k: int) -> tuple[list[dict], list[str]]:
    """The first k training rows of cfg's dataset and their prompts (the benchmarks' fixed inputs)."""
    lines = [json.loads(x) for x in Path(cfg.dataset.task).read_text().splitlines()[:k]]
    return lines, [cfg.dataset.template.format(**row) for row in lines]


def profile_decode(args, rows_per_prompt=(16, 64), top: int = 15) -> list[dict]:
    """One generate call of the headline policy at --prompts-per-step x each n rows (T=0.9), through the backend
    a run builds (the compiled graph loop on CUDA), profiled with torch.profiler after two unprofiled calls: the
    kernels and ops whose device time grows with rows. Rows: the `top` entries by self device time (CPU: self
    CPU time), ms per call."""
    from torch.profiler import ProfilerActivity, profile

    cfg = headline_cfg(args, Path(tempfile.gettempdir()) / "profile_decode", "none", 16, 16, [])
    trainer = Trainer(preflight(cfg), Path(tempfile.mkdtemp(prefix="profile_decode-")))
    _, prompts = headline_prompts(cfg, args.prompts_per_step)
    cuda = args.device == "cuda"
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    out = []
    for n in rows_per_prompt:
        for _ in range(2):  # compile, capture, caches
            trainer.backend.generate(prompts, list(range(len(prompts))), n, 0.9)
        sync(args.device)
        with profile(activities=acts) as prof:
            t0 = time.perf_counter()
            r = trainer.backend.generate(prompts, list(range(len(prompts))), n, 0.9)
            sync(args.device)
            wall = time.perf_counter() - t0
        key = "self_device_time_total" if cuda else "self_cpu_time_total"
        ev = sorted(prof.key_averages(), key=lambda e: getattr(e, key, 0.0), reverse=True)[:top]
        out.append({
            "n": n, "rows": n * len(prompts), "wall_ms": 1e3 * wall,
            "completion_tokens": int(r.completion_mask.sum()), "width": int(r.input_ids.shape[1]),
            "top": [{"name": e.key[:90], "calls": e.count, "self_ms": getattr(e, key, 0.0) / 1e3} for e in ev],
        })  # fmt: skip
    trainer.reward_fn.close()
    return out


def headline_policy(args, name: str):
    """The headline config (GRPO 16/16), its tokenizer and policy on --device in eval mode, the dtype, and the
    first `--prompts-per-step` training rows and their prompts: what the A/B benchmarks below run on."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    cfg = headline_cfg(args, Path(tempfile.gettempdir()) / name, "none", 16, 16, [])
    tok = AutoTokenizer.from_pretrained(cfg.model.path)
    dtype = torch.bfloat16 if args.device == "cuda" else torch.float32
    model = AutoModelForCausalLM.from_pretrained(cfg.model.path, dtype=dtype).to(args.device).eval()
    return cfg, tok, model, dtype, *headline_prompts(cfg, args.prompts_per_step)


def prefill_ab(args, reps: int = 4) -> list[dict]:
    """The prefill alone, shared (rollout.hf.share_prefill) or per row, alternating A and B so load drifts hit
    both: generate() of the first `--prompts-per-step` training prompts x n rows with one new token (prefill and
    its draw; the graph loop, eager on a CPU), wall and process CPU ms per call, mean of `reps` after one warm-up.
    Greedy: the one token of each row is compared too."""
    from pods.rollout.hf import HFGenerator

    cfg, tok, model, dtype, _, prompts = headline_policy(args, "prefill_ab")
    out = []
    for n in (16, 64):
        gens = {
            share: HFGenerator(model, tok, args.device, fixed_rows(args), 1, compiled=True, dtype=dtype,
                               max_prompt_len=cfg.model.max_prompt_len, share_prefill=share)
            for share in (False, True)
        }  # fmt: skip
        for g in gens.values():  # one new token: no decode step runs, so nothing needs compiling first
            g._warm_up = lambda *a, **kw: None
        times = {False: [], True: []}
        tokens = {}
        for rep in range(reps + 1):
            for share, g in gens.items():
                sync(args.device)
                w0, c0 = time.perf_counter(), time.process_time()
                r = g.generate(prompts, list(range(len(prompts))), n, 0.0)
                sync(args.device)
                if rep:
                    times[share].append((time.perf_counter() - w0, time.process_time() - c0))
                tokens[share] = r.input_ids[:, r.prompt_len :]
        for share in (False, True):
            wall = statistics.fmean(t[0] for t in times[share])
            cpu = statistics.fmean(t[1] for t in times[share])
            out.append({"n": n, "rows": n * len(prompts), "share_prefill": share, "wall_ms": 1e3 * wall,
                        "cpu_ms": 1e3 * cpu})  # fmt: skip
        out[-1]["tokens_differ"] = int((tokens[False] != tokens[True]).sum())
    return out


def host_ab(args, reps: int = 30) -> list[dict]:
    """Detokenize and reward before and after issue 38's host-work changes (bench/host_work.py), alternating,
    on one set of rollouts: the first `--prompts-per-step` training prompts x 64 rows of the headline policy
    at T=0.9 (seeded; transformers' generate loop, nothing to compile: the rollouts are only the input here),
    and their first 16 rows per prompt (GRPO's batch)."""
    from bench.host_work import ab, arms
    from pods.reward.grading import Grader
    from pods.rollout.hf import HFGenerator

    cfg, tok, model, dtype, lines, prompts = headline_policy(args, "host_ab")
    gen = HFGenerator(model, tok, args.device, fixed_rows(args), cfg.model.max_completion_len,
                      dtype=dtype, max_prompt_len=cfg.model.max_prompt_len)  # fmt: skip
    torch.manual_seed(args.seed)
    r = gen.generate(prompts, list(range(len(prompts))), 64, 0.9)
    comp = r.input_ids[:, r.prompt_len :]
    grader = Grader(timeout_s=cfg.reward.timeout_s, workers=cfg.reward.workers)
    grader.wait_ready(120)
    out = []
    try:
        for n in (16, 64):
            keep = [p * 64 + j for p in range(len(prompts)) for j in range(n)]
            golds = [str(lines[p]["answer"]) for p in range(len(prompts)) for _ in range(n)]
            texts = [r.texts[i] for i in keep]
            row = {"n": n, "rows": len(keep), "distinct completions": len(set(texts)),
                   "mean length": float(r.completion_mask[keep].sum(1).float().mean())}  # fmt: skip
            row.update(ab(arms(tok, comp[keep], golds, grader), reps))
            out.append(row)
            print(f"host work, {len(keep)} rows: done", flush=True)
    finally:
        grader.close()
    return out


def fmt_ms(x: float) -> str:
    return f"{1e3 * x:.1f}"


def markdown(res: dict) -> str:
    runs = res["runs"]
    lines = [f"# Step cost by part ({res['device']}, {res['shape']})", ""]
    lines += [f"Command: `{res['command']}`", "", "ms per step, mean over steps after the first "
              f"{res['args']['skip']} (steps: {res['args']['steps']})", ""]  # fmt: skip
    if not runs:  # --prefill-ab or --host-ab alone
        lines = lines[:4]
    head = ["part", *[r["name"] for r in runs]]
    pair = None
    names = [r["name"] for r in runs]
    if "grpo16" in names and "pods64" in names:
        pair = (runs[names.index("grpo16")], runs[names.index("pods64")])
        head += ["pods64 - grpo16", "ratio"]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] if runs else []
    for part in ROWS if runs else []:
        key = part.strip()
        cells = [part.replace("  ", "&nbsp;&nbsp;"), *[fmt_ms(r["mean"].get(key, 0.0)) for r in runs]]
        if pair:
            a, b = pair[0]["mean"].get(key, 0.0), pair[1]["mean"].get(key, 0.0)
            cells += [fmt_ms(b - a), f"{b / a:.2f}" if a > 1e-6 else "-"]
        lines.append("| " + " | ".join(cells) + " |")
    for key in ("rows", "update rows", "decode steps", "mean length", "max length") if runs else []:
        cells = [key, *[f"{r['mean'].get(key, 0.0):.1f}" for r in runs]]
        lines.append("| " + " | ".join(cells + ([""] * 2 if pair else [])) + " |")
    if runs:  # which decode attention ran (rollout.hf.decode_attention; generate() has its own loop)
        cells = ["decode attention", *[r.get("decode attention", "-") for r in runs]]
        lines.append("| " + " | ".join(cells + ([""] * 2 if pair else [])) + " |")
    if res.get("prefill_ab"):
        lines += ["", "Prefill alone (generate() with one new token, greedy; mean of alternating calls):", "",
                  "| rows | share_prefill | wall ms | process CPU ms | greedy tokens differing |",
                  "|---|---|---|---|---|"]  # fmt: skip
        for r in res["prefill_ab"]:
            lines.append(f"| {r['rows']} | {r['share_prefill']} | {r['wall_ms']:.1f} | {r['cpu_ms']:.1f} | "
                         f"{r.get('tokens_differ', '')} |")  # fmt: skip
    if res.get("host_ab"):
        lines += ["", f"Host work per step, before and after (bench/host_work.py; {res['args']['host_reps']} "
                  "alternating calls each; ms: min / median of wall, min / median of process CPU):", "",
                  "| rows | distinct completions | part | before wall | after wall | before CPU | after CPU |",
                  "|---|---|---|---|---|---|---|"]  # fmt: skip
        for r in res["host_ab"]:
            for part in ("detokenize", "reward"):
                b, a = r[f"{part} before"], r[f"{part} after"]
                lines.append(
                    f"| {r['rows']} | {r['distinct completions']} | {part} | {b['wall_min']:.2f} / "
                    f"{b['wall_median']:.2f} | {a['wall_min']:.2f} / {a['wall_median']:.2f} | {b['cpu_min']:.2f} / "
                    f"{b['cpu_median']:.2f} | {a['cpu_min']:.2f} / {a['cpu_median']:.2f} |"
                )
    for r in res.get("profile_decode", []):
        lines += ["", f"Profile of one generate call, {r['rows']} rows ({r['n']} a prompt; {r['completion_tokens']} "
                  f"completion tokens, width {r['width']}): {r['wall_ms']:.1f} ms wall. Top ops by self "
                  "device time (CPU: self CPU time):", "", "| op | calls | self ms |", "|---|---|---|"]  # fmt: skip
        lines += [f"| `{e['name']}` | {e['calls']} | {e['self_ms']:.2f} |" for e in r["top"]]
    if res.get("pick_ms"):
        lines += ["", "Sampling alone (eager, one call on (rows, vocab) logits, T=0.9), ms: "
                  + ", ".join(f"{k} rows {v:.3f}" for k, v in res["pick_ms"].items())]  # fmt: skip
    return "\n".join(lines) + "\n"


def parse_settings(args) -> list[tuple[str, str, int, int, list[str]]]:
    """--settings name:selector:n:m[:override|override...] and --sweep n,n,... -> (name, selector, n, m,
    overrides) in the order given (a setting's own overrides come after --set's)."""
    out = []
    for s in filter(None, args.settings.split(",")):
        name, sel, n, m, *own = s.split(":")
        out.append((name, sel, int(n), int(m), own[0].split("|") if own else []))
    for n in filter(None, args.sweep.split(",")):
        n = int(n)
        m = min(n, args.sweep_m)
        out.append((f"n{n}", "none" if n == m else "max_variance", n, m, []))
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_model_args(p)
    p.set_defaults(steps=4, completion_len=512)
    p.add_argument("--random-shape", action="store_true", help="a random Qwen2 of the model flags' shape")
    p.add_argument("--dataset", default="arithmetic_hard_local", help="headline shape: the dataset group")
    p.add_argument("--prompts-per-step", type=int, default=8)
    p.add_argument("--rollout-batch", default="auto", help="rollout.batch_size of the headline shape")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--skip", type=int, default=1, help="first steps not averaged (compile, warm-up)")
    p.add_argument("--settings", default="grpo16:none:16:16,pods64:max_variance:64:16",
                   help="name:selector:n:m, comma-separated")  # fmt: skip
    p.add_argument("--sweep", default="", help="rows per prompt, e.g. 8,16,32,64,128 (m = min(n, --sweep-m))")
    p.add_argument("--sweep-m", type=int, default=16)
    p.add_argument("--pick-micro", action="store_true", help="time the sampling alone at each row count")
    p.add_argument("--prefill-ab", action="store_true", help="headline: the prefill alone, shared or per row")
    p.add_argument("--host-ab", action="store_true", help="headline: detokenize and reward, before/after")
    p.add_argument("--host-reps", type=int, default=30, help="--host-ab: calls per arm")
    p.add_argument(
        "--profile-decode", action="store_true", help="headline: one generate call per row count, profiled"
    )
    p.add_argument("--label", default="")
    p.add_argument("--out", default="results/step_cost/run")
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    settings = parse_settings(args)
    if not settings and not args.prefill_ab and not args.host_ab and not args.profile_decode:
        p.error("nothing to run: give --settings, --sweep, --prefill-ab, --host-ab or --profile-decode")
    name = torch.cuda.get_device_name() if args.device == "cuda" else "CPU"
    shape = (f"random Qwen2 {args.layers} layers x {args.hidden}{', LoRA' if args.lora else ''}"
             if args.random_shape else f"headline, {args.dataset}")  # fmt: skip
    if args.label:
        shape += f", {args.label}"
    res = {"device": name, "shape": shape, "args": vars(args), "command": " ".join(sys.argv), "runs": []}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        model_dir = data = None
        if args.random_shape:
            model_dir, data = build_model_dir(args, tmp), write_data(tmp)
        for s in settings:
            res["runs"].append(run_setting(args, *s, tmp, model_dir, data))
            r = res["runs"][-1]["mean"]
            print(
                f"{s[0]}: step {r['step'] * 1e3:.1f} ms, generation {r['generation'] * 1e3:.1f} ms",
                flush=True,
            )
            save_results(Path(args.out), res, markdown(res))
    if args.prefill_ab:
        res["prefill_ab"] = prefill_ab(args)
    if args.host_ab:
        res["host_ab"] = host_ab(args, args.host_reps)
    if args.profile_decode:
        res["profile_decode"] = profile_decode(args)
    if args.pick_micro:
        vocab = 313 if not args.random_shape else args.vocab
        rows = sorted({r["n"] * args.prompts_per_step for r in res["runs"]})
        res["pick_ms"] = pick_micro(args.device, rows, vocab)
    save_results(Path(args.out), res, markdown(res))
    print(markdown(res))


if __name__ == "__main__":
    main()
