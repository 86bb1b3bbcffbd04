"""What changes the meaning of a run is said, once, with the numbers:

- a resume on other training data than its checkpoint's (a digest of the train prompts and answers, saved in
  every checkpoint) is refused in one line naming resume_allow_dataset_change, and goes on with it (recorded in
  history.jsonl); a checkpoint written before the digest existed is a warning;
- a warm-up longer than a run bounded by max_steps, and steps in a row that train on nothing because every group
  has zero reward variance, are warned once;
- a plugin reward that has not returned says so every WAIT_LINE_S seconds, naming itself;
- the log's first lines and run_info.json name every active component with its settings.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from types import SimpleNamespace

import pytest

from pods import callbacks
from pods.components import checked, log_summary, summary
from pods.config import ConfigError, OptimConfig
from pods.data.prompts import PromptSet
from pods.data.tasks import DataReport
from pods.reward import limit
from pods.run_state import RunState
from pods.tracking import write_run_info
from pods.train import run
from pods.update.optim import warn_long_warmup
from tests.conftest import SMOKE

# --- the training data ---------------------------------------------------------------------------------------


def write_rows(path, rows: range, answer=lambda i: i + 1) -> None:
    path.write_text(
        "".join(json.dumps({"question": f"{i} + 1 =", "answer": str(answer(i))}) + "\n" for i in rows)
    )


def test_a_resume_on_edited_data_is_refused_unless_allowed(make_cfg, tmp_path):
    train, evals, d = tmp_path / "train.jsonl", tmp_path / "eval.jsonl", tmp_path / "run"
    write_rows(train, range(64))
    write_rows(evals, range(100, 116))
    data = ["dataset=arithmetic_local", f"dataset.task={train}", f"dataset.eval_task={evals}"]
    over = [*SMOKE, *data, "selector.n=4", "selector.m=2", "eval.at_start=false", "eval.at_end=false"]
    run(make_cfg(*over, "max_steps=1", run_dir=d))
    write_rows(train, range(64), answer=lambda i: i + 2)  # every answer changed
    with pytest.raises(ConfigError) as e:
        run(make_cfg(*over, "max_steps=2", "resume=true", run_dir=d))
    msg = str(e.value)
    assert msg.startswith("resume=true: the training data (64 rows, sha256 ") and "\n" not in msg, msg
    assert "differs from the data checkpoint step_0000001 trained on (64 rows" in msg
    assert "resume_allow_dataset_change=true" in msg
    run(make_cfg(*over, "max_steps=2", "resume=true", "resume_allow_dataset_change=true", run_dir=d))
    resumed = [json.loads(x) for x in (d / "history.jsonl").read_text().splitlines()][-1]
    assert resumed["event"] == "resume" and resumed["step"] == 1
    old, new = resumed["changed"]["train_data"]
    assert old.startswith("64 rows, sha256 ") and new.startswith("64 rows, sha256 ") and old != new


def trainer_with(prompts: list[str], allow: bool = False) -> SimpleNamespace:
    """What RunState._same_data reads of a Trainer: its train set and settings."""
    ps = PromptSet(prompts, ["1"] * len(prompts), [{}] * len(prompts), DataReport("train"))
    settings = SimpleNamespace(resume_allow_dataset_change=allow, dataset=SimpleNamespace(task="t.jsonl"))
    return SimpleNamespace(train_set=ps, settings=settings)


def test_the_data_digest_is_compared_and_a_checkpoint_without_one_warns(caplog):
    t = trainer_with(["a", "b"])
    assert RunState._same_data(t, None) == {} and t.train_digest["rows"] == 2
    plan = {"path": "/x/step_0000004", "train_data": dict(t.train_digest)}
    assert RunState._same_data(trainer_with(["a", "b"]), plan) == {}
    assert RunState._same_data(trainer_with(["a", "c"], allow=True), plan)["train_data"][0].startswith(
        "2 rows"
    )
    with pytest.raises(ConfigError, match="resume_allow_dataset_change"):
        RunState._same_data(trainer_with(["a"]), plan)
    with caplog.at_level(logging.WARNING, logger="pods"):
        assert RunState._same_data(trainer_with(["a"]), {"path": "/x/step_0000004", "train_data": None}) == {}
    assert "checkpoint step_0000004 records no digest of its training data" in caplog.text


# --- settings that make a run train on less than it seems --------------------------------------------------


def test_a_warmup_longer_than_the_run_is_warned_with_the_numbers(caplog):
    o = OptimConfig(lr=1e-3, weight_decay=0.0, grad_clip=1.0, warmup_steps=100)
    with caplog.at_level(logging.WARNING, logger="pods"):
        msg = warn_long_warmup(o, max_steps=4, mu=1, max_train_time=0.0)
    assert msg.startswith("optim.warmup_steps=100 is longer than the run's 4 optimizer steps (max_steps=4 x")
    assert "the lr reaches only 3% of optim.lr=0.001" in msg and caplog.text.count("warmup_steps=100") == 1
    assert warn_long_warmup(o, max_steps=100, mu=1, max_train_time=0.0) is None
    assert warn_long_warmup(o, max_steps=4, mu=1, max_train_time=600.0) is None  # the clock bounds it


def test_steps_that_train_on_nothing_for_zero_variance_are_warned_once(caplog):
    w = callbacks.ZeroVarianceWarning(temperature=0.05, n=8)
    trainer = SimpleNamespace(step=0)
    skipped = {"update/skipped": 1.0, "rollout/rollouts": 16.0}
    records = [
        skipped,
        {"update/skipped": 1.0, "rollout/rollouts": 0.0},
        skipped,
        skipped,
    ]  # 2nd: no rollouts
    records += [{"update/skipped": 0.0, "rollout/rollouts": 16.0}] + [skipped] * 5
    with caplog.at_level(logging.WARNING, logger="pods"):
        for rec in records:
            trainer.step += 1
            w.on_step_end(trainer, rec)
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 1, warned
    assert warned[0].startswith("steps 6-8 trained on nothing: in each, every group's selector.n=8 rollouts")
    assert "48 rollouts in all). At sampling.temperature=0.05" in warned[0]


def test_a_run_says_both_once(make_cfg, tmp_path, caplog):
    over = [
        "sampling.temperature=0.0001",
        "optim.warmup_steps=50",
        "eval.at_start=false",
        "eval.at_end=false",
    ]
    with caplog.at_level(logging.WARNING, logger="pods"):  # near-greedy: the n rollouts of a prompt agree
        run(make_cfg(*SMOKE, "selector.n=4", "selector.m=2", *over))
    warned = [r.getMessage() for r in caplog.records if r.name == "pods"]
    assert (
        sum(m.startswith("optim.warmup_steps=50 is longer than the run's 3 optimizer steps") for m in warned)
        == 1
    )
    zero = [m for m in warned if "trained on nothing" in m]
    assert len(zero) == 1 and zero[0].startswith("steps 1-3 trained on nothing"), warned
    assert "sampling.temperature=0.0001" in zero[0]


class TwoLines(logging.Handler):
    """Sets `seen` once two waiting lines were logged: the slow reward returns then, however late a loaded
    machine schedules the watcher thread (a fixed sleep would count its lines by the machine's speed)."""

    def __init__(self):
        super().__init__()
        self.count, self.seen = 0, threading.Event()

    def emit(self, record):
        self.count += 1
        if self.count >= 2:
            self.seen.set()


TWO_LINES = TwoLines()


def slow_reward(completions, answers, **kw):
    assert TWO_LINES.seen.wait(30), "the watcher logged fewer than two lines in 30 s"
    return [0.0] * len(completions)


def test_a_waiting_plugin_reward_names_itself_every_interval(monkeypatch, caplog):
    monkeypatch.setattr(limit, "WAIT_LINE_S", 0.1)
    pods_log = logging.getLogger("pods")
    pods_log.addHandler(TWO_LINES)
    try:
        with caplog.at_level(logging.WARNING, logger="pods"):
            assert limit.call_with_limit("slow", slow_reward, 60.0, ["x"], ["1"]) == [0.0]
    finally:
        pods_log.removeHandler(TWO_LINES)
    lines = [r.getMessage() for r in caplog.records]
    assert 2 <= len(lines) <= 4, lines
    assert lines[0].startswith(
        f"reward 'slow' ({__name__}.slow_reward) still running after 0 s (the run stops at "
    )
    assert "reward.plugin_timeout_s=60 s" in lines[0]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="pods"):
        limit.call_with_limit("fast", lambda c, a: [1.0], 5.0, ["x"], ["1"])
        time.sleep(0.15)
    assert not caplog.records  # a call that returned says nothing, then or later


