"""Where one rollout's generation time goes: the parts of an hf generate() call around the per-token graph
replays (issue 18).

A random Qwen2 of the given shape (no hub), as pods.train decodes it on a GPU: bf16, the graph loop with
rollout.hf.release_cache (the cache and graphs freed after each call, as during training), the paper's 512-token
prompt limit (so a 1024-position static cache unless --size-cache-to-prompt), 1 prompt x batch rows at
temperature 0.9 and --new-tokens tokens. With --lora: peft LoRA r=64 on all linear layers and
rollout.hf.share_weights (the adapters merged into the policy's own base around each call); else a generation
copy of its own (fused projections). Before each timed call the weights are re-synced, as after an update.

Per call, with the device synchronised at each boundary (not between replays): sync (weight sync), merge
(LoRA into the base), reclaim (the released cache's memory), prefill, eager (the two steps before a
capture), capture, replay (every replayed token, host syncs every 16 included), restore (the base back from
the host copy), rest (tokenizing, the completion mask, decoding text). Then ms per replayed token.

    PYTHONPATH=. python scripts/decode_phases.py --batches 16,64 --out results/decode_phases      # 0.5B
    PYTHONPATH=. python scripts/decode_phases.py --lora --layers 36 --hidden 2048 --heads 16 --kv-heads 2 \\
        --intermediate 11008 --out results/decode_phases_3b
    PYTHONPATH=. python scripts/decode_phases.py --device cpu --layers 2 --hidden 64 --vocab 512 \
        --new-tokens 8 --batches 2 --calls 1 --lora --out /tmp/phases                # CPU smoke test
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from bench.harness import add_model_args, build_model_dir, save_results, sync
from pods.rollout.hf import HFGenerator

PARTS = ["sync", "merge", "reclaim", "prefill", "eager", "capture", "replay", "restore", "rest"]
PROMPT = "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. " * 2


def timed(method, store: dict, part: str, device: str):
    """method wrapped to add its seconds (device synchronised before and after) to store[part]."""

    def wrapper(*a, **kw):
        sync(device)
        t0 = time.perf_counter()
        out = method(*a, **kw)
        sync(device)
        store[part] = store.get(part, 0.0) + time.perf_counter() - t0
        return out

    return wrapper


def run_batch(model, tok, args, batch: int) -> dict:
    gen = HFGenerator(
        model, tok, args.device, batch, args.new_tokens, compiled=True, dtype=torch.bfloat16, max_prompt_len=512,
        share_weights=True, release_cache=True, size_cache_to_prompt=args.size_cache_to_prompt,
    )  # fmt: skip
    store: dict[str, float] = {}
    copy = gen.copy
    copy.merge = timed(copy.merge, store, "merge", args.device)
    copy.restore = timed(copy.restore, store, "restore", args.device)
    calls = []
    for i in range(args.calls + 1):  # the first compiles and captures: not counted
        store.clear()
        for dec in gen.step_decoders.values():
            dec.phase_seconds = {}
        sync(args.device)
        t0 = time.perf_counter()
        timed(gen.sync_weights, store, "sync", args.device)(model)
        gen.generate([PROMPT], [0], batch, 0.9)
        sync(args.device)
        total = time.perf_counter() - t0
        for dec in gen.step_decoders.values():
            for k, v in (dec.phase_seconds or {}).items():
                store[k] = store.get(k, 0.0) + v
        store["rest"] = total - sum(store.get(p, 0.0) for p in PARTS if p != "rest")
        if i:
            calls.append({"total": total, **store})
    mean = {k: sum(c.get(k, 0.0) for c in calls) / len(calls) for k in ["total", "steps", *PARTS]}
    mean["ms_per_replayed_token"] = 1e3 * mean["replay"] / max(mean["steps"] - 3, 1)
    return {"batch": batch, "fused_groups": copy.fused_groups, "share": copy.share, **mean}


def markdown(res: dict) -> str:
    head = ["batch", "total s", *[f"{p} s" for p in PARTS], "tokens", "ms/replayed token"]
    lines = [
        f"# One generate() call by part ({res['device']}, {res['shape']})",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    for r in res["rows"]:
        cells = [str(r["batch"]), f"{r['total']:.3f}", *[f"{r.get(p, 0.0):.3f}" for p in PARTS]]
        cells += [f"{r['steps']:.0f}", f"{r['ms_per_replayed_token']:.2f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_model_args(p)
    p.add_argument("--batches", default="16,64")
    p.add_argument("--new-tokens", type=int, default=512)
    p.add_argument("--calls", type=int, default=3)
    p.add_argument("--size-cache-to-prompt", action="store_true")
    p.add_argument("--out", default="results/decode_phases")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = build_model_dir(args, Path(tmp))
        tok = AutoTokenizer.from_pretrained(path)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16).to(args.device)
    if args.lora:
        from peft import LoraConfig, get_peft_model

        targets = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
        model = get_peft_model(model, LoraConfig(r=64, lora_alpha=64, target_modules=targets))
    shape = f"{args.layers} layers x {args.hidden}, {'LoRA r=64, shared base' if args.lora else 'own copy'}"
    name = torch.cuda.get_device_name() if args.device == "cuda" else "CPU"
    res = {"device": name, "shape": shape, "args": vars(args), "rows": []}
    for batch in [int(b) for b in args.batches.split(",")]:
        res["rows"].append(run_batch(model, tok, args, batch))
        print(res["rows"][-1], flush=True)
        save_results(Path(args.out), res, markdown(res))
    print(markdown(res))


if __name__ == "__main__":
    main()
