"""On a real Slurm: a 2 x 2 smoke sweep through hydra/launcher=slurm (README's command) that pods.compare reads;
a job that is requeued (`scontrol requeue`) and runs past its time limit (SIGUSR2), saving and requeueing
itself, ends bitwise equal to an uninterrupted run with every record once; bad input is one line before sbatch."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from pods import checkpoint as ckpt
from pods.tracking import read_metrics
from tests.conftest import run_name_of
from tests.slurm.conftest import job_state, jobs_under, submit, sweep_jobs, wait_submitter

ROOT = Path(__file__).resolve().parents[2]
# the launcher settings a one-node CPU test cluster needs (partition `debug`, no GPUs, 1 core per task)
SLURM = [
    "hydra/launcher=slurm",
    "hydra.launcher.partition=debug",
    "hydra.launcher.gpus_per_node=0",
    "hydra.launcher.cpus_per_task=1",
    "hydra.launcher.mem_gb=1",
    "hydra.launcher.timeout_min=10",
]
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("slurm")]


def _multirun(*args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "pods.train", "-m", *args]
    sweep = Path(next(a for a in args if a.startswith("hydra.sweep.dir=")).split("=", 1)[1])
    return submit(cmd, sweep, timeout, cwd=ROOT)


def _train(run_dir: Path) -> list[dict]:
    return [r for r in read_metrics(run_dir / "metrics.jsonl") if r["kind"] == "train"]


def _job_logs(sweep: Path) -> str:
    return "".join(p.read_text() for p in sorted((sweep / ".submitit").rglob("*_log.*")))


def readme_sweep() -> list[str]:
    """README's Slurm smoke-sweep command, word for word (docs/slurm.md's, if README has moved it there)."""
    for doc in ("README.md", "docs/slurm.md"):
        for line in (ROOT / doc).read_text().splitlines():
            if line.startswith("python -m pods.train -m hydra/launcher=slurm") and "debug=smoke" in line:
                return shlex.split(line)
    raise AssertionError(
        "README.md has no `python -m pods.train -m hydra/launcher=slurm ... debug=smoke` line"
    )


def test_smoke_sweep_runs_on_slurm_and_compare_reads_it(tmp_path):
    sweep = tmp_path / "sweep"
    cmd = readme_sweep()
    assert cmd[:3] == ["python", "-m", "pods.train"]
    proc = submit([sys.executable, *cmd[1:], f"hydra.sweep.dir={sweep}"], sweep, 300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:] + _job_logs(sweep)[-3000:]
    runs = sorted(p.parent.name for p in sweep.glob("*/metrics.jsonl"))
    over = [a for a in cmd[4:] if "," not in a]  # the sweep's shared overrides; its two swept keys below
    expected = [
        run_name_of(*over, f"selector={s}", f"seed={k}") for s in ("max_variance", "random") for k in (0, 1)
    ]
    assert runs == sorted(expected) and all("-n4-m2-" in r for r in runs)
    assert all([r["step"] for r in _train(sweep / r)] == [1, 2, 3] for r in runs)
    assert len(list((sweep / ".submitit").glob("*/*_submission.sh"))) == 1  # one array job of 4
    out = subprocess.run(
        [sys.executable, "-m", "pods.compare", str(sweep), "--baseline", "random-n4-m2", "--out", str(tmp_path / "cmp")],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    table = (tmp_path / "cmp" / "summary.md").read_text()
    assert "| max_variance-n4-m2 | 2 |" in table and "| random-n4-m2 | 2 |" in table


BAD = {
    "hydra.launcher.partition=nope": "partition='nope': Slurm has no such partition; it has debug",
    "hydra.launcher.gpus_per_node=1": "gpus_per_node=1 but partition 'debug' has no GPUs",
    "hydra.launcher.tasks_per_node=2": "tasks_per_node=2 but hardware=cpu runs one process",
}


@pytest.mark.parametrize("bad", sorted(BAD))
def test_bad_input_is_one_line_before_anything_is_submitted(bad, tmp_path):
    proc = _multirun(*SLURM, "debug=smoke", "hardware=cpu", bad, f"hydra.sweep.dir={tmp_path}/s", timeout=120)
    assert proc.returncode == 2
    errors = [x for x in proc.stderr.splitlines() if x.startswith("pods: error:")]
    assert len(errors) == 1 and BAD[bad] in errors[0], proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and not (tmp_path / "s" / ".submitit").exists()
    # nothing submitted: no job from this test's directory, queued or ended (not the whole queue: the two-node
    # tests submit theirs at the same time on another worker)
    assert jobs_under(tmp_path) == set()


# --- requeue and time limit ---------------------------------------------------------------------------

# No periodic checkpoint: what a requeued job resumes from is the checkpoint its signal handler saved. 80 steps:
# under the slow clock (3 s a step) a job has taken at most about 45 when its second stop comes (below).
RUN = [
    "debug=smoke",
    "hardware=cpu",
    "max_steps=80",
    "checkpoint.every_steps=0",
    "eval.every_steps=50",
    "seed=0",
]
# in the Slurm job only: SLOW_CLOCK_S (default 1 s) of sleep per step until it saved on both a time-limit signal
# and a requeue (a weight-0 reward term; slow_clock.py)
SLOW = ["plugins=[tests.slurm.slow_clock]", "+reward.weights.slow_clock=0.0"]


def start_uninterrupted(run_dir: Path, log: Path) -> subprocess.Popen:
    """The requeue test's run, uninterrupted, on this machine: started, not waited for; its output in `log`."""
    cmd = [sys.executable, "-m", "pods.train", *RUN, f"hydra.run.dir={run_dir}"]
    with log.open("w") as out:
        return subprocess.Popen(cmd, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)


