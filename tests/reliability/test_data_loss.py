"""No run loses data (issue 42), by class of fault:

1. resume=true never destroys: with no usable checkpoint (none, an empty checkpoints/, every one damaged) it
   refuses on a run dir that holds records, naming them and how to start over on purpose;
2. Ctrl-C and SIGTERM save at the next step boundary, name the checkpoint and the resume command, exit 130 /
   143, and the resume is bitwise; a second Ctrl-C exits at once, a save under way never becomes a checkpoint;
3. a resume refuses a changed experiment, listing the keys; the keys that may change (pods.history.FREE_KEYS)
   take effect and go to history.jsonl, config.yaml stays;
4. one run per run dir: a second process is refused naming the holder, a SIGKILLed holder never blocks;
5. one line, exit 2, before the model loads: unknown `+key`s, broken model dirs, plugins whose import raises,
   meta.json without its fields (falls back); an over-long prompt is dropped without being tokenized.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import torch

from pods import checkpoint as ckpt
from pods import history, runlock, signals
from pods.callbacks import Callback
from pods.config import TrainConfig, validate
from pods.errors import ConfigError
from pods.timing import Every
from pods.tracking import read_metrics
from pods.train import check_run_dir, load_plugins, preflight, run
from tests.conftest import SAME_RUN_KEYS, SMOKE, compose_cfg

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "pods" / "assets" / "tiny"
# 4 smoke steps, a checkpoint after every step (the last 3 kept), evals at steps 0, 2 and 4
COMMON = [*SMOKE, "max_steps=4", "checkpoint.every_steps=1", "checkpoint.keep_last=3", "eval.every_steps=2"]
NO_PERIODIC = [*COMMON, "checkpoint.every_steps=0"]  # only a signal (or the end) saves


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """The uninterrupted run every other run here is compared with."""
    d = tmp_path_factory.mktemp("finished") / "run"
    run(compose_cfg(COMMON, d))
    return d


@pytest.fixture
def no_model(monkeypatch):
    """Fail the test if the model's weights are loaded: refusals come before the heavy work."""
    import pods.trainer

    monkeypatch.setattr(pods.trainer, "load_policy", lambda *a, **k: pytest.fail("the model was loaded"))


def _copy(src: Path, tmp_path: Path) -> Path:
    d = tmp_path / "run"
    shutil.copytree(src, d)
    return d


def _records(d: Path) -> list[tuple[str, int]]:
    return [(r["kind"], r["step"]) for r in read_metrics(d / "metrics.jsonl")]


def _files(d: Path, names=("metrics.jsonl", "config.yaml", "run_info.json")) -> dict:
    return {n: (d / n).read_bytes() for n in names if (d / n).exists()}


def assert_same_run(ref: Path, d: Path) -> None:
    """Every record once, the same as the reference's; final weights bitwise equal."""
    assert _records(d) == _records(ref)
    for x, y in zip(read_metrics(ref / "metrics.jsonl"), read_metrics(d / "metrics.jsonl")):
        assert all(x.get(k) == y.get(k) for k in (*SAME_RUN_KEYS, "eval/accuracy")), x["step"]
    wa, wb = (ckpt.read_weights(ckpt.latest_checkpoint(r / "checkpoints")) for r in (ref, d))
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)


def _events(d: Path) -> list[dict]:
    return [json.loads(x) for x in (d / history.HISTORY).read_text().splitlines()]


# --- 1. resume never destroys --------------------------------------------------------------------------


def _no_checkpoints(d: Path) -> None:
    shutil.rmtree(d / "checkpoints")


def _empty_checkpoints(d: Path) -> None:
    shutil.rmtree(d / "checkpoints")
    (d / "checkpoints").mkdir()


def _every_checkpoint_truncated(d: Path) -> None:
    for c in ckpt.checkpoints(d / "checkpoints"):
        f = c / "trainer_state.pt"
        f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])


def _every_meta_emptied(d: Path) -> None:
    for c in ckpt.checkpoints(d / "checkpoints"):
        (c / "meta.json").write_text("{}")


def _killed_before_its_first_save(d: Path) -> None:
    shutil.rmtree(d / "checkpoints")
    lines = (d / "metrics.jsonl").read_text().splitlines(keepends=True)
    (d / "metrics.jsonl").write_text("".join(lines[:2]) + lines[2][:30])  # eval 0, train 1, a torn line


