"""End-to-end runs of the tiny model: metrics written, parameters changed, resume is exact."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM

from pods.checkpoint import latest_checkpoint
from pods.tracking import read_metrics
from pods.train import run
from tests.conftest import SAME_RUN_KEYS, SMOKE


def _weights(path):
    return AutoModelForCausalLM.from_pretrained(path).state_dict()


def test_smoke_run_writes_metrics_and_changes_parameters(make_cfg, tmp_path):
    cfg = make_cfg(*SMOKE, "eval.every_steps=2", "checkpoint.every_steps=2")
    run(cfg)
    recs = read_metrics(tmp_path / "run" / "metrics.jsonl")
    train = [r for r in recs if r["kind"] == "train"]
    evals = [r for r in recs if r["kind"] == "eval"]
    assert [r["step"] for r in train] == [1, 2, 3]
    assert [r["step"] for r in evals] == [0, 2, 3]
    updated = [r for r in train if r["update/skipped"] == 0.0]
    assert updated, "every step skipped its update: nothing was trained"
    for key in (
        "timing/generation",
        "timing/update",
        "reward/mean",
        "selector/kept_reward_std",
        "update/loss",
        "completions/mean_length",
        "rollout/tokens",
    ):
        assert key in updated[-1], key
    assert updated[-1]["update/rows"] > 0 and updated[-1]["update/grad_norm"] > 0
    assert all(r["train_time"] > 0 for r in train) and train[-1]["rollouts"] == 3 * 2 * 8
    clocks = [r["train_time"] for r in recs]
    assert clocks == sorted(clocks)  # eval records carry the training clock
    final = latest_checkpoint(tmp_path / "run" / "checkpoints")
    before, after = _weights(cfg.model.path), _weights(final / "model")
    changed = [k for k in before if not torch.equal(before[k], after[k])]
    assert changed, "no parameter changed"


@pytest.mark.parametrize("compiled", ["false", "true"])  # true: the generation copy must follow the resume
def test_resume_gives_the_same_next_steps_as_an_uninterrupted_run(make_cfg, tmp_path, compiled):
    common = [
        *SMOKE,
        "max_steps=4",
        "arm=greso+dynamic_sampling+max_variance-n64-m16",
        "selector.n=8",
        "selector.m=4",
    ]
    common.append(f"rollout.hf.compile={compiled}")
    full = make_cfg(*common, run_dir=tmp_path / "full")
    run(full)
    # interrupted: stop after step 2 (checkpoint), then resume to step 4
    part = make_cfg(
        *[c for c in common if not c.startswith("max_steps")],
        "max_steps=2",
        "eval.at_end=false",
        run_dir=tmp_path / "part",
    )
    run(part)
    resumed = make_cfg(*common, "resume=true", run_dir=tmp_path / "part")
    run(resumed)
    a = [r for r in read_metrics(tmp_path / "full" / "metrics.jsonl") if r["kind"] == "train"]
    b = [r for r in read_metrics(tmp_path / "part" / "metrics.jsonl") if r["kind"] == "train"]
    assert [r["step"] for r in b] == [1, 2, 3, 4]  # no gap, no duplicate
    for x, y in zip(a, b):
        for key in SAME_RUN_KEYS:
            assert x.get(key) == y.get(key), (x["step"], key, x.get(key), y.get(key))
    wa = _weights(latest_checkpoint(tmp_path / "full" / "checkpoints") / "model")
    wb = _weights(latest_checkpoint(tmp_path / "part" / "checkpoints") / "model")
    assert all(torch.equal(wa[k], wb[k]) for k in wa)


def test_readme_smoke_command_runs(tmp_path):
    """README's `python -m pods.train debug=smoke`."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run(
        [sys.executable, "-m", "pods.train", "debug=smoke", "hardware=cpu", f"hydra.run.dir={tmp_path}/r"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    recs = read_metrics(tmp_path / "r" / "metrics.jsonl")
    assert [r["step"] for r in recs if r["kind"] == "train"] == [1, 2, 3]
    assert [r["step"] for r in recs if r["kind"] == "eval"] == [0, 3]
