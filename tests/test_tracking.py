"""metrics.jsonl truncation on resume, W&B that goes offline instead of failing, a progress bar that
does not flood a log file."""

import io
import json
import time

from pods.config import LoggerConfig
from pods.tracking import MetricsLogger, Progress, read_metrics, truncate_metrics, wandb_mode


def test_truncate_drops_records_after_the_checkpoint_and_torn_lines(tmp_path):
    p = tmp_path / "metrics.jsonl"
    p.write_text(
        "".join(json.dumps({"kind": "train", "step": s}) + "\n" for s in range(1, 6)) + '{"kind": "tr'
    )
    truncate_metrics(p, 3)
    assert [r["step"] for r in read_metrics(p)] == [1, 2, 3]
    truncate_metrics(p, -1)  # resume=true with no checkpoint: start the file over
    assert read_metrics(p) == []


def test_wandb_auto_mode_is_offline_without_credentials(monkeypatch, tmp_path):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "none"))
    monkeypatch.setenv("HOME", str(tmp_path))
    assert wandb_mode("auto") == "offline"
    assert wandb_mode("disabled") == "disabled"


def test_wandb_logger_offline_writes_metrics_and_run_files(monkeypatch, tmp_path):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    logger_cfg = LoggerConfig(backend="wandb", project="pods-test", mode="auto")
    info = {"name": "t-s0", "wandb_id": "abc123test", "group": None}
    logger = MetricsLogger(logger_cfg, tmp_path, info, {"logger": {"backend": "wandb"}, "seed": 0})
    logger.log({"kind": "eval", "step": 0, "train_time": 0.0, "eval/accuracy": 0.5, "bad": float("nan")})
    logger.finish()
    rec = read_metrics(tmp_path / "metrics.jsonl")[0]
    assert (
        rec["eval/accuracy"] == 0.5 and rec["bad"] is None
    )  # non-finite values become null, not invalid JSON
    assert logger.wandb is not None and list((tmp_path / "wandb").glob("offline-run-*"))


class _FakeRun:
    def __init__(self):
        self.defined = []

    def define_metric(self, name, step_metric=None):
        self.defined.append((name, step_metric))


def test_every_logged_metric_is_bound_to_the_training_clock():
    from fnmatch import fnmatchcase

    from pods.tracking import STEP_METRIC, bind_metrics

    run = _FakeRun()
    bind_metrics(run)
    assert run.defined[0] == (STEP_METRIC, None)  # the clock itself is the x axis
    globs = [name for name, step in run.defined if step == STEP_METRIC]
    # namespaces a training run logs (metrics.jsonl), not only eval/* and train/*
    logged = ["eval/accuracy", "train/step", "reward/mean", "timing/step", "selector/kept_reward_std"]
    logged += ["prefilter/skip_rate", "rollout/tokens", "update/loss", "counters/prompts", "rollouts"]
    assert all(any(fnmatchcase(key, g) for g in globs) for key in logged)


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _redraws(file, steps: int, pause: float = 0.0, max_train_time: float = 0) -> str:
    bar = Progress(steps, max_train_time, clock=0.0, step=0, name="run", file=file)
    for step in range(1, steps + 1):
        bar.advance(step, clock=step * 0.5, reward=0.25)
        time.sleep(pause)
    bar.close()
    return file.getvalue()


def test_progress_to_a_log_file_redraws_at_most_every_half_minute():
    out = _redraws(io.StringIO(), steps=2000)
    assert out.count("\r") <= 3, out.count("\r")  # opened, closed: not one line per step
    assert "2000/2000" in out and "reward=0.250" in out  # the final state still reaches the log


def test_progress_in_a_terminal_keeps_redrawing():
    tty, log = _redraws(_Terminal(), steps=4, pause=0.15), _redraws(io.StringIO(), steps=4, pause=0.15)
    assert tty.count("\r") >= 4 > log.count("\r")


def test_progress_of_a_time_bounded_run_counts_clock_seconds():
    last = _redraws(io.StringIO(), steps=40, max_train_time=20).split("\r")[-1]  # 0.5 s a step, 20 s budget
    assert "20/20" in last and "step=40" in last
