"""The rollout stage of the loop: n completions for each prompt a round drew, from the rollout backend.

`generate(prompt_ids)` samples as the `sampling` section says, with the policy's full weights at hand (FSDP
gathers them for the block), and counts the round's rollouts and tokens over every rank; `metrics()` is the
step's rollout/rollouts and rollout/tokens. `completion_metrics` is completions/* and train/* of the batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from pods.batch import Rollouts
from pods.config import SamplingConfig, TrainConfig, add_special_tokens
from pods.guard import sampling


@dataclass
class RolloutStage:
    backend: Any  # the rollout backend (pods/rollout/backend.py, Generator)
    sampling: SamplingConfig
    n: int  # rollouts per prompt (selector.n)
    add_special_tokens: bool  # pods.config's rule for the model's prompts
    prompts: list[str]  # the train set's, by prompt id
    dist: Any
    timer: Any

    def __post_init__(self) -> None:
        self.start_step()

    @classmethod
    def build(cls, c: TrainConfig, backend, prompts: list[str], dist, timer) -> RolloutStage:
        """From its groups: sampling, selector.n and the model's prompt rule."""
        return cls(backend, c.sampling, c.selector.n, add_special_tokens(c.model), prompts, dist, timer)

    def start_step(self) -> None:
        self.rollouts = self.tokens = 0

    def generate(self, prompt_ids: list[int]) -> Rollouts:
        """This rank's groups for `prompt_ids` (its shard of the round's prompts)."""
        s, dist = self.sampling, self.dist
        weights = dist.full_weights(self.backend.reads_policy)
        with self.timer.phase("generation"), weights, sampling("rollouts"):  # NaN logits: one line
            r = self.backend.generate(
                [self.prompts[p] for p in prompt_ids],
                prompt_ids,
                self.n,
                s.temperature,
                s.top_p,
                s.top_k,
                add_special_tokens=self.add_special_tokens,
            )
        # the first collective after generation: here ranks wait for the slowest rank's generation
        with self.timer.phase("gather"):
            self.rollouts += int(dist.sum(len(r.texts)))
            self.tokens += int(dist.sum(int(r.completion_mask.sum())))
        return r

    def metrics(self) -> dict[str, float]:
        return {"rollout/rollouts": float(self.rollouts), "rollout/tokens": float(self.tokens)}


def completion_metrics(batch: Rollouts | None, kept: Rollouts | None, dist, n: int, max_len: int) -> dict:
    """completions/* and train/* over the whole batch (gathered from every rank; call on all ranks)."""
    none = torch.zeros(0)
    lengths = dist.gather(batch.completion_lengths.float() if batch is not None else none)
    kept_len = dist.gather(kept.completion_lengths.float() if kept is not None else none)
    if not lengths.numel():
        return {}
    return {
        "completions/mean_length": lengths.mean().item(),
        "completions/max_length": lengths.max().item(),
        "completions/min_length": lengths.min().item(),
        "completions/clipped_frac": (lengths >= max_len).float().mean().item(),
        "completions/kept_mean_length": kept_len.mean().item() if kept_len.numel() else 0.0,
        "train/groups": float(lengths.numel() // n),
        "train/rollouts_trained": float(kept_len.numel()),
    }
