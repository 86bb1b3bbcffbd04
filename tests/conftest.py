"""Shared fixtures: compose configs the way `python -m pods.train` does, without starting a run."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

from pods.config import register_schema

CONF = str(Path(__file__).resolve().parent.parent / "conf")
register_schema()


def compose_cfg(overrides: list[str] | None = None, run_dir: str | Path = "outputs/test-run"):
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=CONF, version_base="1.3"):
        return compose("train", overrides=[f"run_dir={run_dir}", *(overrides or [])])


def run_name_of(*overrides: str) -> str:
    """The name `python -m pods.train <overrides>` gives its run directory (pods.identity; Hydra's own keys,
    the launcher's, left out: they are no part of the run's config)."""
    from pods.identity import of_config

    return of_config(compose_cfg([o for o in overrides if not o.startswith(("hydra.", "hydra/"))])).name


def random_qwen2(vocab: int, hidden: int, heads: int, kv_heads: int, layers: int = 2, seed: int = 0, **kw):
    """A randomly initialised Qwen2 of a toy shape (intermediate = 2 x hidden), built right after seeding torch
    so that the weights, and the random draws after it, are the same in every test that asks for it."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    cfg = Qwen2Config(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        **kw,
    )
    return Qwen2ForCausalLM(cfg)


@pytest.fixture
def make_cfg(tmp_path):
    def make(*overrides: str, run_dir: Path | None = None):
        return compose_cfg(list(overrides), run_dir or tmp_path / "run")

    return make


# Train-record keys whose values two runs must share to count as the same run (resume, DDP vs FSDP):
# one per stage (reward, update, selection, pre-rollout filter, rollout, batch).
SAME_RUN_KEYS = (
    "reward/mean",
    "update/loss",
    "update/grad_norm",
    "update/rows",
    "selector/kept_reward_mean",
    "prefilter/p_easy",
    "rollout/tokens",
    "rollout/rollouts",
    "train/groups",
)

# A few-second run of the tiny model: the one shrink, conf/debug/smoke.yaml (3 steps, 2 prompts, small data),
# on the CPU; tests add down-sampling that keeps fewer rollouts than it draws (8 -> 4) and an lr large enough
# that 3 steps visibly move the weights.
SMOKE = ["debug=smoke", "hardware=cpu", "selector.n=8", "selector.m=4", "optim.lr=1e-3"]
# Two or four CPU processes (gloo) of one small run through the whole loop: pre-rollout filter, dynamic
# sampling, PODS's down-sampling, a checkpoint every 2 steps. tests/e2e/test_distributed.py's runs, and the
# Slurm jobs of tests/slurm/ compared with its torchrun launch (torchrun_reference, below).
DDP_RUN = [*SMOKE, "algo.prompts_per_step=4", "arm=greso+dynamic_sampling+max_variance-n64-m16", "selector.n=8",
           "selector.m=4", "checkpoint.every_steps=2", "hardware.distributed=ddp", "hardware.num_threads=1"]  # fmt: skip


def ddp_run_command(world: int, run_dir: Path, logs: Path, *extra: str) -> list[str]:
    """torchrun with `world` processes of DDP_RUN into run_dir, each rank's output under logs; an override in
    `extra` replaces DDP_RUN's of the same key (hardware.distributed=fsdp, say)."""
    from bench.harness import torchrun_command

    keys = {e.split("=", 1)[0] for e in extra}
    run = [o for o in DDP_RUN if o.split("=", 1)[0] not in keys]
    return [*torchrun_command(world), "--log-dir", str(logs), "--redirects", "3", "-m", "pods.train", *run,
            f"hydra.run.dir={run_dir}", *extra]  # fmt: skip


# PODS_TEST_ORDER_SEED=<int>: run the tests in a random order (scripts/ci_stress.sh --random-order), to show that
# none depends on another having run first. Modules are shuffled, then the tests inside each, so a module's
# fixtures are still built once; the same seed gives the same order.
ORDER_SEED = "PODS_TEST_ORDER_SEED"


def pytest_report_header(config):
    seed = os.environ.get(ORDER_SEED)
    return f"test order: shuffled with {ORDER_SEED}={seed}" if seed else None


# With pytest-xdist (`-n 4`, README): the tests of one module run on one worker, so that a module's fixtures (often
# a whole training run) are built once. The tests of tests/slurm/ make two units, each on one worker, one test
# after the other: test_multinode.py's, on the two-node partition `multi` (they kill that partition's tasks and
# slurmd, so no other job may run there meanwhile), and the rest, on partition `debug`, whose jobs never meet
# theirs (the two-task job of test_slurm_distributed.py goes with the shorter, `debug` one; its torchrun reference
# of 2 processes is built once for both units, tests/slurm/conftest.py). Both units go first (their jobs mostly
# wait on Slurm while the other two workers run the CPU-bound tests; under `-n 4` on 2 cores the PODS_TEST_TIMELINE
# .load file read 2.0 busy cores in every minute but the last, 2026-11-28), then the modules that hold a
# `long` test, then those with a `slow` one, then the rest: the long units start early and the short ones fill in
# at the end. (xdist's --dist loadgroup would group by marks, but with pytest 9.2 it silently stops grouping:
# pytest-xdist issue 1386.)
SLURM_UNIT = "tests/slurm/"
TWO_NODE_UNIT = "tests/slurm/ (partition multi)"
TWO_NODE_MODULES = ("tests/slurm/test_multinode.py",)


