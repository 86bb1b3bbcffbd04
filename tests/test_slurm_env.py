"""pods.slurm inside a job, from the variables Slurm sets (no Slurm needed; tests/slurm/ runs the real one):
a requeued job resumes, several tasks get their ranks, several copies of a one-process run are refused."""

from __future__ import annotations

import os

import pytest

from pods import slurm
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
    assert cfg.resume is False and slurm.callbacks() == []


def test_sweep_dirs_have_no_time_under_slurm():
    slurm_launcher = "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher"
    assert sweep_stamp(slurm_launcher) == ""
    assert sweep_stamp("BasicLauncher").endswith("_")  # Hydra's own launcher
