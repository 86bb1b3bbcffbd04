"""A run killed with SIGKILL at random points resumes and ends exactly where an uninterrupted run ends."""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from pods import checkpoint as ckpt
from pods.tracking import read_metrics
from tests.conftest import SAME_RUN_KEYS, SMOKE

ROOT = Path(__file__).resolve().parents[2]
KEYS = SAME_RUN_KEYS


def _cmd(run_dir: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "pods.train",
        *SMOKE,
        "max_steps=6",
        "checkpoint.every_steps=1",
        "eval.every_steps=2",
        "arm=greso+dynamic_sampling+max_variance-n64-m16",
        "selector.n=8",
        "selector.m=4",
        f"hydra.run.dir={run_dir}",
        *extra,
    ]


def _logged_steps(run_dir: Path) -> int:
    """Train records in metrics.jsonl so far (a partial last line, mid-write, is not counted)."""
    try:
        text = (run_dir / "metrics.jsonl").read_text()
    except FileNotFoundError:
        return 0
    return sum(
        1 for line in text.splitlines(keepends=True) if line.endswith("\n") and '"kind": "train"' in line
    )


def _train_records(run_dir: Path) -> list[dict]:
    return [r for r in read_metrics(run_dir / "metrics.jsonl") if r["kind"] == "train"]


@pytest.mark.slow
def test_sigkill_resume_cycles_match_uninterrupted_run(tmp_path):
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    ref = tmp_path / "ref"
    subprocess.run(_cmd(ref), cwd=ROOT, env=env, check=True, capture_output=True)
    run_dir, rng, kills = tmp_path / "killed", random.Random(0), 0
    for cycle in range(12):
        if run_dir.exists() and ckpt.latest_checkpoint(run_dir / "checkpoints") is None:
            # killed before its first checkpoint: resume=true refuses to start over on the records it would
            # overwrite (tests/reliability/test_data_loss.py); start over on purpose, as its message says
            shutil.rmtree(run_dir)
        extra = ["resume=true"] if run_dir.exists() else []
        done = len(_train_records(run_dir)) if (run_dir / "metrics.jsonl").exists() else 0
        # Kill by progress, not by a fixed wait (machines differ several-fold in speed): once the run has logged
        # 1-2 new steps, wait a random fraction of a step (so some kills land inside a checkpoint save), then SIGKILL.
        # Cycles after the second let the run finish.
        target = done + rng.randint(1, 2) if cycle < 2 else None
        proc = subprocess.Popen(
            _cmd(run_dir, *extra),
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        killed = False
        deadline = time.monotonic() + 300
        while proc.poll() is None and time.monotonic() < deadline:
            if target is not None and _logged_steps(run_dir) >= target:
                time.sleep(rng.uniform(0.0, 0.4))
                if proc.poll() is None:
                    proc.send_signal(signal.SIGKILL)
                    killed = True
                break
            time.sleep(0.02)
        _, err = proc.communicate(timeout=300)
        if killed:
            kills += 1
            continue
        assert proc.returncode == 0, f"cycle {cycle} exited {proc.returncode}: {err[-2000:]}"
        break
    else:
        pytest.fail("run never finished")
    print(f"SIGKILL/resume cycles: {kills} kills, finished on cycle {cycle + 1}")
    assert kills >= 1, "the schedule never killed the run; lower the wait"
    # resume=true on the finished run, killed at a random point and then run to the end: adds nothing
    before = (run_dir / "metrics.jsonl").read_text()
    proc = subprocess.Popen(_cmd(run_dir, "resume=true"), cwd=ROOT, env=env, stdout=subprocess.DEVNULL)
    time.sleep(rng.uniform(1.0, 6.0))
    proc.kill()
    proc.wait()
    subprocess.run(_cmd(run_dir, "resume=true"), cwd=ROOT, env=env, check=True, capture_output=True)
    assert (run_dir / "metrics.jsonl").read_text() == before
    a, b = _train_records(ref), _train_records(run_dir)
    assert [r["step"] for r in b] == list(range(1, 7))  # no duplicates, no gaps
    evals = [r["step"] for r in read_metrics(run_dir / "metrics.jsonl") if r["kind"] == "eval"]
    assert (
        evals
        == [r["step"] for r in read_metrics(ref / "metrics.jsonl") if r["kind"] == "eval"]
        == [0, 2, 4, 6]
    )
    for x, y in zip(a, b):
        for k in KEYS:
            assert x.get(k) == y.get(k), (x["step"], k)
    wa = ckpt.load_trainer_state(ckpt.latest_checkpoint(ref / "checkpoints"))
    wb = ckpt.load_trainer_state(ckpt.latest_checkpoint(run_dir / "checkpoints"))
    ca, cb = wa["components"], wb["components"]
    assert (
        ca["trainer"]["counters"] == cb["trainer"]["counters"]
        and ca["prefilter"]["p"] == cb["prefilter"]["p"]
    )


def test_crash_during_save_keeps_previous_checkpoint(tmp_path, monkeypatch):
    model = torch.nn.Linear(2, 2)
    model.save_pretrained = lambda d: (
        Path(d).mkdir(parents=True, exist_ok=True),
        torch.save(model.state_dict(), Path(d) / "w.pt"),
    )
    root = tmp_path / "checkpoints"
    ckpt.save_checkpoint(root, 1, model, {"x": 1}, keep_last=2)

    def boom(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(ckpt.torch, "save", boom)
    with pytest.raises(OSError):
        ckpt.save_checkpoint(root, 2, model, {"x": 2}, keep_last=2)
    monkeypatch.undo()
    latest = ckpt.latest_checkpoint(root)
    assert latest.name == "step_0000001"
    assert ckpt.load_trainer_state(latest)["x"] == 1


def test_stale_pointer_falls_back_to_newest_complete(tmp_path):
    root = tmp_path / "checkpoints"
    for s in (1, 2):
        (root / f"step_{s:07d}").mkdir(parents=True)
        torch.save({"step": s}, root / f"step_{s:07d}" / "trainer_state.pt")
    (root / "latest").write_text("step_0000009")  # points at a checkpoint that was never completed
    (root / ".tmp_step_0000003").mkdir()  # a save interrupted half-way
    assert ckpt.latest_checkpoint(root).name == "step_0000002"
