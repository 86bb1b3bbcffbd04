"""Fill one step's batch of rollout groups: sample prompts -> pre-rollout filter -> generate -> reward.

With dynamic sampling (GRESO's base, DAPO's filter) zero-variance groups are dropped after reward and
more prompts are drawn until the batch holds `prompts_per_step` informative groups (or max_rounds).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from pods.batch import Rollouts


@dataclass
class CollectStats:
    rounds: int = 0
    drawn: int = 0  # prompts taken from the sampler
    skipped: int = 0  # prompts the pre-rollout filter skipped
    generated_groups: int = 0
    dropped_zero_var: int = 0  # groups dropped by dynamic sampling
    rollouts: int = 0
    tokens: int = 0
    nonfinite_rewards: int = 0
    reward_timeouts: int = 0
    reward_errors: int = 0
    all_rewards: list[torch.Tensor] = field(default_factory=list)  # (P_round, n) of every generated group
    all_correct: list[torch.Tensor] = field(default_factory=list)
    terms: dict[str, list[float]] = field(default_factory=dict)


def sanitize_rewards(r: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Replace NaN/inf rewards with 0 so nothing non-finite reaches advantages or the loss."""
    bad = ~torch.isfinite(r)
    return torch.where(bad, torch.zeros_like(r), r), int(bad.sum())


class RolloutCollector:
    def __init__(
        self,
        cfg,
        sampler,
        prefilter,
        generator,
        reward_fn,
        prompts: list[str],
        answers: list[str],
        timer,
        dist,
    ):
        self.cfg, self.sampler, self.prefilter, self.dist = cfg, sampler, prefilter, dist
        self.generator, self.reward_fn, self.timer = generator, reward_fn, timer
        self.prompts, self.answers = prompts, answers
        self.zero_var_ratio = 0.0  # running estimate used to size dynamic-sampling rounds

    def draw(self, k: int, stats: CollectStats) -> list[tuple[int, int]]:
        """Take prompts from the sampler until k pass the pre-rollout filter (bounded number of draws)."""
        kept: list[tuple[int, int]] = []
        budget = 20 * k + len(self.prompts)
        while len(kept) < k and stats.drawn < budget:
            batch = self.sampler.next(k - len(kept))
            stats.drawn += len(batch)
            for (pid, ep), ok in zip(batch, self.prefilter.keep([p for p, _ in batch], batch[0][1])):
                if ok:
                    kept.append((pid, ep))
                else:
                    stats.skipped += 1
        return kept

    def round_size(self, remaining: int) -> int:
        """Prompts to draw this round: with dynamic sampling, enough to expect `remaining` useful groups
        (remaining / (1 - zero-variance ratio) x oversample); a multiple of the number of ranks."""
        s, w = self.cfg.selector, self.dist.world
        k = remaining
        if s.dynamic_sampling:
            frac_useful = max(1.0 - self.zero_var_ratio, 0.1)
            k = max(remaining, math.ceil(remaining / frac_useful * s.greso.oversample))
        return math.ceil(k / w) * w

    def score(self, r: Rollouts, stats: CollectStats) -> None:
        golds = [self.answers[pid] for pid in r.prompt_ids for _ in range(r.group_size)]
        out = self.reward_fn(r.texts, golds)
        total, bad = sanitize_rewards(torch.tensor(out.total, dtype=torch.float32))
        r.rewards = total.view(r.num_groups, r.group_size)
        r.extras["correct"] = torch.tensor(out.correct, dtype=torch.float32).view(r.num_groups, r.group_size)
        stats.nonfinite_rewards += bad
        stats.reward_timeouts += out.n_timeouts
        stats.reward_errors += out.n_errors
        for k, v in out.terms.items():
            stats.terms.setdefault(k, []).extend(v)

    def collect(self) -> tuple[Rollouts | None, CollectStats]:
        """Returns this rank's groups (None if it has none) and the step's statistics (whole batch).

        Every rank draws the same prompts and generates for its shard; rewards are gathered, so the
        filter's memory and the dynamic-sampling decisions are identical on all ranks.
        """
        cfg, s, dist = self.cfg, self.cfg.selector, self.dist
        want, parts, have = cfg.algo.prompts_per_step, [], 0
        stats = CollectStats()
        max_rounds = s.greso.max_rounds if s.dynamic_sampling else 1
        while have < want and stats.rounds < max_rounds:
            stats.rounds += 1
            with self.timer.phase("filter"):
                picked = self.draw(self.round_size(want - have), stats)
            if len(picked) < dist.world:
                break
            pids = dist.shard([p for p, _ in picked])
            with self.timer.phase("generation"), dist.full_weights(self.generator.reads_policy):
                r = self.generator.generate(
                    [self.prompts[p] for p in pids],
                    pids,
                    s.n,
                    cfg.rollout.temperature,
                    cfg.rollout.top_p,
                    cfg.rollout.top_k,
                    add_special_tokens=not cfg.model.use_chat_template,
                )
            stats.rollouts += int(dist.sum(len(r.texts)))
            stats.tokens += int(dist.sum(int(r.completion_mask.sum())))
            with self.timer.phase("reward"):
                self.score(r, stats)
            all_rewards, all_correct = (
                dist.gather(r.rewards),
                dist.gather(r.extras["correct"]),
            )  # (P_round, n)
            stats.generated_groups += all_rewards.shape[0]
            stats.all_rewards.append(all_rewards)
            stats.all_correct.append(all_correct)
            self.prefilter.observe(dist.unshard_order([p for p, _ in picked]), picked[0][1], all_correct)
            if s.dynamic_sampling:
                spread = all_rewards.max(1).values - all_rewards.min(1).values
                useful = [g for g in range(len(spread)) if spread[g] > 0][: want - have]  # global positions
                stats.dropped_zero_var += len(spread) - len(useful)
                self.zero_var_ratio = 0.5 * self.zero_var_ratio + 0.5 * (
                    1 - (spread > 0).float().mean().item()
                )
                offset = sum(len(picked[q :: dist.world]) for q in range(dist.rank))
                r = r.select_groups([g - offset for g in useful if offset <= g < offset + r.num_groups])
                have += len(useful)
            else:
                have += all_rewards.shape[0]
            parts.append(r)
        self.prefilter.end_step(self.sampler.epoch)
        parts = [p for p in parts if p.num_groups]
        if not parts:
            return None, stats
        return Rollouts.concat(parts, self.generator.pad_id), stats
