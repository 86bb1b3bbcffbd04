"""Small chain-sum policies from scratch: the recipe behind the embedded `model=tiny`
(scripts/train_tiny_model.py) and the GPU headline model (scripts/build_headline_model.py).

Worked solutions `<think>98+93=191 191-77=114</think><answer>114</answer>` (partial sums left to right),
a byte-level BPE tokenizer with digits split one per token, a small Qwen2, and the seeded SFT loop.
"""

from __future__ import annotations

import re
from pathlib import Path

import torch
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
from transformers import AutoTokenizer, PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM
from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX as QWEN2_PRETOKENIZE_REGEX

SPECIAL = {"pad_token": "<|pad|>", "eos_token": "<|endoftext|>", "bos_token": "<|bos|>"}
ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


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
