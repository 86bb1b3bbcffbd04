"""Build the GPU headline policy: a ~10M-parameter Qwen2 warmed up by SFT on the hard chain sums.

Same recipe as the embedded tiny model (bench/sft.py; byte-level BPE with split digits,
worked solutions `<think>a+b=c c-d=e</think><answer>e</answer>`), bigger and on a GPU. SFT uses its own
problems (--sft-seed), disjoint from the RL train and eval prompts, so that RL prompts are new to the
policy; it stops early so that the policy is mediocre (greedy accuracy well below 100%) with diverse samples.

    python -m scripts.build_headline_model --out /tmp/headline_model          # ~1-2 min on an H100

The weights are rounded to --save-dtype (bfloat16: 21 MB for the 10.7M policy) before the build's own eval,
so the eval, the saved file and every run that loads it see the same numbers. `model.sha256` beside the
weights holds the safetensors file's sha256 (the shipped policy's identity, results/headline_v3/PLAN.md).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import time
from pathlib import Path

import torch
from omegaconf import OmegaConf

from pods.config import DatasetConfig
from pods.data import load_examples
from bench.sft import build_model, build_tokenizer, encode_sft, sft_steps, solution

ROOT = Path(__file__).resolve().parents[1]


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=str(ROOT / "outputs/models/headline"))
    p.add_argument("--dataset", default=str(ROOT / "conf/dataset/arithmetic_hard_local.yaml"))
    p.add_argument("--sft-data", default=str(ROOT / "data/arithmetic_hard_sft/train.jsonl"))
    p.add_argument("--steps", type=int, default=1500)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--d-model", type=int, default=384)
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--vocab-size", type=int, default=320)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--save-dtype", default="bfloat16", choices=["bfloat16", "float32"])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    return p.parse_args()


def load(path: str, **over):
    cfg = OmegaConf.merge(OmegaConf.structured(DatasetConfig), OmegaConf.load(path), over)
    return load_examples(cfg, "train")[0], load_examples(cfg, "eval")[0]


@torch.no_grad()
def accuracy(model, tok, examples, device, temperature: float, k: int = 1) -> tuple[float, float]:
    """(mean accuracy, pass@k) on the examples; temperature 0 is greedy."""
    model.eval()
    prompts = [e.question + "\n" for e in examples for _ in range(k)]
    enc = tok(prompts, return_tensors="pt", padding=True, add_special_tokens=False).to(device)
    kw = (
        dict(do_sample=True, temperature=temperature, top_k=0, top_p=1.0)
        if temperature > 0
        else {"do_sample": False}
    )
    out = model.generate(
        **enc, max_new_tokens=96, pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id, **kw
    )
    texts = tok.batch_decode(out[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)
    ok = torch.tensor(
        [
            t.rsplit("<answer>", 1)[-1].split("</answer>")[0].strip() == examples[i // k].answer
            for i, t in enumerate(texts)
        ],
        dtype=torch.float32,
    ).view(-1, k)
    model.train()
    return ok.mean().item(), ok.max(1).values.mean().item()


def main() -> None:
    a = parse_args()
    torch.manual_seed(a.seed)
    rl_train, rl_eval = load(a.dataset)
    sft_rows = [json.loads(x) for x in Path(a.sft_data).read_text().splitlines()]
    seen = {e.question for e in rl_train} | {e.question for e in rl_eval}
    sft_rows = [r for r in sft_rows if r["question"] not in seen]  # RL prompts stay new to the policy
    prompts, targets = [r["question"] + "\n" for r in sft_rows], [solution(r["question"]) for r in sft_rows]
    tok = build_tokenizer([p + t for p, t in zip(prompts, targets)], a.vocab_size)
    model = build_model(tok, a.d_model, a.layers).to(a.device)
    n_params = sum(p.numel() for p in model.parameters())
    rows = encode_sft(tok, prompts, targets)
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(0.9, 0.98), weight_decay=0.1)
    warm = max(1, a.steps // 10)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warm) * 0.5 * (1 + math.cos(math.pi * s / a.steps))
    )
    t0 = time.time()
    for step, loss in sft_steps(
        model, opt, sched, rows, tok.pad_token_id, a.steps, a.batch_size, a.seed, a.device
    ):
        if step % 250 == 0 or step == a.steps - 1:
            print(f"sft step {step:5d} loss {loss.item():.4f} ({time.time() - t0:.0f}s)", flush=True)
    sft_s = time.time() - t0
    save_dtype = getattr(torch, a.save_dtype)
    with torch.no_grad():  # the eval sees the saved (rounded) weights
        for prm in model.parameters():
            prm.copy_(prm.to(save_dtype).to(prm.dtype))
    ev = rl_eval[:300]
    greedy, _ = accuracy(model, tok, ev, a.device, 0.0)
    sample, pass16 = accuracy(model, tok, ev[:100], a.device, 1.0, k=16)
    report = {
        "params": n_params,
        "sft_rows": len(rows),
        "sft_seconds": round(sft_s, 1),
        "eval_questions": len(ev),
        "greedy_accuracy": greedy,
        "sample_accuracy@T1": sample,
        "pass@16@T1": pass16,
        "args": vars(a),
    }
    print(json.dumps(report, indent=2))
    model.generation_config.do_sample = False
    out = Path(a.out)
    model.to(save_dtype).save_pretrained(out)
    tok.save_pretrained(out)
    digest = hashlib.sha256((out / "model.safetensors").read_bytes()).hexdigest()
    (out / "model.sha256").write_text(f"{digest}  model.safetensors\n")
    report["sha256"] = digest
    (out / "sft_eval.json").write_text(json.dumps(report, indent=2) + "\n")
    print("sha256", digest)


if __name__ == "__main__":
    main()
