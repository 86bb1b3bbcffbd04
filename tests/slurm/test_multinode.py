"""On two Slurm nodes (partition `multi` of .ci/slurm.sh: pods-n1 and pods-n2, each in its own network
namespace with its own hostname and address): a DDP job of 2 nodes x 1 and 2 nodes x 2 tasks (gloo between
the nodes, ranks and master from Slurm's variables) logs the records of a one-node torchrun launch of the same
world size; requests the partition cannot hold are one line before sbatch; a 2-node job requeued and timed out
resumes exactly; a node whose tasks die, or whose slurmd dies, ends the job in one line naming it and
resume=true continues it. scripts/slurm/two_nodes.sbatch, a plain sbatch script, runs as it is."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from pods import checkpoint as ckpt
from pods.tracking import read_metrics
from tests.conftest import SAME_RUN_KEYS, run_name_of
from tests.slurm.conftest import (
    Submitted,
    cancel,
    job_state,
    jobs_under,
    queued,
    submit,
    sweep_jobs,
    wait_gone,
)
from tests.slurm.test_slurm import RUN as RUN_REQUEUE
from tests.slurm.test_slurm import SLOW, _job_logs, requeue_and_time_limit
from tests.slurm.test_slurm_distributed import RUN

ROOT = Path(__file__).resolve().parents[2]
MULTI = [
    "hydra/launcher=slurm",
    "hydra.launcher.partition=multi",
    "hydra.launcher.nodes=2",
    "hydra.launcher.gpus_per_node=0",
    "hydra.launcher.cpus_per_task=1",
    "hydra.launcher.mem_gb=1",
    "hydra.launcher.timeout_min=10",
]
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("slurm_two_nodes")]


def multirun(*args: str, timeout: int = 600, env=ENV) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "pods.train", "-m", *args]
    sweep = Path(next(a for a in args if a.startswith("hydra.sweep.dir=")).split("=", 1)[1])
    return submit(cmd, sweep, timeout, cwd=ROOT, env=env)


def run_dir_of(sweep: Path) -> Path:
    (run_dir,) = [p.parent for p in sweep.glob("*/metrics.jsonl")]
    return run_dir


# --- a plain sbatch script (scripts/slurm/two_nodes.sbatch, run as it is) ---------------------------------

SCRIPT = ROOT / "scripts" / "slurm" / "two_nodes.sbatch"


def sbatch(out: Path, *args: str, options: tuple[str, ...] = (), env=ENV) -> str:
    """Submit SCRIPT to partition `multi` with pods.train's overrides `args`; its output in `out`; the job id.
    The script's `python` is this one (the venv's, first on its PATH)."""
    env = {**env, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"}
    cmd = ["sbatch", "--parsable", "-p", "multi", f"--output={out}", *options, str(SCRIPT), *args]
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().split(";")[0]


def read(out: Path) -> str:
    return out.read_text(errors="replace") if out.exists() else ""


def task_hosts(logs: str) -> dict[int, set[str]]:
    """{global rank: the hosts it started on}, from pods's `Slurm task <rank> of <world> on <host>` lines."""
    hosts: dict[int, set[str]] = {}
    for rank, host in re.findall(r"Slurm task (\d+) of \d+ on ([\w.-]+) \(master", logs):
        hosts.setdefault(int(rank), set()).add(host)
    return hosts


@pytest.fixture(scope="module", params=[1, 2], ids=["2x1-sbatch", "2x2-launcher"])
def two_node_job(request, tmp_path_factory, torchrun_reference):
    """(tasks per node, the job's logs, its run dir, the one-node torchrun reference's run dir, world size).
    2 x 1 through scripts/slurm/two_nodes.sbatch as it is (a plain sbatch script), 2 x 2 through
    hydra/launcher=slurm. The torchrun reference runs on this machine while the job runs on Slurm's nodes."""
    tasks = request.param
    tmp = tmp_path_factory.mktemp(f"two_nodes_{tasks}")
    torchrun_reference.start(2 * tasks)
    if tasks == 1:
        run_dir, out = tmp / "run", tmp / "job.out"
        job = sbatch(out, *RUN, f"hydra.run.dir={run_dir}")
        try:
            wait_gone({job}, 600, lambda: read(out))
        finally:
            cancel({job})
        logs = read(out)
        assert job_state(job).startswith("COMPLETED"), job_state(job) + logs[-3000:]
    else:
        sweep = tmp / "sweep"
        proc = multirun(*MULTI, f"hydra.launcher.tasks_per_node={tasks}", *RUN, f"hydra.sweep.dir={sweep}")
        logs = _job_logs(sweep)
        assert proc.returncode == 0, proc.stderr[-2000:] + logs[-4000:]
        run_dir = run_dir_of(sweep)
    return tasks, logs, run_dir, torchrun_reference(2 * tasks), 2 * tasks


