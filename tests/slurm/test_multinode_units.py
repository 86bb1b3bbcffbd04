"""Without Slurm: the submit check's node and CPU arithmetic (sinfo's answer faked), and which node a gloo error
names."""

from __future__ import annotations

import pytest

from pods import slurm
from pods.errors import ConfigError

SINFO = ["vm 8 debug*", "pods-n1 4 multi", "pods-n2 4 multi", "big 16 mixed", "pods-n1 4 mixed"]


@pytest.fixture(autouse=True)
def fake_sinfo(monkeypatch):
    monkeypatch.setattr(slurm, "_sinfo_lines", lambda field, nodes=False: SINFO)


def test_nodes_of_a_partition_and_of_the_default_one():
    assert slurm._node_cpus("multi") == {"pods-n1": 4, "pods-n2": 4}
    assert slurm._node_cpus(None) == {"vm": 8}


@pytest.mark.parametrize(
    "nodes, tasks, cpus, partition, error",
    [
        (2, 2, 2, "multi", None),  # 4 CPUs per node: fits exactly
        (3, 1, 1, "multi", "nodes=3 but partition 'multi' has 2 node(s) (pods-n1, pods-n2)"),
        (2, 5, 1, "multi", "= 5 CPUs per node, but the nodes of partition 'multi' have 4 CPUs"),
        (2, 3, 2, "multi", "tasks_per_node=3 x cpus_per_task=2 = 6 CPUs per node"),
        (1, 8, 1, None, None),
        (2, 1, 1, None, "nodes=2 but the default partition has 1 node(s) (vm)"),
        (1, 16, 1, "mixed", None),  # the one 16-CPU node holds it
        (2, 16, 1, "mixed", "the nodes of partition 'mixed' have 4/16 CPUs"),  # the second node cannot
    ],
)
def test_check_nodes(nodes, tasks, cpus, partition, error):
    if error is None:
        slurm.check_nodes(nodes, tasks, cpus, partition)
    else:
        with pytest.raises(ConfigError, match=error.replace("(", r"\(").replace(")", r"\)")):
            slurm.check_nodes(nodes, tasks, cpus, partition)


def test_lost_node_is_the_node_of_the_peer_address(monkeypatch):
    addrs = {"pods-n1": "10.213.77.11", "pods-n2": "10.213.77.12"}
    monkeypatch.setattr(slurm.socket, "gethostbyname", lambda n: addrs[n])
    err = (
        "[../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer [10.213.77.12]:23011"
    )
    assert slurm.lost_node(err, ["pods-n1", "pods-n2"]) == "pods-n2"
    assert slurm.lost_node("Connection closed by peer [10.9.9.9]:1", ["pods-n1", "pods-n2"]) is None
    assert slurm.lost_node("Timed out waiting 1800000ms", ["pods-n1", "pods-n2"]) is None


def test_the_cause_is_gloo_s_words_about_the_peer():
    err = "[/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer [10.0.0.2]:30354. This"
    assert slurm._cause(err) == "Connection closed by peer [10.0.0.2]:30354"
    assert slurm._cause("Timed out after 1800000ms\nmore") == "Timed out after 1800000ms"


class _Dist:
    world = 2


class _Trainer:
    dist, step = _Dist(), 7

    def __init__(self, run_dir):
        self.run_dir = run_dir


def test_a_lost_rank_is_one_line_naming_node_step_and_checkpoint(monkeypatch, tmp_path, capsys):
    import torch.distributed as dist

    monkeypatch.setattr(slurm, "job_nodes", lambda: ["pods-n1", "pods-n2"])
    monkeypatch.setattr(slurm.socket, "gethostbyname", {"pods-n1": "10.0.0.1", "pods-n2": "10.0.0.2"}.get)
    with pytest.raises(SystemExit) as e, slurm.lost_rank_ends_the_job(_Trainer(tmp_path)):
        raise dist.DistBackendError("[pair.cc:534] Connection closed by peer [10.0.0.2]:4123. This may be")
    assert e.value.code == 1
    (line,) = capsys.readouterr().err.splitlines()
    assert line == (
        "pods: error: lost node pods-n2 at step 7 (Connection closed by peer [10.0.0.2]:4123); no checkpoint was "
        "written yet; continue the run with resume=true"
    )
    with pytest.raises(ValueError), slurm.lost_rank_ends_the_job(_Trainer(tmp_path)):  # other errors pass
        raise ValueError("not a collective")


