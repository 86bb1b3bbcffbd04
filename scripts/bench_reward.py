"""The reward stage's cost per step at the headline's shape, on real completions: the shipped headline policy
(pods/assets/headline) samples n completions for each of 8 train prompts (T=0.9, as headline v3), and the
`accuracy_format` reward grades them, with each pair decided once (`Grader.score_batch`) against every
completion decided on its own (the grader's per-completion path, as before pairs were shared).

    python scripts/bench_reward.py --out results/bench_reward.md
"""

from __future__ import annotations

import argparse
import json
import random
import statistics as st
import time
from pathlib import Path

import torch
from omegaconf import OmegaConf
from transformers import AutoModelForCausalLM, AutoTokenizer

import pods
from pods.config import RewardConfig
from pods.reward import build_reward
from pods.reward.functions import format_reward

ROOT = Path(__file__).resolve().parents[1]


def sample(n: int, prompts: list[dict], seed: int) -> tuple[list[str], list[str]]:
    path = pods.ASSETS / "headline"
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    torch.manual_seed(seed)
    enc = tok(
        [p["question"] + "\n" for p in prompts], return_tensors="pt", padding=True, add_special_tokens=False
    )
    with torch.no_grad():
        out = model.generate(
            **enc, do_sample=True, temperature=0.9, top_k=0, top_p=1.0, max_new_tokens=96,
            num_return_sequences=n, pad_token_id=tok.pad_token_id,
        )  # fmt: skip
    texts = tok.batch_decode(out[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)
    return texts, [p["answer"] for p in prompts for _ in range(n)]


def timed(fn, repeats: int) -> float:
    fn()
    t = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        t.append(time.perf_counter() - t0)
    return st.median(t) * 1000


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ns", default="16,64")
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="")
    a = p.parse_args()
    rows = [json.loads(x) for x in (ROOT / "data/arithmetic/train.jsonl").read_text().splitlines()]
    prompts = random.Random(a.seed).sample(rows, 8)
    reward = build_reward(
        OmegaConf.merge(
            OmegaConf.structured(RewardConfig), {"name": "af", "weights": {"accuracy": 1.0, "format": 0.1}}
        )
    )
    grader = reward.grader
    grader.wait_ready()  # the workers start on first need: keep their start out of the timings
    lines = [
        "| n | completions | distinct (completion, answer) pairs | reward, pairs shared, ms | reward, each graded alone, ms |",
        "|---|---|---|---|---|",
    ]
    for n in map(int, a.ns.split(",")):
        texts, golds = sample(n, prompts, a.seed)
        shared = timed(lambda: reward(texts, golds), a.repeats)
        alone = timed(
            lambda: ([grader._local(c, g) for c, g in zip(texts, golds)], format_reward(texts)), a.repeats
        )
        distinct = len(set(zip(texts, golds)))
        lines.append(f"| {n} | {len(texts)} | {distinct} | {shared:.2f} | {alone:.2f} |")
        print(lines[-1], flush=True)
    reward.close()
    text = (
        "Reward stage per step (8 prompts x n, `accuracy_format`), on completions the shipped headline policy sampled "
        f"at T=0.9 (seed {a.seed}); median of {a.repeats} calls:\n\n" + "\n".join(lines) + "\n"
    )
    print(text)
    if a.out:
        Path(a.out).write_text(text)


if __name__ == "__main__":
    main()
