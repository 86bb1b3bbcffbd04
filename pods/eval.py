"""Periodic evaluation on the held-out split: greedy (or k samples at a temperature), graded by the reward."""

from __future__ import annotations

import torch

from pods.config import EvalConfig, SamplingConfig
from pods.reward.stage import grade


def evaluate(
    backend,
    reward_fn,
    prompts: list[str],
    answers: list[str],
    e: EvalConfig,
    sampling: SamplingConfig,
    add_special_tokens: bool,
    dist,
    show: int = 0,
    fields: list[dict] | None = None,
) -> tuple[dict[str, float], list[dict]]:
    """Accuracy = mean over questions and samples of the accuracy term; also format and lengths.

    Samples at e.temperature (0 = greedy) with the rollouts' top_p and top_k (the sampling section). The
    questions are sharded over ranks and the per-sample results gathered.
    Each completion is graded with its prompt and its row's `fields` too, as in training.
    Returns (metrics, the first `show` sample records for the log: logger.log_completions).
    """
    k = e.num_samples if e.temperature > 0 else 1  # greedy samples would all be identical
    ids = dist.shard(list(range(len(prompts))))
    out = backend.generate(
        [prompts[i] for i in ids],
        ids,
        k,
        e.temperature,
        sampling.top_p,
        sampling.top_k,
        add_special_tokens=add_special_tokens,
        batch_size=e.batch_size,
    )
    golds = [answers[i] for i in ids for _ in range(k)]
    graded = grade(reward_fn, out.texts, ids, k, prompts, answers, fields)  # as in training
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


class Evaluator:
    """The eval stage, built once from its groups (eval, sampling) and the held-out set: `evaluator()` is
    evaluate() on the policy as the backend holds it now."""

    def __init__(self, backend, reward_fn, eval_set, e: EvalConfig, sampling: SamplingConfig,
                 add_special_tokens: bool, dist, show: int = 0):  # fmt: skip
        self.backend, self.reward_fn, self.eval_set, self.e, self.sampling = (
            backend,
            reward_fn,
            eval_set,
            e,
            sampling,
        )
        self.add_special_tokens, self.dist, self.show = add_special_tokens, dist, show

    def __call__(self) -> tuple[dict[str, float], list[dict]]:
        s = self.eval_set
        return evaluate(
            self.backend, self.reward_fn, s.prompts, s.answers, self.e, self.sampling, self.add_special_tokens,
            self.dist, self.show, s.fields,
        )  # fmt: skip