def _job_id(sweep: Path) -> str:
    return next(p.name for p in (sweep / ".submitit").iterdir() if re.fullmatch(r"\d+(_0)?", p.name))


def requeue_and_time_limit(
    args: list[str], sweep: Path, run_dir: Path, submit_log: Path, env=None, beside=lambda: None
) -> None:
    """Run the sweep of `args` (one run, in `run_dir`) as a job with a 2-minute time limit (SIGUSR2 30 s
    before it) that sleeps 3 s a step until it saved on both stops (SLOW, SLOW_CLOCK_S=3); requeue it with
    `scontrol requeue` once it trains; once both have made it save (in whichever order they come), lift the
    time limit and wait for the run to end.

    Steps before the second stop: the signal is due 90 s after a start, so at most ~30 slow steps after the
    start it comes in, plus the ~5-10 before the requeue (requeue first), or the ~5 after the restart until the
    test requeues (signal first): about 45 at most, under RUN's 80. The slow clock runs until both have been
    seen, so in either order the requeue finds the job training (a job fast after the signal alone could end
    before the test requeued it), and the steps after both run at full speed.

    Slurm sends the signal up to 60 s before it is due: under a 1-minute limit, any time from the job's start.
    A job whose imports take longer than that (a loaded machine) got it before pods's handler was there, run
    after run (submitit requeued it each time), and never trained. 2 minutes leave 30 s to start.

    `beside()` is called once, when the job trains again after its requeue (or, if the time limit came first,
    once both signals are seen): work that runs beside the job's slow steps (its reference run), started
    once its handler is installed, so that it never slows the job's start into its time limit."""
    limit = ["hydra.launcher.timeout_min=2", "hydra.launcher.signal_delay_s=30"]
    cmd = [sys.executable, "-m", "pods.train", "-m", *args, *limit, *SLOW, f"hydra.sweep.dir={sweep}"]
    env = {**(os.environ if env is None else env), "SLOW_CLOCK_S": "3"}
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=submit_log.open("w"), stderr=subprocess.STDOUT)
    try:
        deadline, seen, requeued_start, beside_started = time.monotonic() + 600, [], None, False
        while proc.poll() is None:
            logs = _job_logs(sweep)
            if "SIGTERM at step" in logs and "SIGUSR2 at step" in logs:
                break
            if time.monotonic() > deadline:
                states = "; ".join(f"job {j}: {job_state(j)}" for j in sweep_jobs(sweep)) or "no job yet"
                pytest.fail(
                    f"not both signals in 600 s ({states}); records seen: {seen[-8:]}\n{logs[-3000:]}"
                )
            time.sleep(0.5)
            seen.append(len(_train(run_dir)) if (run_dir / "metrics.jsonl").exists() else 0)
            start = logs.count("Starting with JobEnvironment")
            # requeue while the job trains (pods's handler is installed: 5 records, one more since the last
            # look), once per start of the job; it fails while the job is between runs, and is tried again
            trains = len(seen) >= 2 and seen[-1] > seen[-2] >= 5
            if "SIGTERM at step" not in logs and start != requeued_start and trains:
                requeue = subprocess.run(["scontrol", "requeue", _job_id(sweep)], capture_output=True)
                requeued_start = start if requeue.returncode == 0 else requeued_start
            elif requeued_start is not None and start > requeued_start and trains and not beside_started:
                beside_started = True
                beside()
        if not beside_started:
            beside()
        # both seen: lift the time limit (the job runs, or waits to run again) and let the run end
        for _ in range(20):
            lift = ["scontrol", "update", f"JobId={_job_id(sweep)}", "TimeLimit=10"]
            if proc.poll() is not None or subprocess.run(lift, capture_output=True).returncode == 0:
                break
            time.sleep(0.5)
        rc = wait_submitter(proc, sweep, 600, lambda: submit_log.read_text() + _job_logs(sweep))
        assert rc == 0, submit_log.read_text()[-3000:]
    finally:  # never leave the submitter waiting, or the job queued
        proc.kill()
        for folder in (sweep / ".submitit").glob("*"):
            subprocess.run(["scancel", folder.name.split("_")[0]], check=False, capture_output=True)


