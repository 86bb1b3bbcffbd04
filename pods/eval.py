"""Periodic evaluation on the held-out split: greedy (or k samples at a temperature), graded by the reward."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from pods.config import EvalConfig, SamplingConfig, TrainConfig, add_special_tokens
from pods.guard import sampling as sampled
from pods.reward.registry import grade


def evaluate(
    backend,
    reward_fn,
    data,
    e: EvalConfig,
    sampling: SamplingConfig,
    add_special_tokens: bool,
    dist,
    show: int = 0,
) -> tuple[dict[str, float], list[dict]]:
    """Accuracy = mean over questions and samples of the accuracy term; also format and lengths.
    `data`: the held-out prompt set (pods.data.PromptSet: `prompts`, `answers`, `fields`, which may be None).

    Samples at e.temperature (0 = greedy) with the rollouts' top_p and top_k (the sampling section). The
    questions are sharded over ranks and the per-sample results gathered.
    Each completion is graded with its prompt and its row's `fields` too, as in training.
    Returns (metrics, the first `show` sample records for the log: logger.log_completions).
    """
    k = e.num_samples if e.temperature > 0 else 1  # greedy samples would all be identical
    prompts, answers = data.prompts, data.answers
    ids = dist.shard(list(range(len(prompts))))
    with sampled("eval completions"):  # NaN logits: one line
        out = backend.generate(
            [prompts[i] for i in ids],
            ids,
            k,
            e.temperature,
            sampling.top_p,
            sampling.top_k,
            add_special_tokens=add_special_tokens,
            batch_size=None if e.batch_size == "auto" else e.batch_size,  # auto: the backend's own
        )
    golds = [answers[i] for i in ids for _ in range(k)]
    graded = grade(reward_fn, out.texts, ids, k, data, dist)  # as in training
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
    samples = [
        {
            "prompt": prompts[ids[i // k]][-200:],
            "completion": out.texts[i],
            "gold": golds[i],
            "correct": graded.correct[i],
        }
        for i in range(min(show, len(out.texts)))
    ]
    return metrics, samples


@dataclass
class Evaluator:
    """The eval stage, built once from its groups (eval, sampling, the model's prompt rule, how many samples
    the log shows) and the held-out set: `evaluator()` is evaluate() on the policy as the backend holds it now."""

    backend: Any  # the rollout backend (pods/rollout/backend.py, Generator)
    reward_fn: Any  # the Reward (pods/reward/registry.py)
    eval_set: Any  # the held-out PromptSet
    e: EvalConfig
    sampling: SamplingConfig
    add_special_tokens: bool
    dist: Any
    show: int = 0

    @classmethod
    def build(cls, c: TrainConfig, backend, reward_fn, eval_set, dist) -> Evaluator:
        return cls(
            backend,
            reward_fn,
            eval_set,
            c.eval,
            c.sampling,
            add_special_tokens(c.model),
            dist,
            c.logger.log_completions,
        )

    def __call__(self) -> tuple[dict[str, float], list[dict]]:
        s = self
        return evaluate(
            s.backend, s.reward_fn, s.eval_set, s.e, s.sampling, s.add_special_tokens, s.dist, s.show
        )
