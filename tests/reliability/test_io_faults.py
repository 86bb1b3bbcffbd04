"""Every I/O and file fault ends in one line (issue 53, class 3): a write refused for any cause (a full disk, a
read-only file or mount) names the file and the cause, leaves nothing saved damaged and the run resumes
bitwise; a config file that does not parse, a metrics.jsonl line pods did not write, a newest checkpoint that
fails to load (falls back to the newest intact one); the printed resume command parses for any path; a
stopped multirun names the jobs it did not run."""

from __future__ import annotations

import errno
import io
import logging
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser

import pods.runlock
import pods.tracking
from pods.callbacks import Callback
from pods.errors import RunError
from pods.multirun import SCRIPT, sweep_jobs
from pods.signals import resume_command
from pods.tracking import MetricsGapError
from pods.train import run
from tests.conftest import SMOKE, compose_cfg
from tests.reliability import test_data_loss
from tests.reliability.test_data_loss import COMMON, _copy, assert_same_run

finished = test_data_loss.finished  # the uninterrupted run (a fixture)

ROOT = Path(__file__).resolve().parents[2]
REAL_OPEN = open


class RefusingFile(io.TextIOWrapper):
    """A file that takes 10 characters of a write, then refuses the rest: a disk filling up mid-line."""

    def write(self, s: str) -> int:
        super().write(s[:10])
        self.flush()
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


class FaultAfter(Callback):
    """From the end of step `at` on, metrics.jsonl refuses writes with `code` (ENOSPC mid-write, else at open)."""

    def __init__(self, monkeypatch, at: int, code: int):
        self.monkeypatch, self.at, self.code = monkeypatch, at, code

    def on_step_end(self, trainer, record) -> None:
        if trainer.step == self.at:
            self.monkeypatch.setattr(pods.tracking, "open", self.open, raising=False)

    def open(self, path, mode="r", *a, **k):
        if Path(path).name != "metrics.jsonl" or mode != "a":
            return REAL_OPEN(path, mode, *a, **k)
        if self.code == errno.ENOSPC:
            return RefusingFile(REAL_OPEN(path, "ab+"))
        raise OSError(self.code, os.strerror(self.code), str(path))


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EROFS])  # mid-write; at open (EACCES: alike)
def test_a_refused_metrics_write_is_one_line_and_the_run_resumes_bitwise(
    code, finished, tmp_path, monkeypatch
):
    d = tmp_path / "run"
    with pytest.raises(RunError) as e:
        run(compose_cfg(COMMON, d), callbacks=[FaultAfter(monkeypatch, 2, code)])  # the eval of step 2 fails
    name = errno.errorcode[code]
    assert str(e.value).startswith(f"{d / 'metrics.jsonl'}: {os.strerror(code)} ({name}); nothing saved was ")
    assert f"the newest checkpoint is {d / 'checkpoints' / 'step_0000001'}; " in str(e.value)
    assert "\n" not in str(e.value) and str(e.value).endswith("then continue the run with resume=true")
    assert (d / "metrics.jsonl").read_text().endswith("}\n")  # no torn line left behind
    monkeypatch.undo()
    run(compose_cfg([*COMMON, "resume=true"], d))
    assert_same_run(finished, d)


FULL_AT_LOCK = """
import errno, os, runpy, sys
import pods.runlock
def pwrite(fd, data, offset):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
pods.runlock.os.pwrite = pwrite
sys.argv = ["pods.train", *sys.argv[1:]]
runpy.run_module("pods.train", run_name="__main__")
"""


def test_a_full_disk_at_the_run_lock_is_one_line_naming_it(tmp_path):
    d = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-c", FULL_AT_LOCK, *SMOKE, f"hydra.run.dir={d}"], cwd=ROOT, capture_output=True,
        text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines() == [
        f"pods: error: {d / 'run.lock'}: No space left on device (ENOSPC); free space on that disk, then "
        "continue the run with resume=true"
    ]


