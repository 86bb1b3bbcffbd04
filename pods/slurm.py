"""Running under Slurm (hydra/launcher=slurm, hydra-submitit-launcher): checks before anything is submitted,
the process group from Slurm's own variables, and time limits and preemption that lose nothing.

    python -m pods.train -m hydra/launcher=slurm hydra.launcher.partition=<yours> experiment=...

- Before submitting (`SubmitCheck`, a Hydra callback of the preset): the partition exists, GPUs asked for
  are there, it has the nodes asked for and their CPUs hold tasks_per_node x cpus_per_task, tasks_per_node
  fits the hardware profile, the sweep directory is not another sweep's. One line.
- In the job (`setup`): a job that Slurm requeued resumes its own run directory (the preset's run
  directories do not depend on the submit time); several tasks get RANK/WORLD_SIZE/MASTER_ADDR from Slurm
  (submitit's TorchDistributedEnvironment), so hardware=multi_gpu/fsdp need no torchrun line.
- Signals (`RequeueOnSignal`): SIGUSR2 (the preset asks Slurm for it `signal_delay_s` before the time limit)
  and SIGTERM (preemption, `scontrol requeue`) are noted; at the next step boundary every rank saves a
  checkpoint, then submitit requeues the job (SIGUSR2) or Slurm does (preemption/requeue) and the process ends.
- A node lost (`lost_rank_ends_the_job`, `RequeueOnSignal`): its tasks die, and the others' collectives fail;
  or its slurmd dies, and Slurm marks it down after SlurmdTimeout and ends or requeues the job (SIGTERM). Either
  way the job ends in one line naming the node (from the peer address gloo reports, else the job's node that
  Slurm says is down), the step and the newest complete checkpoint to resume from.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

from hydra.experimental.callback import Callback as HydraCallback
from omegaconf import DictConfig, OmegaConf, open_dict

from pods.errors import ConfigError
from pods.signals import StopOnSignal, latest_name

log = logging.getLogger("pods")


def handler() -> StopOnSignal:
    """The run's signal handling: Slurm's (time limit, preemption, requeue) in a Slurm job, else Ctrl-C/SIGTERM
    (pods/signals.py, which knows nothing of Slurm: the imports go one way)."""
    return RequeueOnSignal() if in_job() else StopOnSignal()


def in_job() -> bool:
    return "SLURM_JOB_ID" in os.environ


def requeued() -> bool:
    """This job ran before and was requeued (time limit, preemption, `scontrol requeue`)."""
    return int(os.environ.get("SLURM_RESTART_COUNT", "0") or 0) > 0


def this_job() -> str:
    """This job's id for scontrol/squeue: `<array job>_<task>` in an array, else the job id."""
    job = os.environ.get("SLURM_ARRAY_JOB_ID") or os.environ["SLURM_JOB_ID"]
    task = os.environ.get("SLURM_ARRAY_TASK_ID")
    return f"{job}_{task}" if task else job


# states in which Slurm is bringing a job back by itself (a requeue under way, or done)
REQUEUEING = {"COMPLETING", "PENDING", "REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD", "CONFIGURING"}


