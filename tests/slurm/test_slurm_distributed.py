"""A 2-task Slurm job (tasks_per_node=2, DDP on the CPU through gloo) builds its process group from Slurm's
variables, with no torchrun line, and logs the same records as the same run launched by torchrun."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from pods.tracking import read_metrics
from tests.conftest import DDP_RUN, SAME_RUN_KEYS
from tests.slurm.conftest import submit
from tests.slurm.test_slurm import SLURM, _job_logs

ROOT = Path(__file__).resolve().parents[2]
RUN = DDP_RUN
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("slurm")]


def _records(run_dir: Path) -> list[dict]:
    return read_metrics(run_dir / "metrics.jsonl")


def test_two_task_job_matches_the_torchrun_launch(tmp_path, torchrun_reference):
    ref = torchrun_reference(2)
    sweep = tmp_path / "sweep"
    cmd = [sys.executable, "-m", "pods.train", "-m", *SLURM, "hydra.launcher.tasks_per_node=2", *RUN,
           f"hydra.sweep.dir={sweep}"]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = submit(cmd, sweep, 300, cwd=ROOT, env=env)
    logs = _job_logs(sweep)
    assert proc.returncode == 0, proc.stderr[-2000:] + logs[-3000:]
    assert "Slurm task 0 of 2" in logs and "Slurm task 1 of 2" in logs  # ranks from Slurm, not torchrun
    (run_dir,) = [p.parent for p in sweep.glob("*/metrics.jsonl")]
    a, b = _records(ref), _records(run_dir)
    assert [(r["kind"], r["step"]) for r in b] == [(r["kind"], r["step"]) for r in a]  # rank 0 writes, once
    assert [r["step"] for r in b if r["kind"] == "train"] == [1, 2, 3]
    for x, y in zip(a, b):
        for k in (*SAME_RUN_KEYS, "eval/accuracy"):
            assert x.get(k) == y.get(k), (x["kind"], x["step"], k, x.get(k), y.get(k))
    assert all(r["rollout/rollouts"] >= 4 * 8 for r in b if r["kind"] == "train")  # both ranks' shards