# --- what runs, named --------------------------------------------------------------------------------------


def test_run_info_and_the_log_name_every_active_component(make_cfg, tmp_path, caplog):
    c = checked(make_cfg(*SMOKE, "prefilter=greso", "dynamic_sampling.enabled=true", "loss=dapo"))
    info = write_run_info(c, tmp_path, {}, 1, 1, True)
    comp = json.loads((tmp_path / "run_info.json").read_text())["components"]
    assert comp == info["components"] == summary(c)
    assert list(comp) == [
        "prefilter",
        "rollout",
        "reward",
        "dynamic_sampling",
        "selector",
        "advantage",
        "loss",
    ]
    assert comp["prefilter"]["name"] == "greso" and "p_init" in comp["prefilter"]
    assert comp["selector"] == {"name": "max_variance", "n": 8, "m": 4}
    assert comp["dynamic_sampling"]["enabled"] is True and comp["loss"]["name"] == "dapo"
    assert comp["rollout"]["name"] == "hf" and comp["advantage"]["name"] == "grpo"
    with caplog.at_level(logging.INFO, logger="pods"):
        log_summary(comp)
    lines = [r.getMessage() for r in caplog.records]
    assert (
        lines[0].startswith("prefilter: greso (p_init=") and lines[4] == "selector: max_variance (n=8, m=4)"
    )
    assert lines[3].startswith("dynamic_sampling: on (oversample=")
