"""The reward stage of the loop: grade a round's rollouts, gather the (P, n) rewards and correctness.

`score(batch)` grades every completion with the prompt it answered, its gold answer and its dataset row's
fields (pods/reward/registry.py says what a reward function receives), sets `batch.rewards` and
`batch.correct` for this rank's groups and returns the round's whole-batch rewards and correctness (every
rank's, gathered: the prefilter and dynamic sampling decide alike on every rank). `metrics()` is the step's
reward/*.
"""

from __future__ import annotations

import torch

from pods.batch import Rollouts


def sanitize_rewards(r: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Replace NaN/inf rewards with 0 so nothing non-finite reaches advantages or the loss."""
    bad = ~torch.isfinite(r)
    return torch.where(bad, torch.zeros_like(r), r), int(bad.sum())


def grade(reward, texts: list[str], prompt_ids: list[int], group_size: int, data):
    """The one place a reward's inputs are put together, for training and eval alike: `texts`, group_size
    completions of each of `prompt_ids` (group-major), graded against their gold answers, with their prompts
    and their dataset rows' fields (`data`: the prompt set, pods.data.PromptSet: its `prompts`, `answers` and
    `fields`, by prompt id; fields may be None)."""
    per = lambda xs: [xs[p] for p in prompt_ids for _ in range(group_size)]  # noqa: E731 - one per completion
    rows = per(data.fields) if data.fields is not None else None
    return reward(texts, per(data.answers), prompts=per(data.prompts), rows=rows)


class RewardStage:
    """`reward`: the Reward (weighted terms); `prompts`, `answers`, `fields`: the train set's, indexed by
    prompt id (fields: each row's own columns, a dict per row)."""

    def __init__(
        self, reward, prompts: list[str], answers: list[str], fields: list[dict] | None, dist, timer
    ):
        self.reward, self.prompts, self.answers, self.fields = reward, prompts, answers, fields
        self.dist, self.timer = dist, timer
        self.start_step()

    def start_step(self) -> None:
        self.rewards: list[torch.Tensor] = []  # (P_round, n) of every group graded this step, all ranks
        self.correct: list[torch.Tensor] = []
        self.terms: dict[str, list[float]] = {}  # this rank's unweighted values per term
        self.nonfinite = self.timeouts = self.errors = 0

    def score(self, r: Rollouts) -> tuple[torch.Tensor, torch.Tensor]:
        """Grade `r` (this rank's groups): sets r.rewards and r.correct; returns the gathered (P_round, n)
        rewards and correctness of the whole round."""
        with self.timer.phase("reward"):
            out = grade(self.reward, r.texts, r.prompt_ids, r.group_size, self)  # self: the train set's
            total, bad = sanitize_rewards(torch.tensor(out.total, dtype=torch.float32))
            r.rewards = total.view(r.num_groups, r.group_size)
            r.correct = torch.tensor(out.correct, dtype=torch.float32).view(r.num_groups, r.group_size)
            self.nonfinite += bad
            self.timeouts += out.n_timeouts
            self.errors += out.n_errors
            for k, v in out.terms.items():
                self.terms.setdefault(k, []).extend(v)
        with self.timer.phase("gather"):
            rewards, correct = self.dist.gather(r.rewards), self.dist.gather(r.correct)
        self.rewards.append(rewards)
        self.correct.append(correct)
        return rewards, correct

    def step_rewards(self) -> torch.Tensor:
        """(P, n) rewards of every group graded this step (all ranks, all rounds; empty when none was)."""
        return torch.cat(self.rewards) if self.rewards else torch.zeros(0)

    def metrics(self) -> dict[str, float]:
        """reward/* of the step (whole batch; call on every rank)."""
        dist = self.dist
        flat = lambda ts: torch.cat([t.flatten() for t in ts]) if ts else torch.zeros(0)  # noqa: E731
        rewards, correct = flat(self.rewards), flat(self.correct)
        out = {
            "reward/mean": rewards.mean().item() if rewards.numel() else float("nan"),
            "reward/std": rewards.std().item() if rewards.numel() > 1 else 0.0,
            "reward/accuracy": correct.mean().item() if correct.numel() else float("nan"),
            "reward/nonfinite": dist.sum(self.nonfinite),  # counted on each rank's shard
            "reward/timeouts": dist.sum(self.timeouts),
            "reward/errors": dist.sum(self.errors),
        }
        for k in sorted(self.terms):  # every rank has the same reward terms
            v = dist.gather(torch.tensor(self.terms[k], dtype=torch.float32))
            out[f"reward/{k}"] = v.mean().item() if v.numel() else float("nan")
        return out