def xdist_unit(nodeid: str) -> str:
    """The unit of work a test belongs to under `-n`: tests/slurm/'s two (above), else its module (or doctest
    file)."""
    if nodeid.startswith(TWO_NODE_MODULES):
        return TWO_NODE_UNIT
    return SLURM_UNIT if nodeid.startswith(SLURM_UNIT) else nodeid.split("::")[0]


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist's: without xdist, never called
def pytest_xdist_make_scheduler(config, log):
    """`-n N` (xdist's --dist load) hands out whole units, in the order the workers collected them (below)."""
    if config.getvalue("dist") != "load":
        return None  # another --dist given on the command line: xdist's own
    from xdist.scheduler import LoadScopeScheduling

    class ByUnit(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return xdist_unit(nodeid)

    config.option.loadscopereorder = False  # xdist would sort the units by their number of tests
    return ByUnit(config, log)


# The smoke tests of device-script parts whose experiments are decided (headline v4's pilot, issue 38's step-cost
# script, the GRESO probe): about 13 CPU-min of the 2-core machine in 2026-11, so not in CI; run them with
# PODS_DECIDED_SMOKE=1.
DECIDED_SMOKE = pytest.mark.skipif(
    os.environ.get("PODS_DECIDED_SMOKE") != "1",
    reason="a decided experiment's device-script smoke: run with PODS_DECIDED_SMOKE=1",
)


def script_env(**extra: str) -> dict[str, str]:
    """The environment for a repository script a test runs (`bash scripts/...`): this interpreter's folder first on
    PATH, so the script's `python`/`python3` is the one running the tests (with pods's dependencies) whether or not
    a virtual environment is activated, plus the test's own variables."""
    return {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}", **extra}


def pytest_configure(config):
    """Under `-n N`, each worker's torch gets its share of the cores (at least one thread), and so do the helper
    processes it starts (OMP_NUM_THREADS; a pods run on the CPU still picks its own, hardware.num_threads=0): with
    3 workers on 2 cores, two threads each leave OpenMP threads waiting on descheduled ones, and tests/rollout,
    reward, update and selector took 215 s instead of 134 s on the 2-core machine (2026-11-28)."""
    if hasattr(config, "workerinput") and "OMP_NUM_THREADS" not in os.environ:
        import torch

        from pods.threads import usable_cores

        n = max(1, usable_cores() // int(config.workerinput.get("workercount", 1)))
        os.environ["OMP_NUM_THREADS"] = str(n)
        torch.set_num_threads(n)


# PODS_TEST_TIMELINE=<file>: every test's worker, start and end (seconds since the epoch), node id, the CPU
# seconds it cost (the worker's own and its finished child processes': a run it started and waited for; not a
# Slurm job's) and its outcome (passed, failed, skipped; error: setup or teardown failed), one line each,
# tab-separated, appended by every xdist worker as the test ends (so a run stopped early still names its
# failures). The main process also writes, to <file>.load, the machine's busy cores every 5 s (from /proc/stat).
# scripts/test_timeline.py prints each worker's units in order (and draws them with --png), where the CPU went,
# how busy the machine was, the slowest units and the failures.
TIMELINE = "PODS_TEST_TIMELINE"


def _cpu_seconds() -> tuple[float, float]:
    import resource

    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, kids.ru_utime + kids.ru_stime


_OUTCOME = pytest.StashKey[str]()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    report = (yield).get_result()
    if report.failed:  # a failed setup or teardown is an error, whatever the call did
        item.stash[_OUTCOME] = "failed" if report.when == "call" else "error"
    elif report.skipped and item.stash.get(_OUTCOME, "passed") == "passed":
        item.stash[_OUTCOME] = "skipped"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    path = os.environ.get(TIMELINE)
    start, (own0, kids0) = time.time(), _cpu_seconds()
    yield
    if path:
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        own, kids = _cpu_seconds()
        with open(path, "a") as f:  # one short write per line: the workers' lines do not interleave
            f.write(
                f"{worker}\t{start:.3f}\t{time.time():.3f}\t{item.nodeid}\t{own - own0:.2f}\t{kids - kids0:.2f}"
                f"\t{item.stash.get(_OUTCOME, 'passed')}\n"
            )


def _sample_load(path: str, every_s: float = 5.0) -> None:
    """Append `time<TAB>busy cores` every `every_s` seconds, from /proc/stat (pods.threads' reading; Linux only)."""
    from pods.threads import _cpu_times

    n, last = os.cpu_count() or 1, _cpu_times()
    while last is not None:
        time.sleep(every_s)
        now = _cpu_times()
        if now is None or now[1] <= last[1]:
            continue
        with open(path, "a") as f:
            f.write(f"{time.time():.3f}\t{n * (now[0] - last[0]) / (now[1] - last[1]):.2f}\n")
        last = now


def pytest_sessionstart(session):
    path = os.environ.get(TIMELINE)
    if path and not hasattr(session.config, "workerinput") and os.path.exists("/proc/stat"):
        import threading

        threading.Thread(target=_sample_load, args=(path + ".load",), daemon=True, name="pods-load").start()


def pytest_collection_modifyitems(config, items):
    seed = os.environ.get(ORDER_SEED)
    if seed:
        rng = random.Random(int(seed))
        modules: dict[str, list] = {}
        for item in items:
            modules.setdefault(str(item.path), []).append(item)
        groups = list(modules.values())
        rng.shuffle(groups)
        for group in groups:
            rng.shuffle(group)
        items[:] = [item for group in groups for item in group]
    if hasattr(config, "workerinput"):  # an xdist worker: the order of the units (above)
        units: dict[str, list] = {}
        for item in items:
            units.setdefault(xdist_unit(item.nodeid), []).append(item)

        def rank(unit: str) -> int:  # a stable sort: the (shuffled) order holds inside each rank
            if unit == TWO_NODE_UNIT:
                return 0
            if unit == SLURM_UNIT:
                return 1
            marks = {mark.name for item in units[unit] for mark in item.iter_markers()}
            return 2 if "long" in marks else 3 if "slow" in marks else 4

        items[:] = [item for unit in sorted(units, key=rank) for item in units[unit]]


@pytest.fixture(scope="session")
def torchrun_reference(tmp_path_factory):
    """world size -> the run directory of DDP_RUN launched on one node by torchrun with that many processes: what
    a Slurm job of as many tasks, on one node or two, must reproduce, and tests/e2e/test_distributed.py's DDP run.
    Each once a session: under xdist the units that use it (on several workers) share it, the first to ask builds
    it and the others wait for it. `torchrun_reference.start(world)` launches it without waiting, to run beside a
    Slurm job; the call waits."""
    refs = TorchrunReferences(tmp_path_factory)
    yield refs
    refs.stop()


class TorchrunReferences:
    """Each world's reference lives in <shared>/torchrun<world>/ (<shared>: the xdist session's temporary folder,
    which every worker of the session sees, else this process's own). Making that folder claims the build; the
    builder's watcher thread writes `rc` there (atomically) when torchrun exits, and whoever asks waits for it."""

    def __init__(self, tmp_path_factory):
        base = tmp_path_factory.getbasetemp()
        self.shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
        self.runs: dict[int, Path] = {}
        self.procs: list[subprocess.Popen] = []

    def start(self, world: int) -> None:
        tmp = self.shared / f"torchrun{world}"
        try:
            tmp.mkdir()
        except FileExistsError:
            return  # built, or being built, by this worker or another
        cmd = ddp_run_command(world, tmp / "run", tmp / "logs")
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        root = Path(__file__).resolve().parents[1]
        with (tmp / "torchrun.err").open("w") as err:
            proc = subprocess.Popen(cmd, cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=err)
        self.procs.append(proc)

        def watch() -> None:
            rc = proc.wait()
            (tmp / "rc.tmp").write_text(str(rc))
            os.replace(tmp / "rc.tmp", tmp / "rc")

        threading.Thread(target=watch, daemon=True, name=f"torchrun{world}").start()

    def __call__(self, world: int, timeout_s: float = 900) -> Path:
        if world not in self.runs:
            self.start(world)
            tmp = self.shared / f"torchrun{world}"
            deadline = time.monotonic() + timeout_s
            while not (tmp / "rc").exists():
                assert time.monotonic() < deadline, (
                    f"the torchrun reference of world {world} ({tmp}) took {timeout_s} s"
                )
                time.sleep(0.5)
            rc = int((tmp / "rc").read_text())
            ranks = "".join(
                f"\n--- {f}\n{f.read_text()[-2500:]}" for f in sorted((tmp / "logs").rglob("std*.log"))
            )
            assert rc == 0, f"torchrun exited {rc}: " + (tmp / "torchrun.err").read_text()[-1500:] + ranks
            self.runs[world] = tmp / "run"
        return self.runs[world]

    def stop(self) -> None:
        for proc in self.procs:
            proc.kill()
            proc.wait()