def test_job_spans_both_nodes_with_ranks_from_slurm(two_node_job):
    tasks, logs, _, _, world = two_node_job
    # rank r runs on node r // tasks: Slurm's block distribution, read by pods from SLURM_PROCID; no torchrun,
    # no MASTER_ADDR: the process group comes from Slurm's variables, master on the first node
    assert task_hosts(logs) == {r: {f"pods-n{1 + r // tasks}"} for r in range(world)}, logs[-3000:]
    said = set(re.findall(r"Slurm task \d+ of (\d+) on \S+ \(master ([\w.-]+):\d+\)", logs))
    assert said == {(str(world), "pods-n1")}, said


def test_two_node_job_matches_a_one_node_run(two_node_job):
    _, _, run_dir, ref, world = two_node_job
    assert_same_run(ref, run_dir, world)


def assert_same_run(ref: Path, run_dir: Path, world: int) -> None:
    """The records of `run_dir` are those of the one-node torchrun run `ref`, and its weights within the rank
    tests' tolerance."""
    a, b = read_metrics(ref / "metrics.jsonl"), read_metrics(run_dir / "metrics.jsonl")
    assert [(r["kind"], r["step"]) for r in b] == [(r["kind"], r["step"]) for r in a]  # rank 0 writes, once
    assert [r["step"] for r in b if r["kind"] == "train"] == [1, 2, 3]
    for x, y in zip(a, b):
        for k in (*SAME_RUN_KEYS, "eval/accuracy"):
            assert x.get(k) == y.get(k), (world, x["kind"], x["step"], k, x.get(k), y.get(k))
    wa, wb = (ckpt.read_weights(ckpt.latest_checkpoint(d / "checkpoints")) for d in (ref, run_dir))
    assert wa.keys() == wb.keys()
    for k in wa:  # the tolerance of tests/e2e/test_distributed.py's rank comparisons
        torch.testing.assert_close(wa[k], wb[k], rtol=1e-4, atol=1e-5)


# --- requests the partition cannot hold: one line, exit 2, nothing submitted ---------------------------

BAD = {
    "hydra.launcher.nodes=3": "hydra.launcher.nodes=3 but partition 'multi' has 2 node(s) (pods-n1, pods-n2)",
    "hydra.launcher.tasks_per_node=5": "tasks_per_node=5 x cpus_per_task=1 = 5 CPUs per node, but the nodes of "
    "partition 'multi' have 4 CPUs",
}


