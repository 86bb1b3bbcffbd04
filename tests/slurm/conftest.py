"""The Slurm tests run on a real Slurm (.ci/slurm.sh starts one as root: partition `debug` of one node, and
where this machine can make network namespaces, partition `multi` of two); without one they skip, saying why."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest


def slurm_missing() -> str | None:
    if shutil.which("sbatch") is None or shutil.which("sinfo") is None:
        return (
            "no Slurm on this machine (sbatch/sinfo not on PATH); `sudo .ci/slurm.sh` installs and starts one"
        )
    try:
        out = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"sinfo failed: {e}"
    states = out.stdout.split()
    if out.returncode != 0 or not any(s.rstrip("*") in ("idle", "mixed", "allocated") for s in states):
        return f"Slurm is not up (sinfo: {(out.stderr or out.stdout).strip()[:200] or 'no nodes'}); run .ci/slurm.sh"
    return None


@pytest.fixture(scope="session")
def slurm():
    reason = slurm_missing()
    if reason:
        pytest.skip(reason)


def two_nodes_missing() -> str | None:
    """None if partition `multi` has two nodes up, else why not (sinfo's reason for a drained node)."""
    reason = slurm_missing()
    if reason:
        return reason
    out = subprocess.run(["sinfo", "-h", "-N", "-p", "multi", "-o", "%N %T %E"], capture_output=True, text=True,
                         timeout=20)  # fmt: skip
    rows = [line.split(maxsplit=2) for line in out.stdout.splitlines() if line.strip()]
    if not rows:
        return (
            "no two-node partition `multi` (.ci/slurm.sh makes one where it can create network namespaces; "
            "see its output)"
        )
    down = [" ".join(r) for r in rows if r[1].rstrip("*~#") not in ("idle", "mixed", "allocated")]
    if len(rows) < 2 or down:
        up = ", ".join(r[0] for r in rows if " ".join(r) not in down)
        return f"partition `multi` does not have two nodes up: {'; '.join(down) or f'only {up}'}"
    return None


@pytest.fixture(scope="session")
def slurm_two_nodes():
    reason = two_nodes_missing()
    if reason:
        pytest.skip(reason)


@pytest.fixture(scope="session")
def torchrun_reference(tmp_path_factory):
    """world size -> the run directory of test_slurm_distributed.RUN launched on one node by torchrun with that
    many processes: what a Slurm job of as many tasks, on one node or two, must reproduce. Each once a session."""
    from bench.harness import torchrun_command
    from tests.slurm.test_slurm_distributed import RUN

    runs: dict[int, Path] = {}

    def reference(world: int) -> Path:
        if world not in runs:
            tmp = tmp_path_factory.mktemp(f"torchrun{world}")
            cmd = [*torchrun_command(world), "--log-dir", str(tmp / "logs"), "--redirects", "3", "-m", "pods.train",
                   *RUN, f"hydra.run.dir={tmp / 'run'}"]  # fmt: skip
            env = {**os.environ, "OMP_NUM_THREADS": "1"}
            root = Path(__file__).resolve().parents[2]
            out = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=600)
            ranks = "".join(
                f"\n--- {f}\n{f.read_text()[-2500:]}" for f in sorted((tmp / "logs").rglob("std*.log"))
            )
            assert out.returncode == 0, out.stderr[-1500:] + ranks
            runs[world] = tmp / "run"
        return runs[world]

    return reference
