"""Seeded prompt sampler: epochs of shuffled prompt indices; its state is two integers, so resume is exact."""

from __future__ import annotations

import numpy as np


class PromptSampler:
    """Draw prompt indices without replacement within an epoch, reshuffling each epoch.

    The permutation of epoch e depends only on (seed, e), so the state is just (epoch, position).
    """

    def __init__(self, num_prompts: int, seed: int):
        self.num_prompts, self.seed = num_prompts, seed
        self.epoch, self.pos = 0, 0
        self._perm = self._permutation(0)

    def _permutation(self, epoch: int) -> np.ndarray:
        return np.random.default_rng([self.seed, epoch]).permutation(self.num_prompts)

    def next(self, k: int) -> list[tuple[int, int]]:
        """Return k (prompt index, epoch) pairs."""
        out = []
        for _ in range(k):
            if self.pos == self.num_prompts:
                self.epoch, self.pos = self.epoch + 1, 0
                self._perm = self._permutation(self.epoch)
            out.append((int(self._perm[self.pos]), self.epoch))
            self.pos += 1
        return out

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "pos": self.pos, "num_prompts": self.num_prompts, "seed": self.seed}

    def load_state_dict(self, state: dict) -> None:
        if state["num_prompts"] != self.num_prompts:
            raise ValueError(
                f"checkpoint sampler has {state['num_prompts']} prompts, this run {self.num_prompts}"
            )
        self.seed, self.epoch, self.pos = state["seed"], state["epoch"], state["pos"]
        self._perm = self._permutation(self.epoch)