@pytest.mark.parametrize(
    "damage",
    [_no_checkpoints, _empty_checkpoints, _every_checkpoint_truncated, _every_meta_emptied,
     _killed_before_its_first_save],
)  # fmt: skip
def test_resume_with_no_usable_checkpoint_refuses_and_keeps_every_record(
    damage, finished, make_cfg, tmp_path, no_model
):
    d = _copy(finished, tmp_path)
    damage(d)
    before = _files(d)
    records = sum(1 for x in (d / "metrics.jsonl").read_text().splitlines() if x.endswith("}"))
    with pytest.raises(ConfigError) as e:
        run(make_cfg(*COMMON, "resume=true", run_dir=d))
    msg = str(e.value)
    assert "\n" not in msg and f"metrics.jsonl holds {records} records" in msg, msg
    assert f"move {d} aside" in msg and "run without resume=true" in msg, msg
    assert _files(d) == before  # not a byte of the records changed


def test_resume_with_nothing_recorded_yet_starts_the_run(make_cfg, tmp_path):
    d = tmp_path / "run"
    d.mkdir()
    (d / "metrics.jsonl").write_text('{"kind": "eval", "st')  # a kill tore the first line: no record yet
    run(make_cfg(*COMMON, "max_steps=2", "resume=true", run_dir=d))
    assert _records(d) == [("eval", 0), ("train", 1), ("train", 2), ("eval", 2)]


# --- 2. Ctrl-C and SIGTERM end a run with a checkpoint ------------------------------------------------


class SignalAt(Callback):
    """Sends this process a signal once step `at` has ended (as a terminal or a scheduler would)."""

    def __init__(self, signum: int, at: int):
        self.signum, self.at = signum, at

    def on_step_end(self, trainer, record) -> None:
        if trainer.step == self.at:
            os.kill(os.getpid(), self.signum)


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _default_dispositions() -> None:
    """Each stop signal at its default. The suite may be started with SIGHUP ignored (nohup) or SIGINT ignored (a
    script's background job), which pods rightly leaves alone (test below); the tests of the handler itself must
    not depend on how the suite was started."""
    for s in STOP_SIGNALS:
        signal.signal(s, signal.default_int_handler if s == signal.SIGINT else signal.SIG_DFL)


@pytest.fixture
def signals_at_default():
    saved = {s: signal.getsignal(s) for s in STOP_SIGNALS}
    _default_dispositions()
    yield
    for s, h in saved.items():
        signal.signal(s, h)


@pytest.mark.parametrize(
    "signum, at", [(signal.SIGINT, 2), (signal.SIGTERM, 1), (signal.SIGHUP, 3), (signal.SIGINT, 4)]
)
def test_a_signal_saves_at_the_next_step_boundary_and_the_resume_is_bitwise(
    signum, at, finished, make_cfg, tmp_path, caplog, signals_at_default
):
    """At step 4 (the last) the loop ends before the next step: the save comes before the final eval."""
    d = tmp_path / "run"
    with pytest.raises(SystemExit) as e:
        run(make_cfg(*NO_PERIODIC, run_dir=d), callbacks=[SignalAt(signum, at)])
    assert e.value.code == 128 + signum  # 130 for SIGINT, 143 for SIGTERM
    name = signal.Signals(signum).name
    step = d / "checkpoints" / f"step_{at:07d}"
    assert ckpt.checkpoints(d / "checkpoints") == [step] and ckpt.verify(step) is None
    assert [s for k, s in _records(d) if k == "train"] == list(range(1, at + 1))  # no step after the signal
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith(f"{name} at step")]
    assert lines == [f"{name} at step {at}: checkpoint {step}; resume with: python -m pods.train <your "
                     f"overrides> resume=true hydra.run.dir={d}"]  # fmt: skip
    assert _events(d)[-1] | {"time": 0} == {
        "event": "stop", "signal": name, "step": at, "checkpoint": str(step), "time": 0,
        "host": socket.gethostname(), "pid": os.getpid(),
    }  # fmt: skip
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # the run's handlers are gone
    run(make_cfg(*NO_PERIODIC, "resume=true", run_dir=d))
    assert_same_run(finished, d)


