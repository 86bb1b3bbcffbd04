"""Named phase timers and the training clock.

The training clock is the sum of the step phases (generation, reward, selection, logprobs, update, ...)
and excludes eval and checkpointing, so accuracy-vs-time curves measure training cost only.
"""

from __future__ import annotations

import time
from collections import defaultdict
from contextlib import contextmanager

import torch

NOT_TRAINING = {"eval", "checkpoint"}


class PhaseTimer:
    def __init__(self, train_clock: float = 0.0, sync_cuda: bool = False):
        self.train_clock = train_clock  # seconds; restored from checkpoints
        self.step_times: dict[str, float] = defaultdict(float)
        self.sync_cuda = sync_cuda and torch.cuda.is_available()

    @contextmanager
    def phase(self, name: str):
        """Time a block; CUDA work is synchronised so the time lands in the right phase."""
        if self.sync_cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        try:
            yield
        finally:
            if self.sync_cuda:
                torch.cuda.synchronize()
            dt = time.perf_counter() - t0
            self.step_times[name] += dt
            if name not in NOT_TRAINING:
                self.train_clock += dt

    def pop_step(self) -> dict[str, float]:
        """This step's per-phase seconds as timing/* metrics, then reset."""
        out = {f"timing/{k}": v for k, v in self.step_times.items()}
        out["timing/step"] = sum(v for k, v in self.step_times.items() if k not in NOT_TRAINING)
        self.step_times = defaultdict(float)
        return out
