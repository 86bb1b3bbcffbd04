"""One step's rollout groups, stage by stage: the rounds loop that dynamic sampling needs, at the loop's level.

Each stage is its own object, built once by the Trainer from its own config groups, and writes its own
metrics: the prefilter (pods/prefilter/registry.py), the rollout (pods/rollout/stage.py), the reward
(pods/reward/registry.py) and dynamic sampling (pods/rollout/dynamic_sampling.py). Every rank draws the same
prompts and generates for its shard; the rewards are gathered, so the filter's memory and dynamic sampling's
refill decisions are the same on every rank.
"""

from __future__ import annotations

from dataclasses import dataclass

from pods.batch import Rollouts


@dataclass
class Stages:
    prefilter: object  # PrefilterStage
    rollout: object  # RolloutStage
    reward: object  # RewardStage
    dynamic_sampling: object  # DynamicSampling

    def start_step(self) -> None:
        for stage in (self.prefilter, self.rollout, self.reward, self.dynamic_sampling):
            stage.start_step()

    def metrics(self) -> dict[str, float]:
        """The step's reward/*, dynamic_sampling/*, rollout/* and prefilter/* (gathers across ranks: call on every
        rank)."""
        stages = (self.reward, self.dynamic_sampling, self.rollout, self.prefilter)
        return {k: v for stage in stages for k, v in stage.metrics().items()}


def collect(s: Stages, want: int, dist) -> Rollouts | None:
    """This rank's groups of the step (None if it has none): rounds of draw -> roll out -> score -> observe ->
    refill until the batch holds `want` groups (one round without dynamic sampling)."""
    parts, have = [], 0
    s.start_step()
    while s.dynamic_sampling.another_round(have, want):
        size = s.dynamic_sampling.round_size(want - have)
        picked = s.prefilter.draw(size)  # (prompt id, epoch), every rank's
        if len(picked) < dist.world:
            break
        batch = s.rollout.generate(dist.shard([p for p, _ in picked]))  # this rank's share
        rewards, correct = s.reward.score(batch)  # the round's (P, n), gathered
        s.prefilter.observe(picked, correct)
        batch, kept = s.dynamic_sampling.refill(batch, rewards, want - have, len(picked))
        have += kept
        parts.append(batch)
    s.prefilter.end_step()
    parts = [p for p in parts if p.num_groups]
    return Rollouts.concat(parts, s.rollout.backend.pad_id) if parts else None