def _wait_for(cond, proc, what: str, limit_s: float = 300) -> None:
    """Poll until `cond()`; a safety net only: the run's own progress, not a fixed wait, decides."""
    deadline = time.monotonic() + limit_s
    while not cond():
        assert proc.poll() is None, f"the run ended (exit {proc.returncode}) before {what}"
        assert time.monotonic() < deadline, f"no {what} within {limit_s} s"
        time.sleep(0.02)


def _trained(d: Path) -> int:
    try:
        text = (d / "metrics.jsonl").read_text()
    except FileNotFoundError:
        return 0
    return sum(1 for x in text.splitlines(keepends=True) if x.endswith("\n") and '"kind": "train"' in x)


def test_sigterm_from_outside_ends_the_command_line_run_and_its_printed_command_resumes_it(tmp_path):
    d = tmp_path / "run"
    args = [*SMOKE, "max_steps=8", "checkpoint.every_steps=0"]  # the signal lands after step 1, before 8
    proc = subprocess.Popen(
        [sys.executable, "-m", "pods.train", *args, f"hydra.run.dir={d}"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    _wait_for(lambda: _trained(d) >= 1, proc, "train record")
    proc.send_signal(signal.SIGTERM)
    out = proc.communicate(timeout=300)[0]
    assert proc.returncode == 143, out[-3000:]
    said = [x for x in out.splitlines() if "SIGTERM at step" in x]
    assert len(said) == 1, out[-3000:]
    at = int(said[0].split("SIGTERM at step ")[1].split(":")[0])
    assert 1 <= at < 8 and f"checkpoint {d}/checkpoints/step_{at:07d}; resume with: " in said[0]
    assert ckpt.checkpoints(d / "checkpoints") == [d / "checkpoints" / f"step_{at:07d}"]
    command = shlex.split(said[0].split("resume with: ")[1])
    assert command[:3] == ["python", "-m", "pods.train"] and command[-2:] == [
        "resume=true",
        f"hydra.run.dir={d}",
    ]
    done = subprocess.run(
        [sys.executable, *command[1:]], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert [s for k, s in _records(d) if k == "train"] == list(range(1, 9))
    assert [(e["event"], e["step"]) for e in _events(d)] == [("start", 0), ("stop", at), ("resume", at)]


SECOND_CTRL_C = """
import os, signal, sys
import pods.checkpoint as ck
from pods.callbacks import Callback
from pods.train import run
from tests.conftest import compose_cfg

run_dir, overrides = sys.argv[1], sys.argv[2:]
real_fsync = ck._fsync_dir

def fsync(path, files=True):  # the save the first Ctrl-C asked for, its files written, meta.json not yet
    real_fsync(path, files)
    if path.name == ".tmp_step_0000003":
        os.kill(os.getpid(), signal.SIGINT)  # the second Ctrl-C
        real_fsync(path, files)

class FirstCtrlC(Callback):
    def on_step_end(self, trainer, record):
        if trainer.step == 3:
            os.kill(os.getpid(), signal.SIGINT)

ck._fsync_dir = fsync
run(compose_cfg(overrides, run_dir), callbacks=[FirstCtrlC()])
"""


def test_a_second_ctrl_c_exits_at_once_and_leaves_no_torn_checkpoint(finished, make_cfg, tmp_path):
    d = tmp_path / "run"
    over = [*COMMON, "checkpoint.every_steps=2"]
    proc = subprocess.run(
        [sys.executable, "-c", SECOND_CTRL_C, str(d), *over], cwd=ROOT, capture_output=True, text=True,
        timeout=600, env={**os.environ, "PYTHONPATH": str(ROOT)}, preexec_fn=_default_dispositions,
    )  # fmt: skip
    assert proc.returncode == 130, proc.stderr[-3000:]
    root = d / "checkpoints"
    assert (
        f"second SIGINT: exiting now without saving; the newest checkpoint is {root / 'step_0000002'}"
        in proc.stderr
    )
    assert (root / ".tmp_step_0000003").is_dir()  # the exit landed inside the save ...
    assert ckpt.checkpoints(root) == [root / "step_0000002"]  # ... which never became a checkpoint
    assert ckpt.latest_checkpoint(root) == root / "step_0000002"
    run(make_cfg(*over, "resume=true", run_dir=d))
    assert_same_run(finished, d)
    assert not (root / ".tmp_step_0000003").exists()  # the next save cleared it


def test_only_a_second_ctrl_c_exits_at_once(monkeypatch):
    exits = []

    def fake_exit(code):
        exits.append(code)
        raise SystemExit(code)

    monkeypatch.setattr(os, "_exit", fake_exit)
    for first in (signal.SIGTERM, signal.SIGINT):
        stop = signals.StopOnSignal()
        try:
            stop._note(first, None)
            if first == signal.SIGTERM:
                stop._note(signal.SIGTERM, None)  # a repeated SIGTERM waits for the step boundary too
            assert exits == [] and stop.caught == first
            with pytest.raises(SystemExit):
                stop._note(signal.SIGINT, None)
            assert exits.pop() == 130
        finally:
            stop.uninstall()
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL


def test_a_signal_the_process_was_started_ignoring_stays_ignored():
    """nohup ignores SIGHUP, a script's background job SIGINT: the run must not take them back."""
    before = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        stop = signals.StopOnSignal()
        assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN and signal.SIGHUP not in stop.previous
        assert signal.getsignal(signal.SIGTERM) == stop._note
        stop.uninstall()
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
    finally:
        signal.signal(signal.SIGHUP, before)


def test_the_default_checkpoint_policy_saves_every_30_minutes_of_training_clock(make_cfg):
    c = validate(make_cfg()).checkpoint  # the default run
    assert (c.every_seconds, c.every_steps, c.save_final) == (1800.0, 0, True)


def test_a_changed_period_applies_from_the_restored_clock():
    """Eval and checkpoint periods may change on resume: the new grid, from the clock where the run stands."""
    old = Every(0, 100.0)
    assert old.due(1, 150.0) and old.next_time == 200.0
    state = old.state_dict()
    same, shorter, off = Every(0, 100.0), Every(0, 30.0), Every(0, 0.0)
    for e in (same, shorter, off):
        e.load_state_dict(state)
    assert same.next_time == 200.0
    assert not shorter.due(2, 155.0) and shorter.due(3, 181.0) and shorter.next_time == 210.0
    assert not off.due(2, 1e9)
    legacy = Every(0, 30.0)
    legacy.load_state_dict({"next_time": 200.0})  # a checkpoint of older pods: the saved grid
    assert legacy.next_time == 200.0


# --- 3. a changed experiment is refused -------------------------------------------------------------------


@pytest.mark.parametrize(
    "change, keys",
    [
        (["selector.n=16", "selector.m=8"], ["selector.n", "selector.m"]),
        (["optim.lr=2e-3"], ["optim.lr"]),
        (["seed=1"], ["seed"]),
        (["selector=random"], ["selector.name"]),
        (["reward.weights.accuracy=2.0"], ["reward.weights.accuracy"]),
        (["+reward.weights.brevity_typo=0.5"], ["reward.weights.brevity_typo"]),
        (["dataset.train_size=32"], ["dataset.train_size"]),
        (["model.max_completion_len=40"], ["model.max_completion_len"]),
        (["prefilter=greso"], ["prefilter.name"]),
        (["algo.epsilon=0.3", "max_steps=6"], ["algo.epsilon"]),
        (["eval.temperature=0.5"], ["eval.temperature"]),  # how evals are made defines them, unlike when
    ],
)
def test_a_changed_experiment_is_refused_listing_the_keys(
    change, keys, finished, make_cfg, tmp_path, no_model, monkeypatch
):
    d = _copy(finished, tmp_path)
    before = _files(d, ("metrics.jsonl", "config.yaml", "run_info.json", "history.jsonl"))
    if "brevity_typo" in change[0]:  # a reward the registry lacks would be refused earlier, by name
        from pods.reward import REWARDS

        monkeypatch.setitem(REWARDS, "brevity_typo", REWARDS["accuracy"])
    with pytest.raises(ConfigError) as e:
        run(make_cfg(*COMMON, *change, "resume=true", run_dir=d))
    msg = str(e.value)
    assert "\n" not in msg and "define the experiment" in msg and "step_0000004" in msg, msg
    named = msg.split("define the experiment: ")[1].split(". Resume with")[0]
    assert all(f"{k}=" in named for k in keys), msg
    assert "max_steps" not in named  # free, and listed as such
    assert _files(d, ("metrics.jsonl", "config.yaml", "run_info.json", "history.jsonl")) == before


def test_a_checkpoint_of_an_older_pods_is_compared_with_config_yaml(finished, make_cfg, tmp_path, no_model):
    d = _copy(finished, tmp_path)
    for c in ckpt.checkpoints(d / "checkpoints"):
        meta = json.loads((c / "meta.json").read_text())
        del meta["config"]
        (c / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(ConfigError, match=r"selector\.n=16 \(checkpoint: 8\)"):
        run(make_cfg(*COMMON, "selector.n=16", "resume=true", run_dir=d))


def test_keys_a_resume_may_change_take_effect_and_go_to_the_history(finished, make_cfg, tmp_path):
    d = _copy(finished, tmp_path)
    kept = _files(d, ("config.yaml", "run_info.json"))
    free = ["max_steps=6", "eval.every_steps=1", "checkpoint.every_steps=0", "logger.log_completions=0"]
    run(make_cfg(*COMMON, *free, "resume=true", run_dir=d))
    assert [s for k, s in _records(d) if k == "eval"] == [0, 2, 4, 5, 6]  # the new eval period
    root = d / "checkpoints"
    assert ckpt.checkpoints(root) == [root / "step_0000006", root / "step_0000004", root / "step_0000003"]
    assert _files(d, ("config.yaml", "run_info.json")) == kept  # the run's config as it started
    last = _events(d)[-1]
    assert (last["event"], last["step"]) == ("resume", 4)
    assert last["changed"] == {
        "max_steps": [4, 6], "eval.every_steps": [2, 1], "checkpoint.every_steps": [1, 0],
        "logger.log_completions": [2, 0],
    }  # fmt: skip


def test_every_key_a_resume_may_change_is_a_key_of_the_config():
    """A misspelt entry in FREE_KEYS would free nothing, silently; and no key that defines the run is free."""
    import dataclasses

    def has(cls, parts):
        f = {x.name: x for x in dataclasses.fields(cls)}.get(parts[0])
        if f is None:
            return False
        if len(parts) == 1:
            return True
        sub = f.default_factory() if f.default_factory is not dataclasses.MISSING else None
        return dataclasses.is_dataclass(sub) and has(type(sub), parts[1:])

    assert all(has(TrainConfig, k.split(".")) for k in history.FREE_KEYS)
    for key in ("seed", "selector.n", "optim.lr", "model.path", "dataset.task", "reward.weights.accuracy",
                "eval.temperature", "eval.num_samples", "algo.mu", "hardware.lora"):  # fmt: skip
        assert not history.is_free(key), key


# --- 4. one run per run dir -------------------------------------------------------------------------------

HOLD = "import sys; from pods import runlock; runlock.acquire(sys.argv[1]); print('held', flush=True); sys.stdin.read()"


def _holder(d: Path, env: dict | None = None) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(d)], cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        text=True, env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
    )  # fmt: skip
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_a_second_process_is_refused_naming_the_holder_and_a_sigkilled_holder_never_blocks(
    make_cfg, tmp_path
):
    d = tmp_path / "run"
    proc = _holder(d)
    try:
        for resume in ("false", "true"):  # resume=true skipped the run dir's checks before
            with pytest.raises(ConfigError) as e:
                preflight(make_cfg(*SMOKE, f"resume={resume}", run_dir=d))
            msg = str(e.value)
            assert "\n" not in msg and "is in use by another run" in msg
            assert f"pid {proc.pid} on {socket.gethostname()}, started 20" in msg, msg
    finally:
        proc.kill()  # SIGKILL: the kernel lets go of the lock
        proc.wait()
    runlock.acquire(d)
    assert runlock.held(d)
    runlock.release(d)


def test_other_ranks_of_a_run_take_no_lock(make_cfg, tmp_path, monkeypatch):
    d = tmp_path / "run"
    proc = _holder(d)  # rank 0 of the same run, as it were
    try:
        monkeypatch.setenv("RANK", "1")  # torchrun's rank 1
        monkeypatch.setenv("WORLD_SIZE", "2")
        check_run_dir(d, resume=False)
        assert not runlock.held(d)
        monkeypatch.delenv("RANK")  # Slurm's task 1, before pods.slurm.setup exports RANK
        monkeypatch.delenv("WORLD_SIZE")
        for k, v in {"SLURM_JOB_ID": "41", "SLURM_NTASKS": "2", "SLURM_PROCID": "1"}.items():
            monkeypatch.setenv(k, v)
        assert not runlock.main_process()
        monkeypatch.setenv("SLURM_PROCID", "0")
        assert runlock.main_process()
    finally:
        proc.kill()
        proc.wait()


def test_a_requeued_slurm_job_waits_for_its_previous_run_to_let_go(tmp_path, monkeypatch):
    d = tmp_path / "run"
    proc = _holder(d, {"SLURM_JOB_ID": "41"})  # the job's previous run, on its way out
    monkeypatch.setenv("SLURM_JOB_ID", "41")
    try:
        monkeypatch.setenv("SLURM_RESTART_COUNT", "0")  # not requeued: refused at once
        with pytest.raises(ConfigError, match="Slurm job 41"):
            runlock.acquire(d)
        monkeypatch.setenv("SLURM_RESTART_COUNT", "1")
        waited = []

        def sleep(s):  # the first retry: the previous run ends now
            waited.append(s)
            proc.kill()
            proc.wait()

        monkeypatch.setattr(runlock.time, "sleep", sleep)
        runlock.acquire(d)
        assert waited and runlock.held(d) and runlock.holder(d)["pid"] == os.getpid()
    finally:
        runlock.release(d)
        proc.kill()
        proc.wait()


def test_a_second_run_started_on_a_busy_run_dir_is_refused_and_the_first_is_unharmed(
    finished, make_cfg, tmp_path
):
    d = tmp_path / "run"
    second = {}

    class StartAnother(Callback):
        def on_step_end(self, trainer, record):
            if trainer.step == 2 and not second:
                cmd = [sys.executable, "-m", "pods.train", *COMMON, "seed=1", f"hydra.run.dir={d}"]
                second["proc"] = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)

    run(make_cfg(*COMMON, run_dir=d), callbacks=[StartAnother()])
    p = second["proc"]
    errors = [x for x in p.stderr.splitlines() if x.startswith("pods: error:")]
    assert p.returncode == 2 and len(errors) == 1 and "Traceback" not in p.stderr, p.stderr[-3000:]
    assert f"is in use by another run (pid {os.getpid()} on {socket.gethostname()}" in errors[0]
    assert not (d / ".hydra").exists()  # refused before Hydra wrote anything there
    assert_same_run(finished, d)


# --- 5. one line, exit 2, before heavy work ---------------------------------------------------------------


@pytest.mark.parametrize(
    "override, says",
    [
        ("+optim.lrr=1", "optim.lrr is not a key of optim; did you mean optim.lr?"),
        ("++optim.lrr=1", "optim.lrr is not a key of optim; did you mean optim.lr?"),
        ("+model.lora.rr=4", "model.lora.rr is not a key of model.lora; did you mean model.lora.r?"),
        ("+eval.every_step=5", "eval.every_step is not a key of eval; did you mean eval.every_steps?"),
        ("+seedd=3", "seedd is not a key of the config; did you mean seed?"),
        ("+checkpoint.every.steps=3", "checkpoint.every is not a key of checkpoint"),
    ],
)
def test_an_unknown_key_added_with_plus_is_one_line(override, says, make_cfg):
    with pytest.raises(ConfigError) as e:
        preflight(make_cfg(*SMOKE, override))
    assert says in str(e.value) and "\n" not in str(e.value), str(e.value)


def _truncate(f: Path, keep: int) -> None:
    f.write_bytes(f.read_bytes()[:keep])


def _sharded(d: Path) -> None:  # an index naming a shard that is not there
    (d / "model.safetensors").unlink()
    (d / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"lm_head.weight": "model-00001-of-00002.safetensors"}})
    )


