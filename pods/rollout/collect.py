"""Fill one step's batch of rollout groups: sample prompts -> pre-rollout filter -> generate -> reward.

With dynamic sampling (GRESO's base, DAPO's filter) zero-variance groups are dropped after reward and
more prompts are drawn until the batch holds `prompts_per_step` informative groups (or max_rounds).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from pods.batch import Rollouts
from pods.config import DynamicSamplingConfig, SamplingConfig


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

    def metrics(self, dist, n: int) -> dict[str, float]:
        """reward/*, rollout/* and prefilter/* of the step (whole batch; call on every rank)."""
        flat = lambda ts: torch.cat([t.flatten() for t in ts]) if ts else torch.zeros(0)  # noqa: E731
        rewards, correct = flat(self.all_rewards), flat(self.all_correct)
        out = {
            "reward/mean": rewards.mean().item() if rewards.numel() else float("nan"),
            "reward/std": rewards.std().item() if rewards.numel() > 1 else 0.0,
            "reward/accuracy": correct.mean().item() if correct.numel() else float("nan"),
            "reward/nonfinite": dist.sum(self.nonfinite_rewards),  # counted on each rank's shard
            "reward/timeouts": dist.sum(self.reward_timeouts),
            "reward/errors": dist.sum(self.reward_errors),
            "rollout/rounds": float(self.rounds),
            "rollout/prompts_drawn": float(self.drawn),
            "rollout/groups": float(self.generated_groups),
            "rollout/dropped_zero_var": float(self.dropped_zero_var),
            "rollout/rollouts": float(self.rollouts),
            "rollout/tokens": float(self.tokens),
            "prefilter/skipped": float(self.skipped),
            "prefilter/rollouts_avoided": float(self.skipped * n),
        }
        for k in sorted(self.terms):  # every rank has the same reward terms
            v = dist.gather(torch.tensor(self.terms[k], dtype=torch.float32))
            out[f"reward/{k}"] = v.mean().item() if v.numel() else float("nan")
        return out


def sanitize_rewards(r: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Replace NaN/inf rewards with 0 so nothing non-finite reaches advantages or the loss."""
    bad = ~torch.isfinite(r)
    return torch.where(bad, torch.zeros_like(r), r), int(bad.sum())


def useful_groups(rewards: torch.Tensor, want: int) -> list[int]:
    """Dynamic sampling: positions of the first `want` groups of (P, n) rewards that have variance.

    >>> useful_groups(torch.tensor([[1., 1.], [0., 1.], [0., 0.], [1., 0.]]), 5)
    [1, 3]
    """
    spread = rewards.max(1).values - rewards.min(1).values
    return [g for g in range(len(spread)) if spread[g] > 0][:want]


class RolloutCollector:
    """One step's groups: `prompts_per_step` prompts (algo's) with `n` rollouts each (selector.n), sampled as
    `sampling` says, refilled as `ds` (dynamic_sampling) says; `add_special_tokens`: pods.config's rule."""

    def __init__(
        self,
        ds: DynamicSamplingConfig,
        sampling: SamplingConfig,
        prompts_per_step: int,
        n: int,
        add_special_tokens: bool,
        sampler,
        prefilter,
        generator,
        reward_fn,
        prompts: list[str],
        answers: list[str],
        timer,
        dist,
    ):
        self.ds, self.sampling, self.want, self.n = ds, sampling, prompts_per_step, n
        self.add_special_tokens = add_special_tokens
        self.sampler, self.prefilter, self.dist = sampler, prefilter, dist
        self.generator, self.reward_fn, self.timer = generator, reward_fn, timer
        self.prompts, self.answers = prompts, answers
        self.zero_var_ratio = 0.0  # running estimate used to size dynamic-sampling rounds

    def state_dict(self) -> dict:
        return {"zero_var_ratio": self.zero_var_ratio}

    def load_state_dict(self, state: dict) -> None:
        self.zero_var_ratio = state["zero_var_ratio"]

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
        k, w = remaining, self.dist.world
        if self.ds.enabled:
            frac_useful = max(1.0 - self.zero_var_ratio, 0.1)
            k = max(remaining, math.ceil(remaining / frac_useful * self.ds.oversample))
        return math.ceil(k / w) * w

    def score(self, r: Rollouts, stats: CollectStats) -> None:
        """Grade every completion: the batch gets its (P, n) rewards and correctness."""
        golds = [self.answers[pid] for pid in r.prompt_ids for _ in range(r.group_size)]
        out = self.reward_fn(r.texts, golds)
        total, bad = sanitize_rewards(torch.tensor(out.total, dtype=torch.float32))
        r.rewards = total.view(r.num_groups, r.group_size)
        r.correct = torch.tensor(out.correct, dtype=torch.float32).view(r.num_groups, r.group_size)
        stats.nonfinite_rewards += bad
        stats.reward_timeouts += out.n_timeouts
        stats.reward_errors += out.n_errors
        for k, v in out.terms.items():
            stats.terms.setdefault(k, []).extend(v)

    def generate(self, pids: list[int]) -> Rollouts:
        s = self.sampling
        with self.timer.phase("generation"), self.dist.full_weights(self.generator.reads_policy):
            return self.generator.generate(
                [self.prompts[p] for p in pids],
                pids,
                self.n,
                s.temperature,
                s.top_p,
                s.top_k,
                add_special_tokens=self.add_special_tokens,
            )

    def collect(self) -> tuple[Rollouts | None, CollectStats]:
        """Returns this rank's groups (None if it has none) and the step's statistics (whole batch).

        Every rank draws the same prompts and generates for its shard; rewards are gathered, so the
        filter's memory and the dynamic-sampling decisions are identical on all ranks.
        """
        dist, want, parts, have = self.dist, self.want, [], 0
        stats = CollectStats()
        max_rounds = self.ds.max_rounds if self.ds.enabled else 1
        while have < want and stats.rounds < max_rounds:
            stats.rounds += 1
            with self.timer.phase("prefilter"):
                picked = self.draw(self.round_size(want - have), stats)
            if len(picked) < dist.world:
                break
            r = self.generate(dist.shard([p for p, _ in picked]))
            # the first collective after generation: here ranks wait for the slowest rank's generation
            with self.timer.phase("gather"):
                stats.rollouts += int(dist.sum(len(r.texts)))
                stats.tokens += int(dist.sum(int(r.completion_mask.sum())))
            with self.timer.phase("reward"):
                self.score(r, stats)
            with self.timer.phase("gather"):
                all_rewards, all_correct = dist.gather(r.rewards), dist.gather(r.correct)  # (P_round, n)
            stats.generated_groups += all_rewards.shape[0]
            stats.all_rewards.append(all_rewards)
            stats.all_correct.append(all_correct)
            with self.timer.phase("prefilter"):  # the prefilter remembers each prompt's outcome
                self.prefilter.observe(dist.unshard_order([p for p, _ in picked]), picked[0][1], all_correct)
            if self.ds.enabled:
                useful = useful_groups(all_rewards, want - have)  # positions in the gathered batch
                stats.dropped_zero_var += all_rewards.shape[0] - len(useful)
                zero_var = (all_rewards.max(1).values == all_rewards.min(1).values).float().mean().item()
                self.zero_var_ratio = 0.5 * self.zero_var_ratio + 0.5 * zero_var
                r = r.select_groups(dist.local_positions(useful, len(picked)))
                have += len(useful)
            else:
                have += all_rewards.shape[0]
            parts.append(r)
        self.prefilter.end_step(self.sampler.epoch)
        parts = [p for p in parts if p.num_groups]
        if not parts:
            return None, stats
        return Rollouts.concat(parts, self.generator.pad_id), stats


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
