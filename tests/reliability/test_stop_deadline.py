"""A stop arrives before the scheduler's SIGKILL (issue 53, class 1): a signal in rollout, reward, eval or model
loading abandons that work at once and saves the state as of the last completed step; one in the update lets
it finish; the resume is bitwise the uninterrupted run. A reward that hangs is cut short by the stop and, with
no signal, by reward.plugin_timeout_s; a run that cannot stop in time is ended by the deadline watchdog; a
second SIGTERM exits at once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from pods import checkpoint as ckpt
from pods import signals
from pods.callbacks import Callback
from pods.errors import RunError
from pods.reward import register_reward
from pods.reward.limit import call_with_limit
from pods.train import run
from tests.conftest import SMOKE, compose_cfg
from tests.reliability.test_data_loss import _default_dispositions, _records, assert_same_run

ROOT = Path(__file__).resolve().parents[2]
# 4 steps, evals at 0, 2 and 4, only a signal (or the end) saves; a weight-0 probe reward that can hang
COMMON = [
    *SMOKE,
    "max_steps=4",
    "checkpoint.every_steps=0",
    "eval.every_steps=2",
    "+reward.weights.stop_probe=0.0",
]
PROBE = {"armed": False, "signalled_at": 0.0}


@register_reward("stop_probe")
def stop_probe(completions, answers, **kw):
    """Armed: a SIGTERM arrives 0.1 s into a hang (from outside, as a scheduler's), and the call never ends."""
    if PROBE["armed"]:
        PROBE["armed"] = False
        hang(0.1)
    return [0.0] * len(completions)


def hang(after_s: float) -> None:
    threading.Timer(after_s, _sigterm).start()
    time.sleep(600)


def _sigterm() -> None:
    PROBE["signalled_at"] = time.monotonic()
    os.kill(os.getpid(), signal.SIGTERM)


class SignalIn(Callback):
    """Sends SIGTERM inside `phase` of step `at` (eval: the eval after step `at`)."""

    def __init__(self, phase: str, at: int):
        self.phase, self.at = phase, at

    def on_step_start(self, trainer) -> None:
        if trainer.step + 1 != self.at:
            return
        if self.phase == "reward":
            PROBE["armed"] = True
        elif self.phase in ("rollout", "update"):
            stage = trainer.stages.rollout if self.phase == "rollout" else trainer
            real = stage.generate if self.phase == "rollout" else trainer.update

            def signalled(*a, **k):
                _sigterm()  # the handler runs now, inside the phase
                return real(*a, **k)

            setattr(stage, "generate" if self.phase == "rollout" else "update", signalled)

    def on_step_end(self, trainer, record) -> None:
        if self.phase == "eval" and trainer.step == self.at:
            PROBE["armed"] = True  # the eval's grading calls the probe


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    d = tmp_path_factory.mktemp("finished") / "run"
    run(compose_cfg(COMMON, d))
    return d


@pytest.fixture
def signals_at_default():
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    _default_dispositions()
    yield
    PROBE["armed"] = False
    for s, h in saved.items():
        signal.signal(s, h)


@pytest.mark.parametrize(
    "phase, at, saved, trained",
    [("rollout", 3, 2, [1, 2]), ("reward", 2, 1, [1]), ("eval", 2, 2, [1, 2]), ("update", 3, 3, [1, 2, 3])],
)
def test_a_signal_mid_phase_stops_at_once_and_the_resume_is_bitwise(
    phase, at, saved, trained, finished, tmp_path, signals_at_default
):
    """rollout/reward: the step is abandoned (the checkpoint is the step before); eval: its step is saved and
    the eval pending; update: finished and saved."""
    d = tmp_path / "run"
    with pytest.raises(SystemExit) as e:
        run(compose_cfg(COMMON, d), callbacks=[SignalIn(phase, at)])
    took = time.monotonic() - PROBE["signalled_at"]
    assert e.value.code == 143 and took < 10, took  # a hang of 600 s: abandoned, not waited for
    root = d / "checkpoints"
    assert (
        ckpt.checkpoints(root) == [root / f"step_{saved:07d}"]
        and ckpt.verify(root / f"step_{saved:07d}") is None
    )
    assert [s for k, s in _records(d) if k == "train"] == trained  # an abandoned step left no record
    assert phase != "eval" or ("eval", at) not in _records(d)  # the eval cut short wrote nothing
    assert ckpt.read_meta(root / f"step_{saved:07d}").get("eval_pending", False) == (phase == "eval")
    run(compose_cfg([*COMMON, "resume=true"], d))
    assert_same_run(finished, d)


def test_a_signal_during_start_up_exits_at_once_with_nothing_to_save(
    tmp_path, monkeypatch, caplog, signals_at_default
):
    import pods.trainer

    real = pods.trainer.load_policy

    def load(*a, **k):
        _sigterm()
        return real(*a, **k)

    monkeypatch.setattr(pods.trainer, "load_policy", load)
    d = tmp_path / "run"
    with pytest.raises(SystemExit) as e:
        run(compose_cfg(COMMON, d))
    assert e.value.code == 143 and not (d / "metrics.jsonl").exists()
    said = [r.getMessage() for r in caplog.records if "during start-up" in r.getMessage()]
    assert (
        len(said) == 1 and "newest checkpoint: no checkpoint" in said[0] and f"hydra.run.dir={d}" in said[0]
    )


def sleeps(completions, answers):
    time.sleep(600)


def test_a_plugin_reward_that_hangs_is_cut_short_naming_it():
    before, t0 = signal.getsignal(signal.SIGALRM), time.monotonic()
    with pytest.raises(
        RunError, match=r"reward 'slow' \(.*test_stop_deadline.sleeps\) did not return within .*=0.3 s"
    ):
        call_with_limit("slow", sleeps, 0.3, ["x"], ["1"])
    assert time.monotonic() - t0 < 5
    assert signal.getsignal(signal.SIGALRM) is before and signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    assert call_with_limit("fast", lambda x: x + 1, 0.3, 1) == 2  # a call within the limit: its value


def test_the_same_signal_again_exits_at_once_but_not_one_delivery_seen_twice(monkeypatch, signals_at_default):
    stop, exits = signals.StopOnSignal(), []
    monkeypatch.setattr(stop, "_exit_now", lambda signum, what: exits.append((signum, what)))
    try:
        stop._note(signal.SIGTERM, None)
        stop._note(signal.SIGTERM, None)  # within REPEAT_S: the same delivery (srun and Slurm both send it)
        assert exits == []
        stop.first_at -= signals.REPEAT_S
        stop._note(signal.SIGTERM, None)
        assert exits == [(signal.SIGTERM, "second SIGTERM: exiting now without saving")]
    finally:
        stop.uninstall()


WATCHDOG = """
import sys, time
from pods.reward import register_reward
from pods.train import run
from tests.conftest import compose_cfg

@register_reward("stubborn")
def stubborn(completions, answers, **kw):  # swallows every exception, the stop's too: only the watchdog ends it
    said = False
    while True:
        try:  # "hanging" from inside: a signal right after it lands here too
            if not said:
                said = True
                print("hanging", flush=True)
            time.sleep(600)
        except BaseException:
            pass

run(compose_cfg(sys.argv[2:], sys.argv[1]))
"""


@pytest.mark.slow
def test_the_deadline_watchdog_ends_a_run_that_cannot_stop(tmp_path):
    d = tmp_path / "run"
    over = [
        *SMOKE,
        "+reward.weights.stubborn=0.0",
        "checkpoint.stop_deadline_s=1",
        "reward.plugin_timeout_s=0",
    ]
    proc = subprocess.Popen(
        [sys.executable, "-c", WATCHDOG, str(d), *over], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, preexec_fn=_default_dispositions,
    )  # fmt: skip
    assert proc.stdout.readline() == "hanging\n"  # in the reward's start-up call (pods/reward/preflight.py)
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    err = proc.communicate(timeout=120)[1]
    assert proc.returncode == 143 and time.monotonic() - t0 < 10, err[-2000:]
    assert "pods: SIGTERM: the run had not stopped 1 s after the signal (checkpoint.stop_deadline_s)" in err