def _bin_truncated(d: Path) -> None:
    from safetensors.torch import load_file

    torch.save(load_file(d / "model.safetensors"), d / "pytorch_model.bin")
    (d / "model.safetensors").unlink()
    _truncate(d / "pytorch_model.bin", 4000)


@pytest.mark.parametrize(
    "damage, says",
    [
        (lambda d: (d / "model.safetensors").unlink(), "no weights file"),
        (lambda d: _truncate(d / "model.safetensors", 1_000_000), "model.safetensors is 1000000 bytes"),
        (
            lambda d: _truncate(d / "model.safetensors", (d / "model.safetensors").stat().st_size - 1),
            "truncated",
        ),
        (lambda d: _truncate(d / "model.safetensors", 100), "model.safetensors"),
        (lambda d: (d / "model.safetensors").write_bytes(b"\0" * 64), "model.safetensors"),
        (_sharded, "model-00001-of-00002.safetensors is missing"),
        (_bin_truncated, "pytorch_model.bin is truncated"),
        (lambda d: _truncate(d / "config.json", 100), "config.json is not valid JSON"),
        (lambda d: (d / "config.json").write_text("{}"), "config.json cannot be read by transformers"),
        (lambda d: _truncate(d / "tokenizer.json", 500), "tokenizer.json is not valid JSON"),
    ],
)
def test_a_broken_model_dir_is_one_line_before_the_model_loads(damage, says, make_cfg, tmp_path):
    d = tmp_path / "model"
    shutil.copytree(TINY, d)
    damage(d)
    with pytest.raises(ConfigError) as e:
        preflight(make_cfg(*SMOKE, f"model.path={d}"))
    msg = str(e.value)
    assert msg.startswith(f"model.path='{d}': ") and says in msg and "\n" not in msg, msg