def test_requeue_and_time_limit_lose_nothing(tmp_path):
    """The two ways Slurm stops a job that comes back, in whichever order they come: `scontrol requeue` while
    it trains (SIGTERM: save, Slurm requeues) and a 2-minute time limit whose SIGUSR2 (30 s before it) makes
    the job save and requeue itself. Once both have happened the test lifts the time limit and the run ends.
    The same run uninterrupted, the reference, runs on this machine beside the job's slow steps."""
    sweep = tmp_path / "sweep"
    run_dir = sweep / run_name_of(*RUN, *SLOW)  # the job's own run: SLOW's plugin knob is in its name
    uninterrupted, log, started = tmp_path / "uninterrupted", tmp_path / "uninterrupted.log", []
    try:
        requeue_and_time_limit([*SLURM, *RUN], sweep, run_dir, tmp_path / "submit.log",
                               beside=lambda: started.append(start_uninterrupted(uninterrupted, log)))  # fmt: skip
        rc = started[0].wait(timeout=600)
    finally:
        for proc in started:
            proc.kill()
            proc.wait()
    assert rc == 0, log.read_text()[-3000:]
    logs = _job_logs(sweep)
    assert re.search(r"SIGTERM at step \d+: checkpoint saved", logs), logs[-3000:]
    assert re.search(r"SIGUSR2 at step \d+: checkpoint saved", logs), logs[-3000:]
    assert (
        len(re.findall(r"Slurm requeued this job \(restart \d+\): resuming " + re.escape(str(run_dir)), logs))
        >= 2
    )
    a, b = read_metrics(uninterrupted / "metrics.jsonl"), read_metrics(run_dir / "metrics.jsonl")
    assert [(r["kind"], r["step"]) for r in b] == [(r["kind"], r["step"]) for r in a]  # each record once
    for x, y in zip(a, b):
        assert all(x.get(k) == y.get(k) for k in ("reward/mean", "update/loss", "eval/accuracy")), x["step"]
    wa, wb = (ckpt.read_weights(ckpt.latest_checkpoint(d / "checkpoints")) for d in (uninterrupted, run_dir))
    assert all(torch.equal(wa[k], wb[k]) for k in wa)  # bitwise


