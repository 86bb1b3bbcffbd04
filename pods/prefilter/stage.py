"""The pre-rollout filter as a stage of the loop: draw prompts through the filter, tell it how they went.

The loop (pods/collect.py) calls `draw(k)` at the start of each round, `observe(picked, correct)` once the
round is graded and `end_step()` at the end of the step; `metrics()` is the step's prefilter/* (and the
prompts drawn, `rollout/prompts_drawn`, which only this stage sees). The same calls on every rank.
"""

from __future__ import annotations

import torch

from pods.prefilter.registry import Prefilter


class PrefilterStage:
    """`prefilter` (a registered Prefilter) between the prompt `sampler` and the rollout; `n` rollouts per
    prompt (selector.n: what a skip saves); `pool`: the number of prompts (bounds a step's draws)."""

    def __init__(self, prefilter: Prefilter, sampler, n: int, pool: int, dist, timer):
        self.prefilter, self.sampler, self.n, self.pool = prefilter, sampler, n, pool
        self.dist, self.timer = dist, timer
        self.drawn = self.skipped = 0

    def start_step(self) -> None:
        self.drawn = self.skipped = 0

    def draw(self, k: int) -> list[tuple[int, int]]:
        """(prompt id, epoch) of k prompts the filter keeps, taken from the sampler (fewer when a step's draws
        reach 20 k + the pool: a filter that skips almost everything cannot stall the step)."""
        kept: list[tuple[int, int]] = []
        budget = 20 * k + self.pool
        with self.timer.phase("prefilter"):
            while len(kept) < k and self.drawn < budget:
                batch = self.sampler.next(k - len(kept))
                self.drawn += len(batch)
                for (pid, ep), ok in zip(batch, self.prefilter.keep([p for p, _ in batch], batch[0][1])):
                    if ok:
                        kept.append((pid, ep))
                    else:
                        self.skipped += 1
        return kept

    def observe(self, picked: list[tuple[int, int]], correct: torch.Tensor) -> None:
        """The filter remembers each prompt's outcome: `correct` (P, n), gathered from every rank (in the
        order of dist.unshard_order), for the prompts `picked` in this round."""
        with self.timer.phase("prefilter"):
            self.prefilter.observe(self.dist.unshard_order([p for p, _ in picked]), picked[0][1], correct)

    def end_step(self) -> None:
        self.prefilter.end_step(self.sampler.epoch)

    def metrics(self) -> dict[str, float]:
        return {
            "rollout/prompts_drawn": float(self.drawn),
            "prefilter/skipped": float(self.skipped),
            "prefilter/rollouts_avoided": float(self.skipped * self.n),
            **self.prefilter.metrics(),
        }