def fake_slurm(monkeypatch, sinfo: str, job: str = "JobId=41 JobState=RUNNING Requeue=0 Restarts=0"):
    """sinfo -N and `scontrol show job -o` answer as given; every other command as it would."""
    import subprocess

    real = subprocess.run

    def run(cmd, *a, **kw):
        if cmd[0] == "sinfo":
            return subprocess.CompletedProcess(cmd, 0, sinfo, "")
        if cmd[:3] == ["scontrol", "show", "job"]:
            return subprocess.CompletedProcess(cmd, 0, job + "\n", "")
        return real(cmd, *a, **kw)

    monkeypatch.setattr(slurm.subprocess, "run", run)


def test_down_nodes_are_those_slurm_marked_down_or_that_do_not_respond(monkeypatch):
    rows = "pods-n1|allocated|none\npods-n2|down*|Not responding\nn3|idle*|none\nn4|drained|maint\nn5|mixed|none\n"
    fake_slurm(monkeypatch, rows)
    assert slurm.down_nodes(["pods-n1", "pods-n2", "n3", "n4", "n5"]) == {
        "pods-n2": "down* (Not responding)",
        "n3": "idle*",
    }
    assert slurm.down_nodes([]) == {}


def test_a_lost_rank_that_gloo_does_not_name_is_the_node_slurm_has_down(monkeypatch, tmp_path, capsys):
    import torch.distributed as dist

    monkeypatch.setattr(slurm, "job_nodes", lambda: ["pods-n1", "pods-n2"])
    fake_slurm(monkeypatch, "pods-n1|allocated|none\npods-n2|down*|Not responding\n")
    with pytest.raises(SystemExit), slurm.lost_rank_ends_the_job(_Trainer(tmp_path)):
        raise dist.DistBackendError("Timed out waiting 1800000ms for recv operation to complete")
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("pods: error: lost node pods-n2 at step 7 (Timed out waiting 1800000ms"), line


@pytest.mark.parametrize("requeue, then", [(0, "continue the run with resume=true"),
                                           (1, "Slurm requeues the job once its nodes are up")])  # fmt: skip
def test_sigterm_for_a_node_slurm_marked_down_is_one_line_naming_it(
    monkeypatch, tmp_path, capsys, requeue, then
):
    """A node's slurmd dies: Slurm marks the node down and ends (or requeues) the job with SIGTERM; rank 0
    says which node, at which step, and the checkpoint it just saved."""
    import signal

    from pods import checkpoint as ckpt
    from tests.test_slurm_env import FakeTrainer

    monkeypatch.setenv("SLURM_JOB_ID", "41")
    monkeypatch.delenv("SLURM_ARRAY_JOB_ID", raising=False)
    monkeypatch.setattr(slurm, "job_nodes", lambda: ["pods-n1", "pods-n2"])
    fake_slurm(monkeypatch, "pods-n1|allocated|none\npods-n2|down*|Not responding\n",
               f"JobId=41 JobState=RUNNING Requeue={requeue} Restarts=0")  # fmt: skip
    trainer = FakeTrainer()
    trainer.run_dir = str(tmp_path)
    monkeypatch.setattr(ckpt, "latest_checkpoint", lambda d: d / "step_0000007")
    cb = slurm.RequeueOnSignal()
    try:
        cb.after_save(trainer, signal.SIGTERM)
    finally:
        cb.uninstall()
    (line,) = capsys.readouterr().err.splitlines()
    assert line == (
        "pods: error: lost node pods-n2 at step 7 (SIGTERM from Slurm: pods-n2 is down* (Not responding)); the "
        f"newest complete checkpoint is {tmp_path}/checkpoints/step_0000007; {then}"
    )
    monkeypatch.setattr(slurm, "down_nodes", lambda nodes: {})  # all up: a requeue or preemption, as before
    cb = slurm.RequeueOnSignal()
    try:
        cb.after_save(trainer, signal.SIGTERM)
    finally:
        cb.uninstall()
    assert capsys.readouterr().err == ""
