"""Without Slurm (squeue and scontrol faked): the tests' waits on jobs end, naming the job and its state, when
a job ended from outside leaves the submitting command waiting, and when the time is up."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.slurm import conftest


@pytest.fixture
def waiting(tmp_path, monkeypatch):
    """A submitting command that never ends (a sleep), and its sweep's job 4242, whose state is CANCELLED."""
    (tmp_path / ".submitit" / "4242_0").mkdir(parents=True)
    monkeypatch.setattr(conftest, "job_state", lambda job: f"CANCELLED (reason None) [{job}]")
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    yield proc, tmp_path
    proc.kill()
    proc.wait()


def test_a_job_gone_from_the_queue_without_a_result_fails_the_wait(waiting, monkeypatch):
    proc, sweep = waiting
    monkeypatch.setattr(conftest, "queued", lambda: {"17"})  # someone else's job; 4242 is gone
    with pytest.raises(pytest.fail.Exception, match=r"left the queue 1 s ago .*job 4242: CANCELLED"):
        conftest.wait_submitter(proc, sweep, timeout=600, grace=1)
    assert proc.wait(timeout=60) != 0  # and the submitter was killed


def test_a_job_still_queued_past_the_timeout_fails_the_wait(waiting, monkeypatch):
    proc, sweep = waiting
    monkeypatch.setattr(conftest, "queued", lambda: {"4242"})
    with pytest.raises(pytest.fail.Exception, match=r"still waiting after 1 s: job 4242: CANCELLED"):
        conftest.wait_submitter(proc, sweep, timeout=1)
    with pytest.raises(pytest.fail.Exception, match=r"Slurm job 4242: CANCELLED .* still queued after 1 s"):
        conftest.wait_gone({"4242"}, timeout=1)


def test_squeue_that_cannot_answer_is_not_taken_for_an_empty_queue(waiting, monkeypatch):
    proc, sweep = waiting
    monkeypatch.setattr(conftest, "queued", lambda: None)
    with pytest.raises(pytest.fail.Exception, match="still waiting after 1 s"):  # not "left the queue"
        conftest.wait_submitter(proc, sweep, timeout=1, grace=0)
