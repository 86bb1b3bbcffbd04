"""One run directory, one run: an exclusive lock held for the run's life.

The lock is `fcntl.flock` on `<run_dir>/run.lock`: the kernel releases it when the process ends, however it
ends, so a run killed with SIGKILL (or a node that went down, once its lease lapses on a network filesystem)
never blocks its own resume. The file names the holder (pid, host, start time, command, Slurm job) for the
one-line refusal a second process gets. Under torchrun/DDP only rank 0 takes it (the other ranks of the same
run share the directory by design). A requeued Slurm job waits a while for the lock when its holder is the
same job's previous run (on a network filesystem the dead node's lock may outlive it by a lease period).

Within one process the lock is re-entrant: `pods.train` takes it in its checks before anything is written
and the Trainer again (a Trainer built in code takes it itself); `release` drops it.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import json
import os
import socket
import sys
import time
from pathlib import Path

from pods.errors import ConfigError, writing
from pods.files import open_fd

LOCK = "run.lock"
REQUEUE_WAIT_S = 300.0  # a requeued Slurm job waits this long for its previous run's lock to go
_held: dict[Path, int] = {}  # run dir -> the open file descriptor that holds its lock (this process)


def _key(run_dir) -> Path:
    return Path(run_dir).resolve()


def main_process() -> bool:
    """Whether this process is the run's rank 0, the one that takes the lock: RANK under torchrun (with
    WORLD_SIZE); SLURM_PROCID in a Slurm job of several tasks before pods.slurm.setup has exported RANK (a RANK
    without WORLD_SIZE came from the submitting shell); else the run's only process."""
    if "WORLD_SIZE" in os.environ:
        return int(os.environ.get("RANK", "0") or 0) == 0
    if "SLURM_JOB_ID" in os.environ and int(os.environ.get("SLURM_NTASKS", "1") or 1) > 1:
        return int(os.environ.get("SLURM_PROCID", "0") or 0) == 0
    return True


def holder(run_dir) -> dict:
    """Who holds (or last held) the lock, as its file says; {} if unreadable."""
    try:
        info = json.loads((Path(run_dir) / LOCK).read_text())
        return info if isinstance(info, dict) else {}
    except (OSError, ValueError):
        return {}


def _me() -> dict:
    return {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "started": dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "command": " ".join(sys.argv)[:500],
        "slurm_job": os.environ.get("SLURM_JOB_ID"),
    }


def _same_job_requeued(info: dict) -> bool:
    """The holder is this Slurm job's previous run (the job was requeued): it is going away."""
    job = os.environ.get("SLURM_JOB_ID")
    restarts = int(os.environ.get("SLURM_RESTART_COUNT", "0") or 0)
    return bool(job) and restarts > 0 and info.get("slurm_job") == job


def acquire(run_dir, wait_s: float | None = None) -> None:
    """Take the run directory's lock, or raise ConfigError naming the holder. Re-entrant in one process.
    `wait_s`: how long to retry while another process holds it (default: 0, or REQUEUE_WAIT_S for a
    requeued Slurm job whose previous run holds it)."""
    key = _key(run_dir)
    if key in _held:
        return
    key.mkdir(parents=True, exist_ok=True)
    with writing(key / LOCK):
        fd = open_fd(key / LOCK, "r+")  # a link in its place is refused, never followed (pods/files.py)
    deadline = None
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            info = holder(key)
            if deadline is None:
                wait = wait_s if wait_s is not None else REQUEUE_WAIT_S if _same_job_requeued(info) else 0.0
                deadline = time.monotonic() + wait
            if time.monotonic() >= deadline:
                os.close(fd)
                raise ConfigError(busy_message(key, info)) from None
            time.sleep(0.5)
    _held[key] = fd  # held from here: a failed write below is released with the rest
    with writing(key / LOCK):  # the holder's name only: a full disk leaves the lock held, the file empty
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(_me()) + "\n").encode(), 0)
        os.fsync(fd)


def busy_message(run_dir: Path, info: dict) -> str:
    who = f"pid {info.get('pid', '?')} on {info.get('host', '?')}, started {info.get('started', '?')}"
    if info.get("slurm_job"):
        who += f", Slurm job {info['slurm_job']}"
    return (
        f"run_dir={run_dir} is in use by another run ({who}); one run directory holds one run at a time: "
        "wait for it to end (or stop it), or choose another hydra.run.dir"
    )


def release(run_dir) -> None:
    fd = _held.pop(_key(run_dir), None)
    if fd is not None:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def held(run_dir) -> bool:
    return _key(run_dir) in _held