# A job whose time-limit signal comes while Slurm is requeueing it already (a preemption, `scontrol requeue`):
# pods's own requeue is refused, and the job must end with its checkpoint and say why, not with a traceback.
RACE = """
import logging, os, signal, subprocess, sys
if int(os.environ.get("SLURM_RESTART_COUNT", "0") or 0):
    sys.exit(0)  # the requeued run: nothing to do
logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(levelname)s %(message)s")
from pods import slurm
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})  # the requeue's SIGTERM waits: SIGUSR2 is first
subprocess.run(["scontrol", "requeue", os.environ["SLURM_JOB_ID"]], check=True)
sys.path.insert(0, os.getcwd())  # sbatch --chdir: the repository's root
from tests.test_slurm_env import FakeTrainer
cb = slurm.RequeueOnSignal()
os.kill(os.getpid(), signal.SIGUSR2)
cb.on_step_start(FakeTrainer())
"""


def sbatch_until(tmp_path: Path, name: str, source: str, until: str, timeout_s: float, *args: str) -> str:
    """Run `source` as a requeueable plain sbatch job (no submitit) from the repository's root, with `args`;
    wait up to `timeout_s` for `until` in its output (appended across requeues), and 1 s more for what follows;
    cancel it and return its output."""
    script, out = tmp_path / f"{name}.py", tmp_path / f"{name}.out"
    script.write_text(source)
    sbatch = ["sbatch", "--parsable", "--requeue", "-p", "debug", "-c", "1", "--mem=1G", f"--chdir={ROOT}",
              f"--output={out}", "--open-mode=append", f"--wrap={' '.join([sys.executable, str(script), *args])}"]  # fmt: skip
    job = subprocess.run(sbatch, capture_output=True, text=True, check=True).stdout.strip()
    try:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and until not in (out.read_text() if out.exists() else ""):
            time.sleep(0.5)
        time.sleep(1)
    finally:
        subprocess.run(["scancel", job], check=False, capture_output=True)
    return out.read_text() if out.exists() else ""


def test_a_time_limit_signal_during_a_requeue_ends_the_job_in_one_line(tmp_path):
    text = sbatch_until(tmp_path, "race", RACE, "scontrol requeue", 120)
    lines = [x for x in text.splitlines() if "scontrol requeue" in x]
    assert len(lines) == 1 and lines[0].startswith("WARNING `scontrol requeue` was refused"), text[-3000:]
    assert re.search(r"Slurm is requeueing this job already \((COMPLETING|PENDING|REQUEUED)\)", lines[0]), (
        text
    )
    assert "Traceback" not in text, text[-3000:]


# A job whose time-limit signal comes while it is still starting (slow imports, a slow model load): nothing is
# trained yet, so nothing is saved, but the job must requeue itself as after a save, or it is lost. A plain
# sbatch job (no submitit): pods's own `scontrol requeue`.
START_UP = """
import logging, os, signal, sys, time
if int(os.environ.get("SLURM_RESTART_COUNT", "0") or 0):
    print("back after the requeue", flush=True)
    sys.exit(0)
logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(levelname)s %(message)s")
sys.path.insert(0, os.getcwd())  # sbatch --chdir: the repository's root
from pods import slurm, stopping
cb = slurm.RequeueOnSignal()
try:
    with stopping.abandonable():  # pods.train.run's start-up
        os.kill(os.getpid(), signal.SIGUSR2)
        time.sleep(60)
except stopping.StopRequested:
    cb.abandoned(None, sys.argv[1])
"""


def test_a_time_limit_signal_during_start_up_requeues_the_job(tmp_path):
    text = sbatch_until(tmp_path, "start_up", START_UP, "back after the requeue", 300, str(tmp_path / "run"))
    assert "SIGUSR2 during start-up: exiting before the first step (newest checkpoint: no checkpoint); " \
        "requeueing the job" in text, text[-3000:]  # fmt: skip
    assert "back after the requeue" in text, text[-3000:]
