"""Per-phase peak GPU memory: each phase's own peak, nested phases inside their parent's, the run's peak kept
across the resets; nothing on a CPU. The CUDA allocator is faked (no GPU here)."""

from __future__ import annotations

import pytest
import torch

from pods.timing import PhaseTimer

GIB = 2**30


class FakeAllocator:
    """torch.cuda's allocated-bytes counter and its resettable peak."""

    def __init__(self):
        self.now = self.peak = 0

    def alloc(self, gib: float) -> None:
        self.now += int(gib * GIB)
        self.peak = max(self.peak, self.now)

    def reset(self) -> None:
        self.peak = self.now


def test_no_memory_metrics_without_a_gpu():
    timer = PhaseTimer(sync_cuda=True, peak_memory=True)
    assert timer.peak_memory == torch.cuda.is_available()
    if not timer.peak_memory:
        with timer.phase("update"):
            pass
        assert not any(k.startswith("memory/") for k in timer.pop_step())


def test_each_phase_gets_its_own_peak_and_the_run_keeps_its_own(monkeypatch):
    mem = FakeAllocator()
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda *a: mem.peak)
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda *a: mem.reset())
    timer = PhaseTimer()
    timer.peak_memory = True
    mem.alloc(10)  # loading: the run's peak, before any phase
    mem.alloc(-8)
    with timer.phase("generation"):
        mem.alloc(3)  # 5 GiB
        mem.alloc(-3)
        with timer.phase("compile"):  # nested: resets the counter, generation keeps its 5
            mem.alloc(1)
            mem.alloc(-1)
        mem.alloc(0.5)
        mem.alloc(-0.5)
    with timer.phase("update"):
        mem.alloc(4)  # 6 GiB
        mem.alloc(-4)
    with timer.phase("eval"):
        mem.alloc(1)
    rec = timer.pop_phase("eval")
    assert rec["memory/peak_eval_gib"] == 3.0 and "timing/eval" in rec
    out = timer.pop_step()
    peaks = {k: v for k, v in out.items() if k.startswith("memory/")}
    assert peaks == {
        "memory/peak_generation_gib": 5.0,
        "memory/peak_compile_gib": 3.0,
        "memory/peak_update_gib": 6.0,
    }
    assert timer.max_allocated == 10 * GIB  # what bench.PeakMemory adds to the counter it reads at the end
    assert timer.pop_step() == {"timing/step": 0}  # reset with the step


class FakeClock:
    """time.perf_counter for pods.timing that moves only when the test sleeps: the sums below are exact, on a
    machine of any speed or load."""

    def __init__(self):
        self.now = 100.0

    def perf_counter(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock(monkeypatch):
    import pods.timing

    fake = FakeClock()
    monkeypatch.setattr(pods.timing, "time", fake)
    return fake


def test_wall_step_splits_into_phases_and_the_unattributed_rest(clock):
    """timing/wall_step = the phases run since start_step + timing/unattributed (time outside any phase);
    a phase that ran before start_step (gc after the last step) is not charged to this step's wall."""
    timer = PhaseTimer()
    assert "timing/wall_step" not in timer.pop_step()  # only once a step was started
    with timer.phase("gc"):
        clock.sleep(0.02)
    timer.start_step()
    with timer.phase("generation"):
        clock.sleep(0.03)
    clock.sleep(0.05)  # e.g. a collective outside any phase
    with timer.phase("update"):
        clock.sleep(0.01)
    rec = timer.pop_step()
    assert rec["timing/generation"] == pytest.approx(0.03) and rec["timing/update"] == pytest.approx(0.01)
    assert rec["timing/wall_step"] == pytest.approx(0.03 + 0.05 + 0.01)  # gc, before start_step, left out
    assert rec["timing/unattributed"] == pytest.approx(0.05)


def test_wall_steps_tile_the_loop_less_eval_checkpoint_and_log(clock):
    """After the first record, a step's wall runs from the previous record: host work between two steps
    lands in the next step's unattributed time, while eval, checkpoint and the record's writing (log) are
    named and left out, so the walls plus those phases add up to the loop's whole wall time."""
    timer = PhaseTimer()
    t0 = clock.perf_counter()
    timer.start_step()
    with timer.phase("generation"):
        clock.sleep(0.02)
    first = timer.pop_step()
    with timer.phase("log"):
        clock.sleep(0.03)
    with timer.phase("eval"):
        clock.sleep(0.04)
    evald = timer.pop_phase("eval")
    clock.sleep(0.02)  # unnamed host work between two steps
    timer.start_step()  # a later step's start_step does not move the mark
    with timer.phase("update"):
        clock.sleep(0.01)
    second = timer.pop_step()
    total = clock.perf_counter() - t0
    assert second["timing/log"] == pytest.approx(0.03) and "timing/log" not in first
    assert second["timing/step"] == pytest.approx(second["timing/update"])  # log is not training time
    assert second["timing/unattributed"] == pytest.approx(0.02)  # the unnamed gap, not log or eval
    named = second["timing/log"] + evald["timing/eval"]
    assert first["timing/wall_step"] + second["timing/wall_step"] + named == pytest.approx(total)
