"""Named phase timers and the training clock.

The training clock is the sum of the step phases (prefilter, generation, reward, selector, update, ...)
and excludes eval and checkpointing, so accuracy-vs-time curves measure training cost only. On a GPU each
phase also records its peak allocated memory (memory/peak_<phase>_gib).
"""

from __future__ import annotations

import gc
import math
import time
from collections import defaultdict
from contextlib import contextmanager

import torch

# compile: one-time warm-up of the compiled rollout path at each new shape (paid alike by every variant);
# log: writing a step's record and the callbacks after it (rank 0's; the other ranks wait for it at the
# next step's first collective)
NOT_TRAINING = {"eval", "checkpoint", "compile", "log"}


class PhaseTimer:
    def __init__(self, train_clock: float = 0.0, sync_cuda: bool = False, peak_memory: bool = False):
        self.train_clock = train_clock  # seconds; restored from checkpoints
        self.step_times: dict[str, float] = defaultdict(float)
        self.sync_cuda = sync_cuda and torch.cuda.is_available()
        self._inner: list[float] = []  # per open phase: seconds spent in phases nested inside it
        # peak_memory: each phase resets CUDA's peak counter, so its peak is its own; max_allocated keeps the
        # run's (every reading before a reset), for whoever reads the counter across phases (bench/harness.py)
        self.peak_memory = peak_memory and torch.cuda.is_available()
        self.step_peaks: dict[str, int] = {}  # bytes, per phase, this step
        self.max_allocated = 0
        self._peaks: list[int] = []  # per open phase: the peak of what ran inside it before its last reset
        # seconds of every phase so far (outermost attribution), and of the not-training ones among them
        self._claimed, self._claimed_nt = 0.0, 0.0
        self._mark: tuple[float, float, float] | None = None  # (perf_counter, _claimed, _claimed_nt)

    @contextmanager
    def phase(self, name: str):
        """Time a block; CUDA work is synchronised so the time lands in the right phase. Time spent in a
        phase nested inside another counts for the inner one only (compile inside generation). Under
        torch.profiler the block is the range `phase/<name>` (bench/scaling_rank.py splits device time by it)."""
        if self.sync_cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        self._inner.append(0.0)
        if self.peak_memory:
            self._reset_peak()
            self._peaks.append(0)
        try:
            with torch.profiler.record_function(f"phase/{name}"):  # a profiler's trace names the phase
                yield
        finally:
            if self.sync_cuda:
                torch.cuda.synchronize()
            total = time.perf_counter() - t0
            dt = total - self._inner.pop()
            if self._inner:
                self._inner[-1] += total
            self.step_times[name] += dt
            self._claimed += dt
            if name not in NOT_TRAINING:
                self.train_clock += dt
            else:
                self._claimed_nt += dt
            if self.peak_memory:
                self._end_peak(name)

    def _reset_peak(self) -> None:
        """Restart CUDA's peak counter, its reading first kept as the enclosing phase's peak so far (if any)
        and the run's."""
        peak = torch.cuda.max_memory_allocated()
        self.max_allocated = max(self.max_allocated, peak)
        if self._peaks:
            self._peaks[-1] = max(self._peaks[-1], peak)
        torch.cuda.reset_peak_memory_stats()

    def _end_peak(self, name: str) -> None:
        peak = max(torch.cuda.max_memory_allocated(), self._peaks.pop())
        self.max_allocated = max(self.max_allocated, peak)
        self.step_peaks[name] = max(self.step_peaks.get(name, 0), peak)
        if self._peaks:  # a nested phase's peak is its enclosing phase's too
            self._peaks[-1] = max(self._peaks[-1], peak)

    def start_step(self) -> None:
        """Mark where the first step's wall time starts (later steps' start where the previous record was
        taken). pop_step then reports timing/wall_step, the wall seconds since that mark less the not-training
        phases run in it (eval, checkpoint, compile, log), and timing/unattributed, the part of it no phase
        claimed (host work between phases, waits for other ranks outside a phase). The phases' GPU syncs make
        the two comparable; with every phase named, unattributed is near 0."""
        if self._mark is None:
            self._mark = self._now()

    def _now(self) -> tuple[float, float, float]:
        if self.sync_cuda:
            torch.cuda.synchronize()
        return time.perf_counter(), self._claimed, self._claimed_nt

    def pop_step(self) -> dict[str, float]:
        """This step's per-phase seconds as timing/* metrics and, on a GPU, peak memory as memory/*, then
        reset."""
        out = {f"timing/{k}": v for k, v in self.step_times.items()}
        out["timing/step"] = sum(v for k, v in self.step_times.items() if k not in NOT_TRAINING)
        if self._mark is not None:
            (t0, c0, n0), (t1, c1, n1) = self._mark, self._now()
            wall = (t1 - t0) - (n1 - n0)
            out["timing/wall_step"] = wall
            out["timing/unattributed"] = wall - ((c1 - c0) - (n1 - n0))
            self._mark = (t1, c1, n1)
        out.update({f"memory/peak_{k}_gib": v / 2**30 for k, v in self.step_peaks.items()})
        self.step_times, self.step_peaks = defaultdict(float), {}
        return out

    def pop_phase(self, name: str) -> dict[str, float]:
        """One phase's metrics, taken out of this step's (eval: logged with its own record)."""
        out = {f"timing/{name}": self.step_times.pop(name, 0.0)}
        if name in self.step_peaks:
            out[f"memory/peak_{name}_gib"] = self.step_peaks.pop(name) / 2**30
        return out

    def state_dict(self) -> dict:
        return {"train_clock": self.train_clock}

    def load_state_dict(self, state: dict) -> None:
        self.train_clock = state["train_clock"]


class Every:
    """When a periodic job (eval, checkpoint) is due: every `steps` optimizer steps and/or every `seconds`
    of training clock, on a fixed grid (a job due at 30 s and run at 31 s is next due at 60 s). 0 = off."""

    def __init__(self, steps: int = 0, seconds: float = 0.0):
        self.steps, self.seconds = steps, seconds
        self.next_time = seconds if seconds > 0 else math.inf  # restored from checkpoints

    def due(self, step: int, clock: float) -> bool:
        due = self.steps > 0 and step % self.steps == 0
        if self.next_time is None:  # resumed under another period: the new grid, from the restored clock
            self.next_time = (
                (math.floor(clock / self.seconds) + 1) * self.seconds if self.seconds > 0 else math.inf
            )
        if clock >= self.next_time:
            due = True
            while self.next_time <= clock:  # the next point on the fixed grid
                self.next_time += self.seconds
        return due

    def state_dict(self) -> dict:
        return {"next_time": self.next_time, "seconds": self.seconds}

    def load_state_dict(self, state: dict) -> None:
        """The saved grid, unless the period changed since (eval and checkpoint cadence may change on
        resume): then the next point of the new grid, set at the next due()."""
        same = state.get("seconds", self.seconds) == self.seconds  # checkpoints of older pods: no period
        self.next_time = state["next_time"] if same else None


def freeze_heap() -> None:
    """Collect, then move every object alive now (model, tokenizer, compiled graphs, data) to Python's
    permanent generation: later full garbage collections skip them. Without it a full collection that fell
    inside an update cost 0.58 s, 2.5x the update (0.5B LoRA on an H100, issue 18); cycles among the frozen
    objects are not collected while frozen: this runs once the setup's garbage is gone, and
    Trainer.train unfreezes when its loop ends."""
    gc.collect()
    gc.freeze()