def test_a_config_file_that_does_not_parse_is_one_line(tmp_path):
    (tmp_path / "experiment").mkdir()
    (tmp_path / "experiment" / "bad.yaml").write_text("selector:\n  n: [1, 2\n")
    proc = subprocess.run(
        [sys.executable, "-m", "pods.train", "--config-dir", str(tmp_path), "experiment=bad", *SMOKE,
         f"hydra.run.dir={tmp_path / 'run'}"], cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr[-2000:]
    assert proc.stderr.startswith(
        f"pods: error: {tmp_path / 'experiment' / 'bad.yaml'}:3:1: the YAML does not parse"
    )


def test_a_metrics_line_pods_did_not_write_is_refused_in_one_line(finished, tmp_path):
    d = _copy(finished, tmp_path)
    lines = (d / "metrics.jsonl").read_text().splitlines(keepends=True)
    (d / "metrics.jsonl").write_text(
        "".join([lines[0], '{"note": "pasted by hand", "step": "two"}\n', *lines[1:]])
    )
    with pytest.raises(MetricsGapError, match="line 2 is not a record pods wrote") as e:
        run(compose_cfg([*COMMON, "resume=true"], d))
    assert "\n" not in str(e.value) and str(d / "metrics.jsonl") in str(e.value)


def test_a_partly_copied_newest_checkpoint_falls_back_to_the_intact_one(finished, tmp_path, caplog):
    """meta.json gone (so no checksums to catch it) and the weights cut short: the load fails, the resume
    takes step 3 with a warning naming both, and recomputes step 4."""
    d = _copy(finished, tmp_path)
    newest, older = d / "checkpoints" / "step_0000004", d / "checkpoints" / "step_0000003"
    (newest / "meta.json").unlink()
    weights = newest / "model" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 3])
    with caplog.at_level(logging.WARNING, logger="pods"):
        run(compose_cfg([*COMMON, "resume=true"], d))
    said = [r.getMessage() for r in caplog.records if "cannot be loaded" in r.getMessage()]
    assert len(said) == 1 and said[0].startswith(f"checkpoint {newest} cannot be loaded (")
    assert said[0].endswith(f"treated as damaged; resuming from {older} instead")
    assert_same_run(finished, d)


@pytest.mark.parametrize(
    "name", ["plain", "with space", "ünïcödé ü", "it's", 'say "hi"', "a,b=c", "$HOME{x}", "back\\slash\\"]
)
def test_the_printed_resume_command_parses_for_any_path(name, tmp_path):
    d = tmp_path / name
    args = shlex.split(resume_command(d))
    assert args[:3] == ["python", "-m", "pods.train"] and args[-2] == "resume=true"
    override = OverridesParser.create().parse_override(args[-1])
    assert override.key_or_group == "hydra.run.dir" and override.value() == str(d)


def test_the_sweep_is_expanded_as_hydra_runs_it():
    argv = ["-m", "--config-name", "train", "seed=0,1", "selector.n=8,16", "debug=smoke"]
    jobs = sweep_jobs({"eval.num_samples": "1,2"}, argv)  # the config's sweeper params first, as Hydra's
    assert len(jobs) == 8 and jobs[:3] == [
        ["eval.num_samples=1", "seed=0", "selector.n=8", "debug=smoke"],
        ["eval.num_samples=1", "seed=0", "selector.n=16", "debug=smoke"],
        ["eval.num_samples=1", "seed=1", "selector.n=8", "debug=smoke"],
    ]


@pytest.mark.slow
def test_a_stopped_multirun_names_the_jobs_not_run_and_how_to_run_them(tmp_path):
    sweep = tmp_path / "sweep dir"
    args = [*SMOKE, "max_steps=50", "checkpoint.every_steps=0", "seed=0,1,2", f"hydra.sweep.dir='{sweep}'"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "pods.train", "-m", *args], cwd=ROOT, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 300
    while not any('"kind": "train"' in p.read_text() for p in sweep.glob("*/metrics.jsonl")):
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    out = proc.communicate(timeout=300)[0]
    assert proc.returncode == 143, out[-3000:]
    said = [x for x in out.splitlines() if "multirun stopped by SIGTERM in job 0" in x]
    assert len(said) == 1 and "2 job(s) not run (seed=1; seed=2)" in said[0], out[-3000:]
    assert said[0].endswith(f"run them with: sh {shlex.quote(str(sweep / SCRIPT))}")
    commands = [shlex.split(x) for x in (sweep / SCRIPT).read_text().splitlines() if not x.startswith("#")]
    assert [c[-2] for c in commands] == ["seed=1", "seed=2"] and all("max_steps=50" in c for c in commands)
    parsed = [OverridesParser.create().parse_override(c[-1]) for c in commands]
    assert all(c[:4] == ["python", "-m", "pods.train", "-m"] for c in commands)
    assert all(p.key_or_group == "hydra.sweep.dir" and p.value() == str(sweep) for p in parsed)
