"""Build the embedded default policy `model=tiny`: a ~0.8M-parameter Qwen2 trained briefly by SFT on chain_sum.

The model is meant to be *mediocre but improvable*: it learns the completion format
`<think>98+93=191 191-77=114</think><answer>114</answer>` (partial sums left to right) but gets only some
answers right, and its samples at temperature 1 are diverse (pass@16 well above pass@1). That is what GRPO
needs to show learning on a CPU in minutes: groups of rollouts with reward variance. Mediocrity comes from
stopping SFT early on a small model, never from corrupting the targets.

The tokenizer is a tiny byte-level BPE trained on the task's text, with digits always split one per token.
The tokenizer, model and SFT loop live in bench/sft.py (shared with scripts/build_headline_model.py).
Everything is seeded, so re-running gives the same weights up to float noise (~3.5 minutes on 2 CPU cores):

    python -m scripts.train_tiny_model            # from the repo root; writes pods/assets/tiny/ (3.3 MB)
"""

from __future__ import annotations

import argparse
import json
import re
import time
from pathlib import Path

import torch
from omegaconf import OmegaConf

from pods.config import DatasetConfig
from pods.data import format_prompt, load_examples
from bench.sft import ANSWER, build_model, build_tokenizer, check_reload, encode_sft, sft_steps, sft_targets

ROOT = Path(__file__).resolve().parents[1]
FORMAT = re.compile(r"^\s*<think>.*?</think>\s*<answer>.*?</answer>\s*$", re.DOTALL)


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="pods/assets/tiny", help="relative paths are from the repo root")
    p.add_argument("--dataset", default="conf/dataset/arithmetic.yaml")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--steps", type=int, default=1000, help="SFT steps: the knob for how good the policy is")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--d-model", type=int, default=128)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--vocab-size", type=int, default=320, help="at most 256 bytes + 3 specials + merges")
    p.add_argument("--k", type=int, default=16, help="samples per eval prompt for pass@k")
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--max-new-tokens", type=int, default=48)
    return p.parse_args()


def load_data(path: str):
    """Train/eval examples exactly as the trainer loads them (eval made disjoint from train)."""
    cfg = OmegaConf.merge(OmegaConf.structured(DatasetConfig), OmegaConf.load(ROOT / path))
    train, _ = load_examples(cfg, "train")
    evals, _ = load_examples(cfg, "eval", exclude={e.question for e in train})
    prompts = lambda xs: [format_prompt(e, cfg.template, None, None, use_chat=False) for e in xs]  # noqa: E731
    return (prompts(train), train), (prompts(evals), evals)


def sft(model, rows, pad_id: int, args) -> list[float]:
    """AdamW at a constant lr after a short warm-up, batches from a seeded generator. With no decay,
    --steps is a pure early-stopping knob: the model after N steps is step N of any longer run."""
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.98), weight_decay=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 50))
    losses = []
    for step, loss in sft_steps(model, opt, sched, rows, pad_id, args.steps, args.batch_size, args.seed):
        losses.append(loss.item())
        if step % 100 == 0 or step == args.steps - 1:
            print(f"sft step {step:4d} | loss {loss.item():.4f} | lr {sched.get_last_lr()[0]:.2e}")
    return losses


def score(completion: str, gold: str) -> tuple[float, float]:
    """(accuracy, format): the last <answer> equals the gold number; the whole text is think-then-answer."""
    found = ANSWER.findall(completion)
    try:
        acc = float(bool(found) and float(found[-1].strip()) == float(gold))
    except ValueError:
        acc = 0.0
    return acc, float(bool(FORMAT.match(completion)))


@torch.no_grad()
def generate(model, tok, prompts: list[str], temperature: float, max_new: int, chunk: int = 512) -> list[str]:
    """Completions (special tokens dropped), one per prompt; temperature 0 is greedy."""
    model.eval()
    out = []
    for i in range(0, len(prompts), chunk):
        enc = tok(prompts[i : i + chunk], return_tensors="pt", padding=True, add_special_tokens=False)
        sample = (
            dict(do_sample=True, temperature=temperature, top_k=0, top_p=1.0)
            if temperature > 0
            else {"do_sample": False}
        )
        seqs = model.generate(**enc, max_new_tokens=max_new, **sample,
                              pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)  # fmt: skip
        out += tok.batch_decode(seqs[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)
    return out


def evaluate(model, tok, prompts: list[str], examples, args) -> dict:
    """Greedy accuracy and format rate, plus mean accuracy and pass@k of k samples at args.temperature."""
    texts = generate(model, tok, prompts, 0.0, args.max_new_tokens)
    greedy = [score(c, e.answer) for c, e in zip(texts, examples)]
    torch.manual_seed(args.seed)  # samples reproducible whatever used the global RNG before
    k = args.k
    samples = generate(
        model, tok, [p for p in prompts for _ in range(k)], args.temperature, args.max_new_tokens
    )
    acc = torch.tensor([score(c, examples[i // k].answer)[0] for i, c in enumerate(samples)]).view(
        -1, k
    )  # (P, k)
    return {
        "eval_prompts": len(prompts),
        "greedy_accuracy": sum(a for a, _ in greedy) / len(greedy),
        "greedy_format": sum(f for _, f in greedy) / len(greedy),
        f"sample_accuracy@T{args.temperature}": acc.mean().item(),
        f"pass@{args.k}@T{args.temperature}": acc.max(dim=1).values.mean().item(),
        "frac_prompts_with_reward_variance": ((acc.sum(1) > 0) & (acc.sum(1) < args.k)).float().mean().item(),
        "example_greedy": texts[0],
    }


def main() -> None:
    args = parse_args()
    torch.manual_seed(args.seed)
    (train_prompts, train), (eval_prompts, evals) = load_data(args.dataset)
    targets = sft_targets(train)
    tok = build_tokenizer([p + t for p, t in zip(train_prompts, targets)], args.vocab_size)
    model = build_model(tok, args.d_model, args.layers)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"vocab {len(tok)} | params {n_params / 1e6:.3f}M | train {len(train)} | eval {len(evals)}")

    t0 = time.time()
    losses = sft(model, encode_sft(tok, train_prompts, targets), tok.pad_token_id, args)
    sft_s = time.time() - t0
    t0 = time.time()
    metrics = evaluate(model, tok, eval_prompts, evals, args)
    metrics.update(params=n_params, sft_seconds=round(sft_s, 1), eval_seconds=round(time.time() - t0, 1),
                   final_sft_loss=sum(losses[-20:]) / len(losses[-20:]), args=vars(args))  # fmt: skip
    print(json.dumps(metrics, indent=2))
    print(f"final SFT loss {metrics['final_sft_loss']:.4f} | greedy accuracy {metrics['greedy_accuracy']:.3f} | "
          f"pass@{args.k} at T={args.temperature} {metrics[f'pass@{args.k}@T{args.temperature}']:.3f}")  # fmt: skip

    out = ROOT / args.out
    model.generation_config.do_sample = False  # no sampling defaults baked into the checkpoint
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    check_reload(out, tok, train_prompts[:500] + targets[:500] + eval_prompts)
    (out / "sft_eval.json").write_text(json.dumps(metrics, indent=2) + "\n")
    print(f"saved to {out}")


if __name__ == "__main__":
    main()