def test_an_intact_model_dir_passes_its_checks(tmp_path):
    from safetensors.torch import load_file

    from pods.models import local_model_problem

    assert local_model_problem(TINY) is None
    d = tmp_path / "model"
    shutil.copytree(TINY, d)
    torch.save(load_file(d / "model.safetensors"), d / "pytorch_model.bin")
    (d / "model.safetensors").unlink()
    assert local_model_problem(d) is None  # the same weights as a whole torch file


BAD_PLUGINS = {
    "raises": "raise RuntimeError('the plugin is broken')",
    "divides_by_zero": "x = 1 / 0",
    "syntax": "def f(:\n    pass",
    "exits": "import sys\nsys.exit(3)",
    "missing_dependency": "import no_such_dependency_of_the_plugin",
    "key_error": "{}['k']",
    "selector_taken": "from pods.selector import register_selector\n\n@register_selector('max_variance')\n"
    "def mine(rewards, m, generator=None):\n    return rewards",
    "reward_taken": "from pods.reward import register_reward\n\n@register_reward('accuracy')\n"
    "def mine(completions, answers, **kw):\n    return [0.0] * len(completions)",
    "prefilter_taken": "from pods.prefilter import register_prefilter\n\n@register_prefilter('greso')\nclass Mine:\n    pass",
}


