"""How many intra-op CPU threads torch gets (hardware.num_threads=0, the default: automatic).

torch defaults to one thread per core. On a machine whose cores are busy with other work (a laptop running
a browser and a build, a shared box) those threads are descheduled in turn and every parallel region waits
for the slowest one: on the 2-core reference machine with two busy processes beside it, steps that take
about 1 s alone took 5-30 s with 2 threads (results/threads/). The automatic choice measures how many cores
other processes keep busy right now (/proc/stat over a short window, the 1-minute load average where that
is unavailable) and uses the cores that are free, at least 1.
"""

from __future__ import annotations

import logging
import os
import time

log = logging.getLogger("pods")


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _cpu_times() -> tuple[int, int] | None:
    """(busy, total) jiffies over all cores from /proc/stat, or None."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    total = sum(fields[:8])  # guest time is already counted in user
    return total - idle, total


def busy_cores(window_s: float = 0.5) -> float:
    """Cores kept busy by the rest of the machine, measured while this process sleeps."""
    n = os.cpu_count() or 1
    a = _cpu_times()
    if a is not None:
        time.sleep(window_s)
        b = _cpu_times()
        if b is not None and b[1] > a[1]:
            return n * (b[0] - a[0]) / (b[1] - a[1])
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return 0.0


def auto_threads(cores: int | None = None, busy: float | None = None) -> int:
    """The free cores (usable cores minus those other processes keep busy), rounded, at least 1."""
    cores = usable_cores() if cores is None else cores
    busy = busy_cores() if busy is None else busy
    return max(1, min(cores, int(cores - busy + 0.5)))


def set_threads(requested: int, device_type: str) -> int:
    """Apply hardware.num_threads (0 = automatic on CPU; on a GPU torch's default is left alone)."""
    import torch

    if requested > 0:
        torch.set_num_threads(requested)
    elif device_type == "cpu":
        cores, busy = usable_cores(), busy_cores()
        n = auto_threads(cores, busy)
        torch.set_num_threads(n)
        log.info("torch threads: %d (automatic: %d usable cores, %.1f busy with other work)", n, cores, busy)
    return torch.get_num_threads()
