"""Two CPU processes (gloo) through torchrun + accelerate: prompts sharded, metrics global, rank 0 writes."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from pods.tracking import read_metrics
from tests.conftest import SMOKE

ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_ddp_two_cpu_processes(tmp_path):
    torchrun = shutil.which("torchrun") or str(Path(sys.executable).with_name("torchrun"))
    run_dir = tmp_path / "ddp"
    over = [o for o in SMOKE if not o.startswith("algo.prompts_per_step")]
    cmd = [
        torchrun,
        "--nproc_per_node",
        "2",
        "--master_port",
        str(_free_port()),
        "--log-dir",
        str(tmp_path / "logs"),
        "--redirects",
        "3",
        "-m",
        "pods.train",
        *over,
        "algo.prompts_per_step=4",
        "hardware.distributed=ddp",
        "selector=greso_max_variance",
        "selector.n=8",
        "selector.m=4",
        "checkpoint.every_steps=2",
        f"hydra.run.dir={run_dir}",
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    # each rank's own output (torchrun interleaves them, and the root cause is often cut off)
    ranks = "".join(
        f"\n--- {f.relative_to(tmp_path)}\n{f.read_text()[-2500:]}"
        for f in sorted((tmp_path / "logs").rglob("std*.log"))
    )
    assert proc.returncode == 0, proc.stderr[-1500:] + ranks
    recs = read_metrics(run_dir / "metrics.jsonl")
    train = [r for r in recs if r["kind"] == "train"]
    assert [r["step"] for r in train] == [1, 2, 3]  # written once (rank 0), not twice
    # both ranks' shards are counted: at least 4 prompts x 8; dynamic-sampling rounds draw a multiple of 2 prompts
    assert all(r["rollout/rollouts"] >= 4 * 8 and r["rollout/rollouts"] % (2 * 8) == 0 for r in train)
    assert all(r["train/groups"] == 4 for r in train if "train/groups" in r)  # gathered from both ranks
    assert train[-1]["counters/rollouts"] == sum(r["rollout/rollouts"] for r in train)
    evals = [r for r in recs if r["kind"] == "eval"]
    assert evals and evals[-1]["eval/questions"] == 16
    assert (run_dir / "checkpoints" / "latest").exists()
