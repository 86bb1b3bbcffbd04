"""The update's diagnostics: gc seconds on every device, allocator counter deltas on CUDA only."""

from __future__ import annotations

import gc

import torch

from pods.update import probe as probe_mod
from pods.update.probe import UpdateProbe


def test_gc_time_is_counted_and_a_cpu_gets_no_allocator_keys():
    with UpdateProbe(torch.device("cpu")) as probe:
        gc.collect()
    m = probe.metrics()
    assert set(m) == {"update/gc_s"} and m["update/gc_s"] > 0
    assert probe._on_gc not in gc.callbacks  # nothing left hooked into gc after the update


def test_cuda_counters_are_logged_as_changes_over_the_update(monkeypatch):
    reads = iter(
        [{"cuda_mallocs": 10, "cuda_frees": 4, "alloc_retries": 1}]
        + [{"cuda_mallocs": 13, "cuda_frees": 4, "alloc_retries": 2}]
    )
    monkeypatch.setattr(probe_mod, "cuda_counters", lambda device: next(reads))
    with UpdateProbe("cuda") as probe:
        pass
    m = probe.metrics()
    assert (m["update/cuda_mallocs"], m["update/cuda_frees"], m["update/alloc_retries"]) == (3.0, 0.0, 1.0)


def test_the_counters_named_are_torchs():
    """The keys exist in torch's allocator stats (read from its documentation: no GPU here)."""
    doc = torch.cuda.memory_stats.__doc__
    assert "segment.{all,large_pool,small_pool}.{current,peak,allocated,freed}" in doc
    assert '"num_alloc_retries"' in doc
