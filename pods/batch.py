"""The one batch type that travels between stages: what was sampled, how, and how it scored."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


def zero_variance(rewards: torch.Tensor) -> torch.Tensor:
    """(P, k) rewards -> (P,) bool, True where every reward of the group is the same: a group that carries no
    signal (dynamic sampling drops it, its advantages are exactly 0, the selector reports its share).

    >>> zero_variance(torch.tensor([[1.0, 1.0], [0.0, 1.0]])).tolist()
    [True, False]
    """
    return rewards.amax(dim=1) == rewards.amin(dim=1)


@dataclass(frozen=True)
class Sampling:
    """How a batch was sampled. The update reads the temperature from here: the loss must score each token
    under the distribution it was drawn from."""

    temperature: float  # 0 = greedy
    top_p: float = 1.0
    top_k: int = 0  # 0 = off


@dataclass
class Rollouts:
    """Rollouts of P prompt groups of k completions each, flattened to B = P * k rows (group-major).

    Sequences are [left-padded prompt | right-padded completion], the layout generation produces, so the
    completion of every row starts at column `prompt_len`.
    """

    input_ids: torch.Tensor  # (B, Lp + Lc) prompt + completion token ids
    attention_mask: torch.Tensor  # (B, Lp + Lc) 1 on real tokens
    prompt_len: int  # Lp: width of the (left-padded) prompt block
    completion_mask: torch.Tensor  # (B, Lc) 1 on completion tokens up to and including EOS
    texts: list[str]  # (B,) decoded completions
    prompt_ids: list[int]  # (P,) dataset index of each group's prompt
    group_size: int  # k completions per prompt
    sampling: Sampling = field(default_factory=lambda: Sampling(1.0))
    rewards: torch.Tensor | None = None  # (P, k) total reward per rollout
    correct: torch.Tensor | None = None  # (P, k) 1.0 where the answer was graded right
    advantages: torch.Tensor | None = None  # (B,) per rollout, set before the update

    @property
    def num_groups(self) -> int:
        return len(self.prompt_ids)

    @property
    def completion_lengths(self) -> torch.Tensor:  # (B,)
        return self.completion_mask.sum(1)

    def select(self, keep: torch.Tensor) -> Rollouts:
        """Keep columns `keep` (P, m) of each group; trims padding columns that become empty."""
        P, k = self.num_groups, self.group_size
        m = keep.shape[1]
        rows = (torch.arange(P).unsqueeze(1) * k + keep.cpu()).reshape(-1)  # (P*m,)
        rewards = None if self.rewards is None else self.rewards.gather(1, keep.to(self.rewards.device))
        correct = None if self.correct is None else self.correct.gather(1, keep.to(self.correct.device))
        return self.take_rows(rows, m, rewards, correct, self.prompt_ids)

    def select_groups(self, groups: list[int]) -> Rollouts:
        """Keep whole groups (used by dynamic sampling to drop zero-variance groups)."""
        k = self.group_size
        rows = torch.tensor([g * k + j for g in groups for j in range(k)], dtype=torch.long)
        rewards = None if self.rewards is None else self.rewards[groups]
        correct = None if self.correct is None else self.correct[groups]
        return self.take_rows(rows, k, rewards, correct, [self.prompt_ids[g] for g in groups])

    def take_rows(
        self,
        rows: torch.Tensor,
        group_size: int,
        rewards: torch.Tensor | None,
        correct: torch.Tensor | None,
        prompt_ids: list[int],
    ) -> Rollouts:
        ids, am, cm = self.input_ids[rows], self.attention_mask[rows], self.completion_mask[rows]
        # trim prompt columns that are padding in every kept row, and completion columns past the longest
        lp_real = int(am[:, : self.prompt_len].sum(1).max().item()) if len(rows) else 0
        lc_real = int(cm.sum(1).max().item()) if len(rows) else 0
        start, stop = self.prompt_len - lp_real, self.prompt_len + lc_real
        return Rollouts(
            input_ids=ids[:, start:stop],
            attention_mask=am[:, start:stop],
            prompt_len=lp_real,
            completion_mask=cm[:, :lc_real],
            texts=[self.texts[i] for i in rows.tolist()],
            prompt_ids=list(prompt_ids),
            group_size=group_size,
            sampling=self.sampling,
            rewards=rewards,
            correct=correct,
            advantages=None if self.advantages is None else self.advantages[rows],
        )

    @staticmethod
    def concat(parts: list[Rollouts], pad_id: int) -> Rollouts:
        """Concatenate groups from several generation rounds (re-padding to a common layout)."""
        if len(parts) == 1:
            return parts[0]
        lp = max(p.prompt_len for p in parts)
        lc = max(p.completion_mask.shape[1] for p in parts)

        def pad(p: Rollouts):
            left, right = lp - p.prompt_len, lc - p.completion_mask.shape[1]
            ids = torch.nn.functional.pad(p.input_ids, (left, right), value=pad_id)
            am = torch.nn.functional.pad(p.attention_mask, (left, right), value=0)
            cm = torch.nn.functional.pad(p.completion_mask, (0, right), value=0)
            return ids, am, cm

        ids, am, cm = zip(*(pad(p) for p in parts))
        return Rollouts(
            input_ids=torch.cat(ids),
            attention_mask=torch.cat(am),
            prompt_len=lp,
            completion_mask=torch.cat(cm),
            texts=[t for p in parts for t in p.texts],
            prompt_ids=[i for p in parts for i in p.prompt_ids],
            group_size=parts[0].group_size,
            sampling=parts[0].sampling,
            rewards=None if parts[0].rewards is None else torch.cat([p.rewards for p in parts]),
            correct=None if parts[0].correct is None else torch.cat([p.correct for p in parts]),
        )
