"""The selector as a stage of the loop, built once from the `selector` group: keep m of each group's n
rollouts (PODS's down-sampling; `selector=none`: all of them), and report how the kept differ from all
generated (selector/*, pods/selector/diagnostics.py)."""

from __future__ import annotations

import torch

from pods.batch import Rollouts
from pods.config import SelectorConfig
from pods.selector.diagnostics import selector_metrics
from pods.selector.selectors import downsample


class SelectorStage:
    """`generator`: this rank's seeded torch.Generator (checkpointed with the run's random streams)."""

    def __init__(self, s: SelectorConfig, generator: torch.Generator, dist, timer):
        self.s, self.generator, self.dist, self.timer = s, generator, dist, timer

    def __call__(self, batch: Rollouts | None) -> Rollouts | None:
        """The kept m of each of this rank's groups (None when it has none)."""
        if batch is None:
            return None
        s = self.s
        with self.timer.phase("selector"):
            return batch.select(downsample(s.name, batch.rewards, s.m, self.generator, s.own()))  # (P, m)

    def metrics(self, generated: torch.Tensor, kept: Rollouts | None) -> dict[str, float]:
        """selector/* of the step: `generated`, the (P, n) rewards of every group generated (all ranks); the
        kept rewards are gathered here (call on every rank)."""
        all_kept = self.dist.gather(kept.rewards if kept is not None else torch.zeros(0, self.s.m))
        return selector_metrics(generated, all_kept) if all_kept.numel() else {}
