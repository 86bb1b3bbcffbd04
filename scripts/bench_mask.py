"""Seconds of one policy update with and without a padding mask (issue 18, target 5: the 0.5B full fine-tune's
update took 0.36 s when all 16 completions ran the full 512 tokens and 1.5-1.7 s when one stopped early).

A random Qwen2 at Qwen2.5-0.5B's shape (24 layers, d 896, 14 query / 2 KV heads, 151936-token tied vocabulary),
float32 master weights under bf16 autocast, fused AdamW, the update of the hardware=gpu profile (micro-batches
by tokens, width buckets of 64, fused head + log-prob), on synthetic rows of one layout each:

    full     16 rows, 48-token prompts, every completion 512 tokens (no padding at all)
    early    as full, but row 0's completion stopped at 64 tokens (right padding: call 4's slow steps)
    left     prompts of 40-48 tokens (left padding, several prompts per step) and row 0 stopped at 64

each with the update's old masked layout (`mask`) and the causal layout (`causal`, pods.update.step.
CAUSAL_LAYOUT: rows shifted past their left padding, no mask handed to the model). --warmup updates first,
then --repeats timed ones (CUDA synchronised around each). Prints one line per run and a table last; writes
--out/bench_mask.{json,md}.

    PYTHONPATH=. python scripts/bench_mask.py --out $OUT                   # H100, 0.5B shape
    PYTHONPATH=. python scripts/bench_mask.py --device cpu --layers 2 --hidden 112 --heads 7 --kv-heads 1 \\
        --vocab 512 --completion-len 24 --prompt-len 8 --repeats 1 --warmup 1 --out /tmp/bm   # CPU dry run
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch
from omegaconf import OmegaConf
from transformers import Qwen2Config, Qwen2ForCausalLM

import pods.update.layout as layout_mod
from pods.batch import Rollouts
from pods.config import schema
from pods.distributed import Dist
from pods.models import autocast
from pods.update.optim import build_optimizer
from pods.update.step import policy_update


def layout_batch(kind: str, rows: int, lp: int, lc: int, vocab: int) -> Rollouts:
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, vocab, (rows, lp + lc), generator=g)
    plen = torch.full((rows,), lp)
    clen = torch.full((rows,), lc)
    if kind in ("early", "left"):
        clen[0] = min(64, lc // 4)
    if kind == "left":
        plen = lp - torch.arange(rows) % max(lp // 6, 1)  # 48, 47, ..., 40, 48, ...
    pm = torch.arange(lp)[None] >= (lp - plen)[:, None]
    cm = torch.arange(lc)[None] < clen[:, None]
    am = torch.cat([pm, cm], 1).long()
    adv = torch.where(torch.arange(rows) % 2 == 0, 1.0, -1.0)
    return Rollouts(ids * am, am, lp, cm.long(), [""] * rows, [0], rows, advantages=adv)


def _model(args) -> Qwen2ForCausalLM:
    return Qwen2ForCausalLM(
        Qwen2Config(
            vocab_size=args.vocab,
            hidden_size=args.hidden,
            intermediate_size=int(args.hidden * 38 / 7),  # 896 -> 4864 as in Qwen2.5-0.5B
            num_hidden_layers=args.layers,
            num_attention_heads=args.heads,
            num_key_value_heads=args.kv_heads,
            max_position_embeddings=4096,
            tie_word_embeddings=True,
            attn_implementation="sdpa",
        )
    )


def top_kernels(run, n: int = 6) -> list[tuple[str, float]]:
    """(name, total ms) of the n device kernels that took longest in one profiled call of `run`."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        run()
        torch.cuda.synchronize()
    tot: dict[str, float] = {}
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            tot[e.name] = tot.get(e.name, 0.0) + e.device_time_total / 1e3
    return [(k[:90], round(v, 2)) for k, v in sorted(tot.items(), key=lambda kv: -kv[1])[:n]]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--layers", type=int, default=24)
    p.add_argument("--hidden", type=int, default=896)
    p.add_argument("--heads", type=int, default=14)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--vocab", type=int, default=151936)
    p.add_argument("--rows", type=int, default=16)
    p.add_argument("--prompt-len", type=int, default=48)
    p.add_argument("--completion-len", type=int, default=512)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--repeats", type=int, default=4)
    p.add_argument("--layouts", default="full,early,left")
    p.add_argument("--profile", action="store_true", help="CUDA: top kernels of one more update per run")
    p.add_argument("--out", default="results/bench_mask")
    args = p.parse_args()
    device = torch.device(args.device)
    gpu = OmegaConf.load(Path(__file__).resolve().parents[1] / "conf/hardware/gpu.yaml")  # hardware, update
    if device.type == "cpu":
        gpu.hardware.device, gpu.hardware.dtype = "cpu", "float32"
    cfg = OmegaConf.merge(schema(), gpu, {"model": {"name": "bench", "path": "-"}, "optim": {"lr": 1e-6}})
    torch.manual_seed(0)
    with torch.device(device):  # initialised where it runs: no 0.5B random init on the host
        model = _model(args)
    model.to(torch.float32).train()
    opt, sched = build_optimizer(model, cfg.optim, 10_000, device)
    dist = Dist(cfg, device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    modes = ["mask", "causal"] if hasattr(layout_mod, "CAUSAL_LAYOUT") else ["mask"]
    dev = torch.cuda.get_device_name() if device.type == "cuda" else "cpu"
    res = {"device": dev, "torch": torch.__version__, "args": vars(args), "runs": {}}
    print(f"device {dev}, torch {torch.__version__}, modes {modes}", flush=True)
    for layout in args.layouts.split(","):
        batch = layout_batch(layout, args.rows, args.prompt_len, args.completion_len, args.vocab)
        for mode in modes:
            if hasattr(layout_mod, "CAUSAL_LAYOUT"):
                layout_mod.CAUSAL_LAYOUT = mode == "causal"
            times = []

            def once(batch=batch):
                with autocast(cfg, device):
                    return policy_update(
                        model, batch, opt, sched, cfg.algo, cfg["update"], cfg.optim, device, dist
                    )

            for i in range(args.warmup + args.repeats):
                sync()
                t0 = time.perf_counter()
                stats = once()
                sync()
                if i >= args.warmup:
                    times.append(time.perf_counter() - t0)
            r = {
                "median_s": statistics.median(times),
                "min_s": min(times),
                "max_s": max(times),
                "times_s": [round(t, 4) for t in times],
                "masked_micro_batches": stats.get("update/masked_micro_batches"),
                "micro_batches": stats.get("update/micro_batches"),
                "width_max": stats.get("update/width_max"),
                "tokens": stats["update/tokens"],
            }
            if args.profile and device.type == "cuda":
                try:
                    r["top_kernels_ms"] = top_kernels(once)
                except Exception as e:  # the timings stand without it
                    r["top_kernels_ms"] = f"profiler failed: {e!r}"
            res["runs"][f"{layout}/{mode}"] = r
            print(f"{layout}/{mode}", json.dumps(r), flush=True)
            _write(args, res)
    if device.type == "cuda":
        res["peak_gib"] = torch.cuda.max_memory_allocated() / 2**30
    print(_write(args, res))


def _write(args, res: dict) -> str:
    """Save what was measured so far (a run cut by its timeout keeps it); returns the table."""
    dev = res["device"]
    lines = [
        f"# One 0.5B-shape full fine-tune update, masked vs causal layout ({dev}, torch {torch.__version__})",
        "",
        f"{args.rows} rows, prompt {args.prompt_len} + completion {args.completion_len}; "
        f"{args.warmup} warm-ups, then {args.repeats} timed updates each.",
        "",
        "| layout/mode | median s | min s | max s | masked micro-batches |",
        "|---|---|---|---|---|",
    ]
    for k, r in res["runs"].items():
        m = r["masked_micro_batches"]
        lines.append(f"| {k} | {r['median_s']:.3f} | {r['min_s']:.3f} | {r['max_s']:.3f} | {m} |")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench_mask.json").write_text(json.dumps(res, indent=1))
    (out / "bench_mask.md").write_text("\n".join(lines) + "\n")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
