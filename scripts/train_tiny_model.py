"""Build the embedded default policy `model=tiny`: a ~0.8M-parameter Qwen2 trained briefly by SFT on chain_sum.

The model is meant to be *mediocre but improvable*: it learns the completion format
`<think>98+93=191 191-77=114</think><answer>114</answer>` (partial sums left to right) but gets only some
answers right, and its samples at temperature 1 are diverse (pass@16 well above pass@1). That is what GRPO
needs to show learning on a CPU in minutes: groups of rollouts with reward variance. Mediocrity comes from
stopping SFT early on a small model, never from corrupting the targets.

The tokenizer is a tiny byte-level BPE trained on the task's text, with digits always split one per token.
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
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
from transformers import AutoTokenizer, PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM
from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX as QWEN2_PRETOKENIZE_REGEX

from pods.config import DatasetConfig
from pods.data import format_prompt, load_examples

ROOT = Path(__file__).resolve().parents[1]
SPECIAL = {"pad_token": "<|pad|>", "eos_token": "<|endoftext|>", "bos_token": "<|bos|>"}
ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
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


def solution(question: str) -> str:
    """The worked target for 'State ...: 98 + 93 - 77 =' is '<think>98+93=191 191-77=114</think><answer>114</answer>'."""
    terms = question.split(":")[-1].rstrip(" =").split()  # ['98', '+', '93', '-', '77']
    acc, steps = int(terms[0]), []
    for op, x in zip(terms[1::2], terms[2::2]):
        new = acc + int(x) if op == "+" else acc - int(x)
        steps.append(f"{acc}{op}{x}={new}")
        acc = new
    return f"<think>{' '.join(steps)}</think><answer>{acc}</answer>"


def sft_targets(examples) -> list[str]:
    """Worked solutions, checked against the gold answers: a parsing slip would teach wrong sums."""
    targets = [solution(e.question) for e in examples]
    bad = [e.question for t, e in zip(targets, examples) if ANSWER.findall(t)[-1] != e.answer]
    assert not bad, f"solution() disagrees with the gold answer on {len(bad)} questions, e.g. {bad[0]!r}"
    return targets


def build_tokenizer(texts: list[str], vocab_size: int) -> PreTrainedTokenizerFast:
    """Byte-level BPE over the task text, with Qwen2's normalizer and pre-tokenizer: AutoTokenizer maps a
    qwen2 checkpoint to Qwen2Tokenizer, which rebuilds exactly these around the saved vocab and merges.
    That pre-tokenizer splits digits one per token, so numbers stay compositional; the merges mostly
    shorten the fixed English prefix of the prompt (~75 characters -> ~10 tokens)."""
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_PRETOKENIZE_REGEX), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL.values()),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),  # any text still encodes
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, padding_side="left", **SPECIAL)


def check_reload(out: Path, tok, texts: list[str]) -> None:
    """The saved tokenizer, loaded the way the trainer loads it, must encode exactly like the one we trained."""
    loaded = AutoTokenizer.from_pretrained(out)
    bad = [
        t
        for t in texts
        if loaded(t)["input_ids"] != tok(t)["input_ids"] or loaded.decode(tok(t)["input_ids"]) != t
    ]
    assert not bad, (
        f"AutoTokenizer({out}) disagrees with the trained tokenizer on {len(bad)} texts, e.g. {bad[0]!r}"
    )


def build_model(tok: PreTrainedTokenizerFast, d_model: int, layers: int) -> Qwen2ForCausalLM:
    cfg = Qwen2Config(
        vocab_size=len(tok),
        hidden_size=d_model,
        intermediate_size=3 * d_model,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        tie_word_embeddings=True,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    return Qwen2ForCausalLM(cfg)


def encode_sft(tok, prompts: list[str], targets: list[str]) -> list[tuple[list[int], int]]:
    """(token ids, prompt length) per example. Prompt and completion are tokenized apart, as at rollout time."""
    p_ids = tok(prompts, add_special_tokens=False)["input_ids"]
    c_ids = tok(targets, add_special_tokens=False)["input_ids"]
    return [(p + c + [tok.eos_token_id], len(p)) for p, c in zip(p_ids, c_ids)]


def collate(rows: list[tuple[list[int], int]], pad_id: int):
    """Left-pad to (B, T); labels are -100 on padding and prompt, so the loss is on the completion only.
    RoPE depends only on relative positions, so the left padding offset does not change the model."""
    T = max(len(ids) for ids, _ in rows)
    ids = torch.full((len(rows), T), pad_id)
    labels = torch.full((len(rows), T), -100)
    mask = torch.zeros((len(rows), T), dtype=torch.long)
    for i, (x, n_prompt) in enumerate(rows):
        ids[i, T - len(x) :] = torch.tensor(x)
        labels[i, T - len(x) + n_prompt :] = torch.tensor(x[n_prompt:])
        mask[i, T - len(x) :] = 1
    return ids, mask, labels


def sft_steps(
    model, opt, sched, rows, pad_id: int, steps: int, batch_size: int, seed: int, device: str = "cpu"
):
    """The SFT loop both model builders share: batches drawn from a seeded generator, bf16 autocast on CUDA,
    grad-norm clip 1.0. Yields (step, loss tensor) after each optimizer step."""
    gen = torch.Generator().manual_seed(seed)
    model.train()
    for step in range(steps):
        idx = torch.randint(len(rows), (batch_size,), generator=gen).tolist()
        ids, mask, labels = (t.to(device) for t in collate([rows[i] for i in idx], pad_id))
        with torch.autocast(device.split(":")[0], dtype=torch.bfloat16, enabled=device.startswith("cuda")):
            loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        yield step, loss.detach()


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