@pytest.mark.parametrize("kind", list(BAD_PLUGINS))
def test_a_plugin_whose_import_raises_anything_is_one_line(kind, tmp_path, monkeypatch):
    name = f"bad_plugin_{kind}_{uuid.uuid4().hex[:6]}"
    (tmp_path / f"{name}.py").write_text(BAD_PLUGINS[kind] + "\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        with pytest.raises(ConfigError) as e:
            load_plugins([name])
    finally:
        sys.modules.pop(name, None)
    msg = str(e.value)
    assert f"plugins: {name!r} failed to import: " in msg and "\n" not in msg, msg
    assert f"{name}.py:" in msg, msg  # the plugin's line that raised
    if kind.endswith("_taken"):
        assert "is already registered (by pods." in msg and (
            f"{name}.mine" in msg or f"{name}.Mine" in msg
        ), msg


def test_meta_json_that_parses_but_lacks_its_fields_is_damage(finished, tmp_path):
    d = _copy(finished, tmp_path)
    c = d / "checkpoints" / "step_0000004"
    good = json.loads((c / "meta.json").read_text())
    assert ckpt.verify(c) is None
    for meta in [{}, [], None, 4, "x", {"step": "4"}, {"step": 3}, {"step": True}, {"step": -1},
                 {**good, "files": "x"}, {**good, "files": {"model/model.safetensors": 12}},
                 {**good, "metrics_lines": "7"}, {**good, "config": [1]}, {k: v for k, v in good.items() if k != "step"}]:  # fmt: skip
        (c / "meta.json").write_text(json.dumps(meta))
        assert (ckpt.verify(c) or "").startswith("meta.json "), meta


@pytest.mark.parametrize("meta", ["{}", '{"step": "four", "files": {}}', '{"step": 3}'])
def test_a_checkpoint_whose_meta_lacks_its_fields_falls_back_to_an_older_one(
    meta, finished, make_cfg, tmp_path, caplog
):
    d = _copy(finished, tmp_path)
    (d / "checkpoints" / "step_0000004" / "meta.json").write_text(meta)
    run(make_cfg(*COMMON, "resume=true", run_dir=d))  # from step 3: step 4 and its eval recomputed
    assert any("step_0000004 is damaged (meta.json" in r.getMessage() for r in caplog.records)
    assert_same_run(finished, d)


def test_an_over_long_prompt_is_dropped_before_it_is_tokenized(make_cfg, tmp_path, caplog):
    from pods.data import load_prompt_sets
    from pods.data.prompts import max_token_chars
    from pods.models import load_tokenizer

    lines = (ROOT / "data" / "arithmetic" / "train.jsonl").read_text().splitlines()[:20]
    huge = json.dumps({"question": "1+" * 5_000_000 + "1", "answer": "5000001"})  # a 10 MB line
    (tmp_path / "train.jsonl").write_text("\n".join([*lines[:10], huge, *lines[10:]]) + "\n")
    c = validate(make_cfg(*SMOKE, "dataset=arithmetic_local", f"dataset.task={tmp_path / 'train.jsonl'}",
                          f"dataset.eval_task={ROOT / 'data' / 'arithmetic' / 'eval.jsonl'}"))  # fmt: skip
    tok = load_tokenizer(c.model)

    class Guard:  # the tokenizer, refusing to tokenize anything of the huge line's size
        def __call__(self, text, **kw):
            assert len(text) < 1_000_000, "the over-long prompt was tokenized"
            return tok(text, **kw)

        def __getattr__(self, name):
            return getattr(tok, name)

    train, _ = load_prompt_sets(c.dataset, c.model, Guard())
    reason = f"prompt longer than model.max_prompt_len={c.model.max_prompt_len}"
    assert len(train.prompts) == 20 and train.report.bad == {reason: 1}
    assert any(f"1 prompts longer than model.max_prompt_len={c.model.max_prompt_len}" in r.getMessage()
               and r.levelname == "WARNING" for r in caplog.records)  # fmt: skip
    # the bound never drops a prompt that fits: no text is shorter in tokens than in characters / the bound
    for text in ["1+" * 3000, " " * 5000, "é" * 3000, "🙂" * 2000, "<|im_start|>" * 300, lines[0] * 40]:
        assert len(tok(text)["input_ids"]) * max_token_chars(tok) >= len(text)


@pytest.mark.slow
@pytest.mark.parametrize("case", ["plugin", "model", "resume"])
def test_refusals_are_one_line_and_exit_2_from_the_command_line(case, tmp_path):
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}"}
    args = [*SMOKE, f"hydra.run.dir={tmp_path / 'run'}"]
    if case == "plugin":
        (tmp_path / "broken_plugin.py").write_text("raise ValueError('nope')\n")
        args.append("plugins=[broken_plugin]")
    elif case == "model":
        shutil.copytree(TINY, tmp_path / "model")
        _truncate(tmp_path / "model" / "model.safetensors", 2000)
        args.append(f"model.path={tmp_path / 'model'}")
    else:
        (tmp_path / "run").mkdir()
        (tmp_path / "run" / "metrics.jsonl").write_text('{"kind": "train", "step": 1}\n')
        args.append("resume=true")
    p = subprocess.run([sys.executable, "-m", "pods.train", *args], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=600)  # fmt: skip
    errors = [x for x in p.stderr.splitlines() if x.startswith("pods: error:")]
    assert p.returncode == 2 and len(errors) == 1 and "Traceback" not in p.stderr + p.stdout, p.stderr[-3000:]
