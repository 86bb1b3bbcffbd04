"""End-to-end runs of the tiny model: metrics written, parameters changed, resume is exact."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from pods.checkpoint import latest_checkpoint
from pods.tracking import read_metrics
from pods.train import run
from tests.conftest import SAME_RUN_KEYS, SMOKE, compose_cfg

ROOT = Path(__file__).resolve().parents[2]


def _weights(path):
    return AutoModelForCausalLM.from_pretrained(path).state_dict()


@pytest.fixture(scope="module")
def readme_smoke(tmp_path_factory) -> Path:
    """README's `python -m pods.train debug=smoke` (on the CPU), run once from the command line: the tests below
    read its run directory."""
    run_dir = tmp_path_factory.mktemp("smoke") / "r"
    proc = subprocess.run(
        [sys.executable, "-m", "pods.train", "debug=smoke", "hardware=cpu", f"hydra.run.dir={run_dir}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return run_dir


@pytest.mark.slow
def test_readme_smoke_command_runs(readme_smoke):
    recs = read_metrics(readme_smoke / "metrics.jsonl")
    assert [r["step"] for r in recs if r["kind"] == "train"] == [1, 2, 3]
    assert [r["step"] for r in recs if r["kind"] == "eval"] == [0, 3]


def test_smoke_run_writes_metrics_and_changes_parameters(readme_smoke):
    recs = read_metrics(readme_smoke / "metrics.jsonl")
    train = [r for r in recs if r["kind"] == "train"]
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
    assert all(r["train_time"] > 0 for r in train) and train[-1]["rollouts"] == 3 * 2 * 4  # smoke: n = 4
    clocks = [r["train_time"] for r in recs]
    assert clocks == sorted(clocks)  # eval records carry the training clock
    final = latest_checkpoint(readme_smoke / "checkpoints")
    model_path = compose_cfg(["debug=smoke", "hardware=cpu"]).model.path
    before, after = _weights(model_path), _weights(final / "model")
    changed = [k for k in before if not torch.equal(before[k], after[k])]
    assert changed, "no parameter changed"


@pytest.mark.slow
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