def job_state(job: str) -> str:
    """The job's state as squeue says it (RUNNING, COMPLETING, PENDING, ...), or "" if squeue cannot say."""
    try:
        out = subprocess.run(
            ["squeue", "-h", "-j", job, "-o", "%T"], capture_output=True, text=True, timeout=60
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return out.stdout.split()[0] if out.returncode == 0 and out.stdout.split() else ""


def num_tasks() -> int:
    return int(os.environ.get("SLURM_NTASKS", "1") or 1) if in_job() else 1


# --- in the job ---------------------------------------------------------------------------------------


def setup(cfg: DictConfig) -> None:
    """Before the run's checks: resume a requeued job, and export the process group's variables when Slurm
    started several tasks. Nothing outside a Slurm job."""
    if not in_job():
        return
    distributed = OmegaConf.select(cfg, "hardware.distributed", default="none")
    tasks = num_tasks()
    if tasks > 1 and distributed == "none":
        raise ConfigError(
            f"Slurm started {tasks} tasks but hardware.distributed=none runs one process: {tasks} copies of the "
            "same run would write one directory; set hydra.launcher.tasks_per_node=1, or hardware=multi_gpu/fsdp"
        )
    if tasks > 1 and "WORLD_SIZE" not in os.environ:  # srun, not torchrun: Slurm's variables say who is who
        from submitit.helpers import TorchDistributedEnvironment

        # submitit knows its own jobs by SUBMITIT_EXECUTOR; a plain sbatch + srun script is a Slurm job too
        os.environ.setdefault("SUBMITIT_EXECUTOR", "slurm")
        # every task sees all GPUs of its node; accelerate takes cuda:LOCAL_RANK. No WORLD_SIZE: any RANK or
        # LOCAL_* already set came from the submitting shell (sbatch exports it), not from this job
        env = TorchDistributedEnvironment().export(set_cuda_visible_devices=False, overwrite=True)
        log.info(
            "Slurm task %d of %d on %s (master %s:%d)",
            env.rank,
            env.world_size,
            socket.gethostname(),
            env.master_addr,
            env.master_port,
        )
    if requeued() and not cfg.resume:
        log.warning(
            "Slurm requeued this job (restart %s): resuming %s",
            os.environ["SLURM_RESTART_COUNT"],
            cfg.run_dir,
        )
        with open_dict(cfg):
            cfg.resume = True


class RequeueOnSignal(StopOnSignal):
    """A time-limit warning (SIGUSR2) or a preemption/requeue (SIGTERM) ends the run at the next step
    boundary with a checkpoint, so that the requeued job loses nothing; Ctrl-C (SIGINT, an interactive srun)
    as everywhere (pods/signals.py, whose mechanism this extends: the handlers only note the signal)."""

    SIGNALS = (signal.SIGUSR2, signal.SIGTERM, signal.SIGINT)  # the previous SIGUSR2 handler: submitit's

    def after_save(self, trainer, signum: int) -> None:
        # SIGTERM (15) outranks SIGUSR2 (12), here and across ranks: Slurm is requeueing or ending the job
        # itself, and a requeue of our own would then be refused
        if signum == signal.SIGINT:
            return super().after_save(trainer, signum)
        name = signal.Signals(signum).name
        if signum == signal.SIGTERM and trainer.dist.is_main and len(nodes := job_nodes()) > 1:
            down = down_nodes(nodes)  # Slurm ends (or requeues) a job one of whose nodes it marked down
            if down:
                node, state = next(iter(down.items()))
                slurm_then = (
                    "Slurm requeues the job once its nodes are up"
                    if requeueable(this_job())
                    else "continue the run with resume=true"
                )
                say_lost(f"node {node}", trainer, f"{name} from Slurm: {node} is {state}", slurm_then)
                return
        then = "requeueing the job" if signum == signal.SIGUSR2 else "exiting; Slurm requeues a preempted job"
        log.warning("%s at step %d: checkpoint saved in %s; %s", name, trainer.step, trainer.run_dir, then)
        if signum == signal.SIGUSR2:
            self._requeue(trainer.dist.is_main)
        # then StopOnSignal exits 128 + signum. SIGTERM: Slurm requeues (preemption, scontrol requeue) or ends it

    def after_start_up(self, run_dir, signum: int) -> None:
        """The time-limit warning during start-up (slow imports or model loading): nothing to save, but the job
        must come back as after a save, else it is lost. Only a run of one process abandons its start-up."""
        if signum != signal.SIGUSR2:
            return super().after_start_up(run_dir, signum)
        log.warning(
            "SIGUSR2 during start-up: exiting before the first step (newest checkpoint: %s); requeueing the job",
            latest_name(run_dir),
        )
        self._requeue(True)

    def _requeue(self, is_main: bool) -> None:
        """Requeue this job: submitit's handler under submitit (it updates its pickle, runs `scontrol requeue`
        on rank 0 and exits), else `scontrol requeue` from rank 0 (a plain sbatch script). A refused requeue
        is not an error of the run: Slurm may be requeueing the job already (a preemption or `scontrol
        requeue` at the same moment); the log says which."""
        previous = self.previous.get(signal.SIGUSR2)
        try:
            if callable(previous):
                previous(signal.SIGUSR2, None)
            elif is_main:
                cmd = ["scontrol", "requeue", this_job()]
                subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=60)
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as err:
            why = (getattr(err, "stderr", None) or str(err)).strip()[:200]
            state = job_state(this_job())
            if state in REQUEUEING:
                log.warning(
                    "`scontrol requeue` was refused (%s): Slurm is requeueing this job already (%s)",
                    why,
                    state,
                )
            else:
                log.error(
                    "`scontrol requeue` failed (%s; job state %s): this job will not come back by itself; "
                    "resume its runs with resume=true",
                    why,
                    state or "unknown",
                )


# an address in gloo's errors about a peer: "Connection closed by peer [10.0.0.2]:41234", "Read error [...]"
PEER = re.compile(r"\[([0-9A-Fa-f.:]+)\]:\d+")


