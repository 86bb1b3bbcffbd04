"""Periodic evaluation on the held-out split: greedy (or k samples at a temperature), graded by the reward."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from pods.config import add_special_tokens


@dataclass(frozen=True)
class EvalSettings:
    """What evaluation needs from the config (eval.*, rollout.top_p/top_k, the chat template, logging); no
    defaults here: they are the config's (pods/config.py)."""

    num_samples: int  # samples per question (1 when greedy)
    temperature: float  # 0 = greedy
    top_p: float
    top_k: int
    batch_size: int
    add_special_tokens: bool
    log_completions: int

    @classmethod
    def from_config(cls, cfg) -> EvalSettings:
        e = cfg.eval
        return cls(
            e.num_samples,
            e.temperature,
            cfg.rollout.top_p,
            cfg.rollout.top_k,
            e.batch_size,
            add_special_tokens(cfg.model),
            cfg.logger.log_completions,
        )


def evaluate(
    generator, reward_fn, prompts: list[str], answers: list[str], es: EvalSettings, dist
) -> tuple[dict[str, float], list[dict]]:
    """Accuracy = mean over questions and samples of the accuracy term; also format and lengths.

    The questions are sharded over ranks and the per-sample results gathered.
    Returns (metrics, a few sample records for the log).
    """
    k = es.num_samples if es.temperature > 0 else 1  # greedy samples would all be identical
    ids = dist.shard(list(range(len(prompts))))
    out = generator.generate(
        [prompts[i] for i in ids],
        ids,
        k,
        es.temperature,
        es.top_p,
        es.top_k,
        add_special_tokens=es.add_special_tokens,
        batch_size=es.batch_size,
    )
    golds = [answers[i] for i in ids for _ in range(k)]
    graded = reward_fn(out.texts, golds)
    terms = sorted(graded.terms)
    local = torch.stack(
        [
            torch.tensor(graded.correct, dtype=torch.float32),
            torch.tensor(graded.total, dtype=torch.float32),
            out.completion_lengths.float(),
        ]
        + [torch.tensor(graded.terms[t], dtype=torch.float32) for t in terms],
        1,
    )  # (rows, 3 + terms)
    allr = dist.gather(local)
    correct = allr[:, 0]
    per_sample = correct.view(-1, k).mean(0) if len(correct) % k == 0 else correct
    metrics = {
        "eval/accuracy": correct.mean().item(),
        "eval/accuracy_std_over_samples": per_sample.std().item() if k > 1 else 0.0,
        "eval/reward": allr[:, 1].mean().item(),
        "eval/mean_length": allr[:, 2].mean().item(),
        "eval/questions": float(len(prompts)),
        "eval/samples_per_question": float(k),
    }
    for j, name in enumerate(terms):
        metrics[f"eval/{name}"] = allr[:, 3 + j].mean().item()
    n_show = es.log_completions
    samples = [
        {
            "prompt": prompts[ids[i // k]][-200:],
            "completion": out.texts[i],
            "gold": golds[i],
            "correct": graded.correct[i],
        }
        for i in range(min(n_show, len(out.texts)))
    ]
    return metrics, samples
