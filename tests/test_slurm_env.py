"""pods.slurm inside a job, from the variables Slurm sets (no Slurm needed; tests/slurm/ runs the real one):
a requeued job resumes, several tasks get their ranks, several copies of a one-process run are refused."""

from __future__ import annotations

import os
import signal
import subprocess

import pytest

from pods import signals, slurm
from pods.errors import ConfigError
from pods.naming import sweep_stamp

# what setup() may export; set then deleted, so that monkeypatch restores each as it was (absent) afterwards
EXPORTED = [
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "SUBMITIT_EXECUTOR",
]


@pytest.fixture
def job(monkeypatch):
    for k in [k for k in os.environ if k.startswith("SLURM_")] + EXPORTED:
        monkeypatch.setenv(k, "")
        monkeypatch.delenv(k)
    monkeypatch.setenv("SLURM_JOB_ID", "41")
    return monkeypatch


def test_a_requeued_job_resumes_its_run(job, make_cfg):
    cfg = make_cfg("debug=smoke", "hardware=cpu")
    slurm.setup(cfg)
    assert cfg.resume is False  # first start
    job.setenv("SLURM_RESTART_COUNT", "2")
    slurm.setup(cfg)
    assert cfg.resume is True


def test_two_tasks_get_ranks_from_slurm(job, make_cfg):  # as from a plain sbatch + srun script
    env = {"SLURM_NTASKS": "2", "SLURM_PROCID": "1", "SLURM_LOCALID": "1", "SLURM_JOB_NUM_NODES": "2",
           "SLURM_JOB_NODELIST": "node[07-08]", "SLURM_STEP_NUM_TASKS": "2"}  # fmt: skip
    for k, v in env.items():
        job.setenv(k, v)
    job.setenv("LOCAL_WORLD_SIZE", "8")  # left over in the submitting shell: Slurm's count wins
    slurm.setup(make_cfg("debug=smoke", "hardware=cpu", "hardware.distributed=ddp"))
    assert (os.environ["RANK"], os.environ["WORLD_SIZE"], os.environ["LOCAL_RANK"]) == ("1", "2", "1")
    assert (
        os.environ["LOCAL_WORLD_SIZE"] == "1"
        and os.environ["MASTER_ADDR"] == "node07"
        and 20000 <= int(os.environ["MASTER_PORT"]) <= 60000
    )


def test_several_tasks_of_a_one_process_run_are_refused(job, make_cfg):
    job.setenv("SLURM_NTASKS", "2")
    with pytest.raises(ConfigError, match="2 copies of the same run") as e:
        slurm.setup(make_cfg("debug=smoke", "hardware=cpu"))
    assert "\n" not in str(e.value)


def test_outside_slurm_nothing_changes(monkeypatch, make_cfg):
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    monkeypatch.setenv("SLURM_RESTART_COUNT", "3")
    cfg = make_cfg("debug=smoke", "hardware=cpu")
    slurm.setup(cfg)
    assert cfg.resume is False
    stop = slurm.handler()  # Ctrl-C/SIGTERM as everywhere, not Slurm's requeue on SIGUSR2
    stop.uninstall()
    assert type(stop) is signals.StopOnSignal


def test_in_a_job_the_run_s_signal_handler_is_slurm_s(job):
    stop = slurm.handler()
    stop.uninstall()
    assert isinstance(stop, slurm.RequeueOnSignal) and signal.SIGUSR2 in stop.previous


def test_sweep_dirs_have_no_time_under_slurm():
    slurm_launcher = "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher"
    assert sweep_stamp(slurm_launcher) == ""
    assert sweep_stamp("BasicLauncher").endswith("_")  # Hydra's own launcher


# --- signals: RequeueOnSignal at a step boundary ---------------------------------------------------------


class FakeDist:  # what RequeueOnSignal reads of a Trainer (also used by tests/slurm's job script)
    is_main = True

    @staticmethod
    def max(x):
        return x


class FakeTrainer:
    dist, step, run_dir, changes, saved_changes = FakeDist(), 7, "runs/x", 1, 0

    def save(self):
        self.saved_changes = self.changes


@pytest.fixture
def handler(job):
    cb = slurm.RequeueOnSignal()
    installed_before = dict(cb.previous)  # the tests replace cb.previous's entries
    yield cb
    cb.uninstall()  # a stop it noted must not reach the next test's run (pods/stopping.py's Region)
    for s, previous in installed_before.items():
        signal.signal(s, previous)


def test_sigterm_outranks_sigusr2_in_either_order(handler):
    """Slurm requeueing the job itself (SIGTERM) and a time-limit signal at the same step: pods does not try a
    requeue of its own, which Slurm would refuse."""
    called = []
    handler.previous[signal.SIGUSR2] = lambda *a: called.append(a)
    for order in [(signal.SIGUSR2, signal.SIGTERM), (signal.SIGTERM, signal.SIGUSR2)]:
        handler.caught = 0
        for s in order:
            handler._note(s, None)
        with pytest.raises(SystemExit) as e:
            handler.on_step_start(FakeTrainer())
        assert e.value.code == 128 + signal.SIGTERM and called == []


@pytest.mark.parametrize("state, level, says", [
    ("COMPLETING", "WARNING", "Slurm is requeueing this job already (COMPLETING)"),
    ("RUNNING", "ERROR", "job state RUNNING): this job will not come back by itself; resume its runs with resume=true"),
])  # fmt: skip
def test_a_refused_requeue_ends_the_run_with_its_checkpoint_and_says_why(
    handler, job, caplog, state, level, says
):
    def submitit_handler(signum, frame):  # what submitit's does when `scontrol requeue` is refused
        raise subprocess.CalledProcessError(1, ["scontrol", "requeue", "41"])

    handler.previous[signal.SIGUSR2] = submitit_handler
    job.setattr(slurm, "job_state", lambda j: state if j == "41" else "")
    handler._note(signal.SIGUSR2, None)
    trainer = FakeTrainer()
    with pytest.raises(SystemExit) as e:
        handler.on_step_start(trainer)
    assert e.value.code == 128 + signal.SIGUSR2 and trainer.saved_changes == trainer.changes
    lines = [(r.levelname, r.getMessage()) for r in caplog.records if "scontrol requeue" in r.getMessage()]
    assert len(lines) == 1 and lines[0][0] == level and says in lines[0][1], lines


def test_this_job_names_an_array_task(job):
    assert slurm.this_job() == "41"
    job.setenv("SLURM_ARRAY_JOB_ID", "40")
    job.setenv("SLURM_ARRAY_TASK_ID", "3")
    assert slurm.this_job() == "40_3"