def job_nodes() -> list[str]:
    """The job's nodes, from SLURM_JOB_NODELIST (`scontrol show hostnames`), or [] outside a job."""
    nodelist = os.environ.get("SLURM_JOB_NODELIST")
    if not nodelist:
        return []
    try:
        out = subprocess.run(
            ["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True, timeout=60
        )
    except (OSError, subprocess.TimeoutExpired):
        return []
    return out.stdout.split()


# sinfo's states of a node Slurm no longer counts on; a trailing `*` (any state) means it does not respond
DOWN = {"down", "fail", "failing"}


def down_nodes(nodes: list[str]) -> dict[str, str]:
    """Those of `nodes` that Slurm marked down or that do not respond: {node: sinfo's state and reason, e.g.
    "down* (Not responding)"}; {} if sinfo cannot say."""
    if not nodes:
        return {}
    cmd = ["sinfo", "-h", "-N", "-n", ",".join(nodes), "-o", "%N|%T|%E"]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return {}
    down = {}
    for line in out.stdout.splitlines() if out.returncode == 0 else []:
        node, state, reason = (line.split("|", 2) + ["", ""])[:3]
        if state.endswith("*") or state.rstrip("~#!%$@^-") in DOWN:
            reason = reason.strip()
            down[node] = f"{state} ({reason})" if reason and reason != "none" else state
    return down


def requeueable(job: str) -> bool:
    """Slurm requeues this job when one of its nodes fails (sbatch --requeue, the preset's)."""
    try:
        out = subprocess.run(
            ["scontrol", "show", "job", "-o", job], capture_output=True, text=True, timeout=60
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return " Requeue=1 " in f" {out.stdout} "


def lost_node(error: str, nodes: list[str]) -> str | None:
    """The node of the peer a collective lost, from the address in gloo's error (one of the job's nodes,
    resolved), or None."""
    addresses = set(PEER.findall(error))
    for node in nodes:
        try:
            if socket.gethostbyname(node) in addresses or node in addresses:
                return node
        except OSError:
            continue
    return None


@contextlib.contextmanager
def lost_rank_ends_the_job(trainer):
    """Several tasks: a rank that dies (its node, or its process, killed) makes the collectives of the others
    fail. Such a failure ends this rank in one line naming the node that was lost (from the peer address in
    the error) and the step, and the newest complete checkpoint to resume from (`resume=true`)."""
    try:
        yield
    except RuntimeError as e:  # torch.distributed.DistBackendError and its kin are RuntimeErrors
        if trainer.dist.world <= 1 or not (isinstance(e, _dist_errors()) or PEER.search(str(e))):
            raise
        nodes = job_nodes()
        # gloo names the peer's address when the connection broke; a timeout names none: then ask Slurm
        node = lost_node(str(e), nodes) or next(iter(down_nodes(nodes)), None)
        who = f"node {node}" if node else "a peer rank (its node is not in the error, and Slurm has all up)"
        say_lost(who, trainer, _cause(str(e)), "continue the run with resume=true")
        sys.exit(1)


def say_lost(who: str, trainer, cause: str, then: str) -> None:
    """The one line of a job that lost a node: which, at which step, why, and what to resume from."""
    from pods import checkpoint as ckpt
    from pods import cli

    newest = ckpt.latest_checkpoint(Path(trainer.run_dir) / "checkpoints")
    saved = f"the newest complete checkpoint is {newest}" if newest else "no checkpoint was written yet"
    msg = f"lost {who} at step {trainer.step} ({cause}); {saved}; {then}"
    cli.error_line(msg)


def _cause(error: str) -> str:
    """gloo's words about the peer ("Connection closed by peer [10.0.0.2]:41234"), else the error's first line."""
    m = re.search(r"[A-Z][\w ]*?\[[0-9A-Fa-f.:]+\]:\d+", error)
    return m.group(0) if m else error.splitlines()[0][:160]


def _dist_errors() -> tuple[type, ...]:
    import torch.distributed as dist

    return tuple(
        getattr(dist, n) for n in ("DistError", "DistBackendError", "DistNetworkError") if hasattr(dist, n)
    )


# --- before submitting --------------------------------------------------------------------------------


class SubmitCheck(HydraCallback):
    """Hydra callback of hydra/launcher=slurm: refuse in one line, before anything is submitted, a partition
    Slurm does not have, GPUs the partition does not have, more nodes than it has or tasks that do not fit a
    node's CPUs, tasks that do not fit the hardware profile, and a sweep directory that already holds another
    sweep's runs (unless resume=true)."""

    def on_multirun_start(self, config: DictConfig, **kwargs) -> None:
        try:
            check_submission(config)
        except ConfigError as e:
            print(f"pods: error: {e}", file=sys.stderr)
            sys.exit(2)


def check_submission(config: DictConfig) -> None:
    launcher = config.hydra.launcher
    partition = launcher.get("partition")
    partitions = _sinfo("%R")
    if partition and partition not in partitions:
        raise ConfigError(
            f"hydra.launcher.partition={partition!r}: Slurm has no such partition; it has {', '.join(partitions)}"
        )
    gpus = int(launcher.get("gpus_per_node") or 0)
    where = f"partition {partition!r}" if partition else "the default partition"
    if gpus > 0 and not any("gpu" in g for g in _sinfo("%G", partition)):
        raise ConfigError(
            f"hydra.launcher.gpus_per_node={gpus} but {where} has no GPUs (sinfo lists no gres/gpu); set "
            "hydra.launcher.gpus_per_node=0 and a CPU hardware profile (hardware=cpu)"
        )
    hw = config.hardware
    tasks = int(launcher.get("tasks_per_node") or 1)
    check_nodes(int(launcher.get("nodes") or 1), tasks, int(launcher.get("cpus_per_task") or 1), partition)
    if tasks > 1 and hw.distributed == "none":
        raise ConfigError(
            f"hydra.launcher.tasks_per_node={tasks} but hardware={hw.name} runs one process "
            "(hardware.distributed=none); set tasks_per_node=1, or hardware=multi_gpu/fsdp"
        )
    if hw.distributed != "none" and hw.device == "cuda" and gpus and tasks != gpus:
        raise ConfigError(
            f"hydra.launcher.tasks_per_node={tasks} must equal gpus_per_node={gpus} for hardware={hw.name} "
            "(one process per GPU)"
        )
    if hw.device == "cuda" and gpus == 0:
        raise ConfigError(
            f"hardware={hw.name} runs on a GPU but hydra.launcher.gpus_per_node=0; ask for GPUs or use hardware=cpu"
        )
    sweep = Path(str(config.hydra.sweep.dir))
    if not config.get("resume") and sweep.is_dir() and any(sweep.glob("*/metrics.jsonl")):
        raise ConfigError(
            f"hydra.sweep.dir={sweep} already holds a sweep's runs; pass resume=true to continue them, or "
            "choose another hydra.sweep.dir"
        )


def check_nodes(nodes: int, tasks: int, cpus_per_task: int, partition: str | None) -> None:
    """The job fits the partition: `nodes` nodes, each with CPUs for `tasks` x `cpus_per_task` (sbatch would
    take the job, then leave it pending or refuse it after submitit's traceback)."""
    cpus = _node_cpus(partition)
    if not cpus:  # no default partition: sbatch says so itself
        return
    where = f"partition {partition!r}" if partition else "the default partition"
    if nodes > len(cpus):
        raise ConfigError(
            f"hydra.launcher.nodes={nodes} but {where} has {len(cpus)} node(s) ({', '.join(sorted(cpus))})"
        )
    need = tasks * cpus_per_task
    if need > sorted(cpus.values(), reverse=True)[nodes - 1]:
        have = "/".join(str(c) for c in sorted(set(cpus.values())))
        raise ConfigError(
            f"hydra.launcher.tasks_per_node={tasks} x cpus_per_task={cpus_per_task} = {need} CPUs per node, but "
            f"the nodes of {where} have {have} CPUs; lower tasks_per_node or cpus_per_task"
        )


def _node_cpus(partition: str | None) -> dict[str, int]:
    """{node: CPUs} of `partition`, or of the default partition (sinfo marks it with `*`)."""
    rows = [line.split() for line in _sinfo_lines("%N %c %P", nodes=True)]
    return {
        node: int(cpus)
        for node, cpus, part in rows
        if (part.rstrip("*") == partition if partition else part.endswith("*"))
    }


def _sinfo_lines(field: str, nodes: bool = False) -> list[str]:
    if shutil.which("sinfo") is None:
        raise ConfigError("hydra/launcher=slurm: `sinfo` is not on PATH; submit from a Slurm login node")
    cmd = ["sinfo", "-h", *(["-N"] if nodes else []), "-o", field]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        raise ConfigError(f"hydra/launcher=slurm: `{' '.join(cmd)}` failed: {out.stderr.strip()[:200]}")
    return out.stdout.splitlines()


def _sinfo(field: str, partition: str | None = None) -> list[str]:
    if shutil.which("sinfo") is None:
        raise ConfigError("hydra/launcher=slurm: `sinfo` is not on PATH; submit from a Slurm login node")
    cmd = ["sinfo", "-h", "-o", field, *(["-p", partition] if partition else [])]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        raise ConfigError(f"hydra/launcher=slurm: `{' '.join(cmd)}` failed: {out.stderr.strip()[:200]}")
    return sorted({x.strip().rstrip("*") for x in out.stdout.split()})
