"""The loop on the shipped tiny model: one step updates the policy and logs the step's record; callbacks
see every step; the training clock counts the step's phases."""

from __future__ import annotations

import gc
from types import SimpleNamespace

import pytest
import torch

from pods.callbacks import Callback
from pods.tracking import read_metrics
from pods.train import preflight
from pods.trainer import Trainer
from tests.conftest import SMOKE, compose_cfg


def test_one_step_changes_parameters_and_logs_loss(make_cfg, tmp_path):
    trainer = Trainer(preflight(make_cfg(*SMOKE)), tmp_path / "run")
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    rec = trainer.train_step()
    assert trainer.step == 1 and rec["update/skipped"] == 0.0, "the step trained nothing"
    changed = [n for n, p in trainer.model.named_parameters() if not torch.equal(before[n], p)]
    assert changed, "no parameter changed"
    logged = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert [(r["kind"], r["step"]) for r in logged] == [("train", 1)]
    assert logged[0]["update/loss"] == rec["update/loss"] and logged[0]["rollout/rollouts"] == 2 * 8
    phases = sum(v for k, v in rec.items() if k.startswith("timing/") and k != "timing/compile")
    assert 0 < trainer.timer.train_clock <= phases + 1e-6  # the clock is the step's timed phases


class Count(Callback):
    def __init__(self):
        self.starts, self.ends = 0, []

    def on_step_start(self, trainer):
        self.starts += 1

    def on_step_end(self, trainer, record):
        self.ends.append(record["update/rows"])


class Frozen(Callback):
    """Python's permanent generation's size as each step starts."""

    def __init__(self):
        self.counts = []

    def on_step_start(self, trainer):
        self.counts.append(gc.get_freeze_count())


@pytest.fixture(scope="module")
def three_steps(tmp_path_factory):
    """One 3-step run with a final eval (no checkpoint) that the tests below read: callbacks and the heap's
    freeze count seen by each step, the final eval, the records."""
    run_dir = tmp_path_factory.mktemp("three_steps") / "run"
    count, frozen = Count(), Frozen()
    cfg = compose_cfg([*SMOKE, "max_steps=3", "eval.at_start=false", "checkpoint.save_final=false"], run_dir)
    final = Trainer(preflight(cfg), run_dir, callbacks=[count, frozen]).train()
    return SimpleNamespace(
        count=count, frozen=frozen, final=final, freeze_after=gc.get_freeze_count(),
        records=read_metrics(run_dir / "metrics.jsonl"),
    )  # fmt: skip


def test_train_runs_to_max_steps_with_callbacks_and_a_final_eval(three_steps):
    cb, final = three_steps.count, three_steps.final
    assert cb.starts == 3 and len(cb.ends) == 3 and all(rows > 0 for rows in cb.ends)
    assert 0.0 <= final["eval/accuracy"] <= 1.0 and final["eval/questions"] == 16
    kinds = [(r["kind"], r["step"]) for r in three_steps.records]
    assert kinds == [("train", 1), ("train", 2), ("train", 3), ("eval", 3)]


def test_the_trainer_takes_only_a_settled_config(make_cfg, tmp_path):
    """Checks and hardware=auto's choice happen once, in pods.train.preflight; a Trainer given anything else (a
    composed config, settings whose update layout is not settled) refuses in one line before the run
    directory or the model exist."""
    import dataclasses

    from pods.config import settings

    cfg = make_cfg(*SMOKE)
    typed = settings(cfg)
    unsettled = dataclasses.replace(typed, update=dataclasses.replace(typed.update, row_bucket=None))
    for config, got in ((cfg, "DictConfig"), (unsettled, "TrainConfig, not settled")):
        with pytest.raises(
            TypeError, match=f"settled TrainConfig of pods.train.preflight\\(cfg\\), got {got}"
        ):
            Trainer(config, tmp_path / "run")
        assert not (tmp_path / "run").exists()


def test_the_heap_is_frozen_after_the_first_step_and_thawed_after_the_loop(three_steps):
    """Objects alive after step 1 move to Python's permanent generation (full collections skip them), timed
    as the `gc` phase on the training clock; the loop's end makes them collectable again."""
    counts = three_steps.frozen.counts
    assert counts[0] == 0 and counts[1] > 1000 and counts[2] > 1000  # (freed ones leave it)
    assert three_steps.freeze_after == 0
    train = [r for r in three_steps.records if r["kind"] == "train"]
    assert "timing/gc" not in train[0] and train[1]["timing/gc"] > 0