@pytest.mark.parametrize("bad", sorted(BAD))
def test_a_request_the_partition_cannot_hold_is_one_line(bad, tmp_path):
    proc = multirun(*MULTI, *RUN, bad, f"hydra.sweep.dir={tmp_path}/s", timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    errors = [x for x in proc.stderr.splitlines() if x.startswith("pods: error:")]
    assert len(errors) == 1 and BAD[bad] in errors[0], proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and not (tmp_path / "s" / ".submitit").exists()
    assert jobs_under(tmp_path) == set()  # nothing submitted, queued or ended


# --- requeue and time limit of a two-node job ------------------------------------------------------------

# test_slurm.py's requeue run (no periodic checkpoint: the job resumes from what its signal handler saved),
# as DDP over 2 nodes x 1 task
RUN_LONG = [*RUN_REQUEUE, "hardware.distributed=ddp", "hardware.num_threads=1"]


def uninterrupted_two_nodes(sweep: Path) -> Submitted:
    """The requeue test's run, uninterrupted, on the same two nodes: started, not waited for."""
    return Submitted([sys.executable, "-m", "pods.train", "-m", *MULTI, *RUN_LONG, f"hydra.sweep.dir={sweep}"],
                     sweep, cwd=ROOT, env=ENV)  # fmt: skip


def out_logs(sweep: Path) -> str:
    return "".join(p.read_text() for p in sorted((sweep / ".submitit").glob("*/*_log.out")))


def rank_events(sweep: Path) -> dict[int, list[tuple[str, int]]]:
    """{global rank: [(signal, step) of every save on a signal, in order]}, from each task's own log (a
    requeued job appends to it)."""
    events = {}
    for f in (sweep / ".submitit").glob("*/*_log.out"):
        rank = int(re.search(r"_(\d+)_log\.out$", f.name).group(1))  # <job>_<task>_log.out
        events[rank] = [
            (s, int(n)) for s, n in re.findall(r"(SIG\w+) at step (\d+): checkpoint saved", f.read_text())
        ]
    return events


def test_two_node_job_requeued_and_timed_out_resumes_exactly(tmp_path):
    sweep = tmp_path / "sweep"
    run_dir = sweep / run_name_of(*RUN_LONG, *SLOW)  # the requeued job's: SLOW's plugin knob is in its name
    # the uninterrupted run goes beside the requeued one once that one's handler is installed (it trains after
    # its requeue, or has saved on both signals): neither job kills anything, and 4 CPUs a node hold both
    ref_sweep, started = tmp_path / "uninterrupted", []
    try:
        requeue_and_time_limit([*MULTI, *RUN_LONG], sweep, run_dir, tmp_path / "submit.log", env=ENV,
                               beside=lambda: started.append(uninterrupted_two_nodes(ref_sweep)))  # fmt: skip
        if not started:
            started.append(uninterrupted_two_nodes(ref_sweep))
        proc = started[0].result()
    finally:
        for job in started:
            job.stop()
    assert proc.returncode == 0, proc.stderr[-2000:] + _job_logs(ref_sweep)[-4000:]
    uninterrupted = ref_sweep / run_name_of(*RUN_LONG)
    logs = out_logs(sweep)  # each task's stdout once (pods's lines go to its stderr too)
    events = rank_events(sweep)
    assert sorted(events) == [0, 1], events
    assert events[0] == events[1], events  # every rank stopped at the same step, on the same signal
    assert {s for s, _ in events[0]} == {"SIGTERM", "SIGUSR2"}, events
    # each rank came back on its own node after each stop (a time-limit signal that comes before pods's handler
    # is installed is submitit's: one more start, with no save), and resumed the run's directory each time
    starts = re.findall(r"JobEnvironment\(.*?hostname=([\w.-]+).*?global_rank=(\d+)", logs)
    on = {rank: [h for h, r in starts if int(r) == rank] for rank in (0, 1)}
    assert on[0] == ["pods-n1"] * len(on[0]) and on[1] == ["pods-n2"] * len(on[0]), starts
    assert len(on[0]) >= 1 + len(events[0]), starts
    resumed = re.findall(
        r"Slurm requeued this job \(restart \d+\): resuming " + re.escape(str(run_dir)), logs
    )
    assert len(resumed) == 2 * (len(on[0]) - 1), logs[-3000:]
    # one checkpoint per stop (rank 0 writes it), none other but the last
    final = read_metrics(run_dir / "metrics.jsonl")[-1]["step"]
    saved = {int(p.name.split("_")[1]) for p in ckpt.checkpoints(run_dir / "checkpoints")}
    assert saved <= {n for _, n in events[0]} | {final} and final in saved, (saved, events)
    a, b = read_metrics(uninterrupted / "metrics.jsonl"), read_metrics(run_dir / "metrics.jsonl")
    assert [(r["kind"], r["step"]) for r in b] == [(r["kind"], r["step"]) for r in a]  # each record once
    for x, y in zip(a, b):
        assert all(x.get(k) == y.get(k) for k in ("reward/mean", "update/loss", "eval/accuracy")), x["step"]
    wa, wb = (ckpt.read_weights(ckpt.latest_checkpoint(d / "checkpoints")) for d in (uninterrupted, run_dir))
    assert all(torch.equal(wa[k], wb[k]) for k in wa)  # bitwise


# --- a node that dies ----------------------------------------------------------------------------------


def node_tasks(node: str) -> list[int]:
    """The job's processes on `node` (submitit's task processes in its network namespace)."""
    pids = subprocess.run(["ip", "netns", "pids", node], capture_output=True, text=True).stdout.split()
    tasks = []
    for pid in pids:
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"submitit.core._submit" in cmdline:
            tasks.append(int(pid))
    return tasks


def saved_steps(run_dir: Path) -> list[int]:
    """The steps of `run_dir`'s complete checkpoints, read without touching them while the run saves (a save
    is published by a rename, trainer_state.pt inside; pods.checkpoint.checkpoints() would tidy up)."""
    done = (run_dir / "checkpoints").glob("step_*")
    return [int(p.name.split("_")[1]) for p in done if (p / "trainer_state.pt").is_file()]


def test_a_node_whose_tasks_die_ends_the_job_in_one_line_and_resumes(tmp_path):
    """Kill node pods-n2's task mid-run, once step 4's checkpoint is complete: the job ends with one line naming the node and the step, its newest
    complete checkpoint is intact, and resume=true runs it to its end, every record once."""
    sweep = tmp_path / "sweep"
    # 1 s a step (SLOW): the job is still training when step 4's checkpoint is complete, on any machine
    args = [*MULTI, *RUN, *SLOW, "max_steps=16", "eval.every_steps=0", f"hydra.sweep.dir={sweep}"]
    cmd = [sys.executable, "-m", "pods.train", "-m", *args]
    submit_log = tmp_path / "submit.log"
    proc = subprocess.Popen(cmd, cwd=ROOT, env=ENV, stdout=submit_log.open("w"), stderr=subprocess.STDOUT)
    killed = []
    try:
        deadline = time.monotonic() + 300
        while proc.poll() is None and not killed:
            if time.monotonic() > deadline:
                states = "; ".join(f"job {j}: {job_state(j)}" for j in sweep_jobs(sweep)) or "no job yet"
                pytest.fail(f"4 records not seen in 300 s ({states})\n{_job_logs(sweep)[-3000:]}")
            time.sleep(0.5)
            runs = list(sweep.glob("*/metrics.jsonl"))
            # past the checkpoint of step 4, while it trains. Not 4 records: step 4's record is written before
            # its checkpoint, and a kill in between left step 2's as the newest (once in a run beside 2 busy workers)
            if runs and max(saved_steps(runs[0].parent), default=0) >= 4:
                killed = node_tasks("pods-n2")
                for pid in killed:
                    os.kill(pid, signal.SIGKILL)
        assert killed, "the job ended before its tasks on pods-n2 could be killed"
        # the job leaves the queue. Not the submitter: without accounting (no sacct) submitit cannot tell a
        # job that ended without a result (the killed task wrote none) from one still running, and waits
        wait_gone(sweep_jobs(sweep), 300, lambda: _job_logs(sweep))
    finally:
        proc.kill()
        cancel(sweep_jobs(sweep))
    logs = _job_logs(sweep)
    lines = [x for x in logs.splitlines() if x.startswith("pods: error: lost")]
    assert len(lines) == 1, logs[-4000:]
    m = re.match(
        r"pods: error: lost node pods-n2 at step (\d+) \(.*\); the newest complete checkpoint is (\S+);",
        lines[0],
    )
    assert m, lines[0]
    step, newest = int(m.group(1)), Path(m.group(2))
    run_dir = run_dir_of(sweep)
    assert newest == ckpt.latest_checkpoint(run_dir / "checkpoints") and ckpt.verify(newest) is None
    assert 4 <= ckpt.read_meta(newest)["step"] <= step
    proc = multirun(*args, "resume=true", env={**ENV, "SLOW_CLOCK": "0"})  # the rest at full speed
    assert proc.returncode == 0, proc.stderr[-2000:] + _job_logs(sweep)[-3000:]
    train = [r["step"] for r in read_metrics(run_dir / "metrics.jsonl") if r["kind"] == "train"]
    assert train == list(range(1, 17))


# --- a node whose slurmd dies --------------------------------------------------------------------------

NODES_SCRIPT = ROOT / ".ci" / "slurm-nodes.sh"


def multi_nodes_up() -> bool:
    out = subprocess.run(["sinfo", "-h", "-N", "-p", "multi", "-o", "%T"], capture_output=True, text=True)
    return out.stdout.split() == ["idle", "idle"]


@pytest.fixture
def bring_back_pods_n2():
    """Restart pods-n2's slurmd (`.ci/slurm-nodes.sh start`) and return the node to service, until both nodes
    are idle again (bounded): in the test, and after it whatever happened, so that later tests find them."""

    def bring_back(timeout: float = 120) -> None:
        subprocess.run(["bash", str(NODES_SCRIPT), "start"], check=True, capture_output=True, timeout=60)
        deadline = time.monotonic() + timeout
        while not multi_nodes_up():
            # a node Slurm set down comes back by itself on registering (ReturnToService=2); if not, resume it
            resume = ["scontrol", "update", "nodename=pods-n2", "state=resume"]
            subprocess.run(resume, capture_output=True, timeout=60)
            if time.monotonic() > deadline:
                sinfo = subprocess.run(["sinfo", "-N", "-p", "multi"], capture_output=True, text=True).stdout
                pytest.fail(
                    f"pods-n1/pods-n2 not idle {timeout:.0f} s after pods-n2's slurmd restarted:\n{sinfo}"
                )
            time.sleep(1)

    yield bring_back
    bring_back()


def test_a_node_whose_slurmd_dies_ends_the_job_in_one_line_and_resumes(tmp_path, bring_back_pods_n2):
    """Kill pods-n2's slurmd (its task lives on) while the job trains: after SlurmdTimeout Slurm marks the node
    down and ends the job (--no-requeue here; the script's --requeue would put it back in the queue), whose
    rank 0 saves and says in one line which node was lost, at which step, and the checkpoint; the same script
    with resume=true runs the rest, every record once."""
    bring_back_pods_n2()  # both nodes idle before (an earlier test's job may still be completing)
    run_dir, out = tmp_path / "run", tmp_path / "job.out"
    # 1 s a step (SLOW) while Slurm notices: 60 steps outlast SlurmdTimeout (.ci/slurm.sh) and the pings
    args = [*RUN, *SLOW, "max_steps=60", "eval.every_steps=0", f"hydra.run.dir={run_dir}"]
    job = sbatch(out, *args, options=("--no-requeue",))
    try:
        deadline = time.monotonic() + 300
        while len(train_steps(run_dir)) < 4:  # past the checkpoint of step 4, while it trains
            if time.monotonic() > deadline or job not in (queued() or {job}):
                why = (
                    "did not reach step 4 in 300 s" if time.monotonic() > deadline else "ended before step 4"
                )
                pytest.fail(f"job {job} ({job_state(job)}) {why}\n{read(out)[-3000:]}")
            time.sleep(0.5)
        slurmd = int(Path("/run/slurmd-pods-n2.pid").read_text())
        os.kill(slurmd, signal.SIGKILL)
        wait_gone({job}, 300, lambda: read(out))
    finally:
        cancel({job})
    text = read(out)
    assert train_steps(run_dir)[-1] < 60, "the job ended before Slurm marked pods-n2 down\n" + text[-3000:]
    lines = [x for x in text.splitlines() if x.startswith("pods: error:")]
    assert len(lines) == 1, text[-4000:]
    m = re.match(
        r"pods: error: lost node pods-n2 at step (\d+) \(SIGTERM from Slurm: pods-n2 is down\S* \(Not responding\)\); "
        r"the newest complete checkpoint is (\S+); continue the run with resume=true$",
        lines[0],
    )
    assert m, lines[0]
    step, newest = int(m.group(1)), Path(m.group(2))
    assert newest == ckpt.latest_checkpoint(run_dir / "checkpoints") and ckpt.verify(newest) is None
    assert ckpt.read_meta(newest)["step"] == step >= 4  # saved at the step it stopped
    bring_back_pods_n2()
    out2 = tmp_path / "resume.out"
    job = sbatch(out2, *args, "resume=true", env={**ENV, "SLOW_CLOCK": "0"})
    try:
        wait_gone({job}, 600, lambda: read(out2))
    finally:
        cancel({job})
    assert job_state(job).startswith("COMPLETED"), job_state(job) + read(out2)[-3000:]
    assert train_steps(run_dir) == list(range(1, 61))


def train_steps(run_dir: Path) -> list[int]:
    f = run_dir / "metrics.jsonl"
    return [r["step"] for r in read_metrics(f) if r["kind"] == "train"] if f.exists() else []
