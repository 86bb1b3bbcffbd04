"""Why a slow update is slow (issue 18, target 5): the CUDA caching allocator's counters and Python's garbage
collector, read around one update. A first-time shape shows as update/new_shapes; a step that had to ask
CUDA for memory (or free its cache and retry) shows here; so does a long gc pass."""

from __future__ import annotations

import gc
import time

import torch

# update/* name -> torch.cuda.memory_stats() counter (totals since the process started; the update logs the
# change): segments reserved with cudaMalloc, segments handed back with cudaFree (empty_cache, or a retry),
# and failed cudaMallocs that made the allocator free its cache and try again
CUDA_COUNTERS = {
    "cuda_mallocs": "segment.all.allocated",
    "cuda_frees": "segment.all.freed",
    "alloc_retries": "num_alloc_retries",
}


def cuda_counters(device) -> dict[str, int]:
    """CUDA_COUNTERS now on `device`; {} on a CPU (no allocator to read)."""
    if torch.device(device).type != "cuda":
        return {}
    stats = torch.cuda.memory_stats(device)
    return {k: int(stats.get(v, 0)) for k, v in CUDA_COUNTERS.items()}


class UpdateProbe:
    """`with UpdateProbe(device) as probe: ...` then probe.metrics(): update/gc_s, the seconds Python's gc
    ran inside the block (every device), and on CUDA the change of each of CUDA_COUNTERS."""

    def __init__(self, device):
        self.device, self.gc_s, self._gc_t0 = device, 0.0, None

    def _on_gc(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._gc_t0 = time.perf_counter()
        elif self._gc_t0 is not None:  # "stop" of a pass this probe saw start
            self.gc_s += time.perf_counter() - self._gc_t0

    def __enter__(self) -> UpdateProbe:
        self._start = cuda_counters(self.device)
        gc.callbacks.append(self._on_gc)
        return self

    def __exit__(self, *exc) -> None:
        gc.callbacks.remove(self._on_gc)
        self._end = cuda_counters(self.device)

    def metrics(self) -> dict[str, float]:
        out = {"update/gc_s": self.gc_s}
        out.update({f"update/{k}": float(v - self._start[k]) for k, v in self._end.items()})
        return out
