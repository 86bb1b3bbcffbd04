"""Milliseconds of one policy update (log-probs, loss, backward, AdamW step) on the 10.7M headline shape.

A random Qwen2 of the headline policy's shape (d_model 384, 6 layers, 320-token vocabulary, as built by
scripts/build_headline_model.py), float32 master weights with bf16 autocast, the update of pods'
hardware=gpu profile, on a synthetic batch: --rows rows of a --prompt-len prompt and a --completion-len
completion (the chain-sum task's sizes), advantages +-1. Two settings: the profile today (micro-batches
by tokens, no gradient checkpointing) and the one before (8 rows per micro-batch, checkpointing on).

    PYTHONPATH=. python scripts/bench_update.py --out results/bench_update
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

from bench.harness import save_results, sync
from pods.batch import Rollouts
from pods.config import schema
from pods.distributed import Dist
from pods.models import autocast, resolve_dtype
from pods.update.optim import build_optimizer
from pods.update.step import policy_update


def synthetic_batch(rows: int, lp: int, lc: int, vocab: int) -> Rollouts:
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, vocab, (rows, lp + lc), generator=g)
    clen = torch.randint(lc // 2, lc + 1, (rows,), generator=g)
    cmask = (torch.arange(lc)[None] < clen[:, None]).long()
    am = torch.cat([torch.ones(rows, lp, dtype=torch.long), cmask], 1)
    adv = torch.where(torch.rand(rows, generator=g) < 0.5, -1.0, 1.0)
    return Rollouts(ids, am, lp, cmask, [""] * rows, list(range(rows // 16)), 16, advantages=adv)


def time_update(cfg, batch: Rollouts, repeats: int, device: torch.device) -> dict:
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(
        Qwen2Config(
            vocab_size=320,
            hidden_size=384,
            intermediate_size=1152,
            num_hidden_layers=6,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=256,
            tie_word_embeddings=True,
        )
    ).to(device)
    if cfg["update"].gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    opt, sched = build_optimizer(model, cfg.optim, cfg.max_steps * cfg.algo.mu, device)
    dist, dtype = Dist(cfg.hardware, device), resolve_dtype(cfg.model, cfg.hardware, device)
    times = []
    for i in range(repeats + 3):  # 3 warm-ups
        sync(device.type)
        t0 = time.perf_counter()
        with autocast(dtype, device):
            stats = policy_update(model, batch, opt, sched, cfg.algo, cfg["update"], cfg.optim, device, dist)
        sync(device.type)
        if i >= 3:
            times.append((time.perf_counter() - t0) * 1e3)
    return {
        "median_ms": statistics.median(times),
        "min_ms": min(times),
        "max_ms": max(times),
        "params": sum(p.numel() for p in model.parameters()),
        "rows": stats["update/rows"],
        "tokens": stats["update/tokens"],
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rows", type=int, default=128)
    p.add_argument("--prompt-len", type=int, default=32)
    p.add_argument("--completion-len", type=int, default=24)
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--device", default="cuda")
    p.add_argument("--out", default="results/bench_update")
    args = p.parse_args()
    gpu_profile = OmegaConf.load(
        Path(__file__).resolve().parents[1] / "conf/hardware/gpu.yaml"
    )  # hardware, update
    base = OmegaConf.merge(
        schema(), gpu_profile, {"model": {"name": "bench", "path": "-"}, "optim": {"lr": 1e-5}}
    )
    batch = synthetic_batch(args.rows, args.prompt_len, args.completion_len, 320)
    settings = {
        "tokens (hardware=gpu today)": {},
        "8 rows + checkpointing (before)": {
            "micro_batch_size": 8,
            "micro_batch_tokens": 0,
            "gradient_checkpointing": True,
        },
    }
    device = torch.device(args.device)
    name = torch.cuda.get_device_name() if device.type == "cuda" else "cpu"
    res = {"device": name, "torch": torch.__version__, "args": vars(args), "runs": {}}
    for name, layout in settings.items():
        cfg = OmegaConf.merge(base, {"update": layout})
        res["runs"][name] = time_update(cfg, batch, args.repeats, device)
        print(name, json.dumps(res["runs"][name]), flush=True)
    lines = [
        f"# One policy update, 10.7M headline shape ({res['device']}, torch {res['torch']})",
        "",
        f"{args.rows} rows, prompt {args.prompt_len} + completion <= {args.completion_len} tokens, "
        f"median of {args.repeats} updates after 3 warm-ups (log-probs, loss, backward, clip, AdamW).",
        "",
        "| setting | median ms | min ms | max ms |",
        "|---|---|---|---|",
    ]
    for name, r in res["runs"].items():
        lines.append(f"| {name} | {r['median_ms']:.1f} | {r['min_ms']:.1f} | {r['max_ms']:.1f} |")
    save_results(Path(args.out), res, "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
