"""The Slurm tests run on a real one-node Slurm (.ci/slurm.sh starts one as root); without one they skip,
saying why."""

from __future__ import annotations

import shutil
import subprocess

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
