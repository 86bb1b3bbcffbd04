"""Ctrl-C and SIGTERM end a run with a checkpoint, everywhere (pods/slurm.py's RequeueOnSignal adds Slurm's
time-limit signal and the requeue on top of this).

    first SIGINT or SIGTERM   noted; start-up, rollout, reward or eval under way is abandoned at once
    (or SIGHUP)               (pods/stopping.py: one process) and the state as of the last completed step
                              saved, else the run saves at the next step boundary (or when the loop ends); rank
                              0 logs one line naming the checkpoint and the command that resumes it, and the
                              process exits 128 + the signal's number (130 SIGINT, 143 SIGTERM, 129 SIGHUP)
    checkpoint.stop_deadline_s  after the first signal, a watchdog exits (128 + signal) without a new checkpoint
                              if the run has not stopped by then: before the scheduler's SIGKILL
    a second SIGINT, or the   exits at once (128 + its number), saving nothing: a save under way is left in its
    first signal again        temporary directory, which no resume reads (pods/checkpoint.py writes step_N/
                              atomically); the same signal again within REPEAT_S counts as one delivery

The handler saves nothing itself: a save inside it would catch the loop half-way through a step. Every rank
stops at the same step (the highest signal number any rank caught wins: the save is a collective under FSDP).
"""

from __future__ import annotations

import logging
import os
import shlex
import signal
import sys
import threading
import time
from pathlib import Path

from pods import multirun, stopping
from pods.callbacks import Callback
from pods.multirun import hydra_value

log = logging.getLogger("pods")
DEADLINE_S = 20.0  # checkpoint.stop_deadline_s's default, until the config is read
REPEAT_S = 1.0  # a SIGTERM or SIGHUP again within this: the same stop delivered twice (a scheduler and srun)


def resume_command(run_dir) -> str:
    """The command line that continues this run: the job's own overrides (Hydra's), resume=true and the run
    directory; `<your overrides>` where the process was not started by `python -m pods.train`."""
    try:
        from hydra.core.hydra_config import HydraConfig

        overrides = list(HydraConfig.get().overrides.task)
    except Exception:  # noqa: BLE001 - not under Hydra (a Trainer built in code)
        overrides = ["<your overrides>"]
    keep = [o for o in overrides if o.split("=", 1)[0].lstrip("+~") not in ("resume", "hydra.run.dir")]
    args = [*keep, "resume=true", f"hydra.run.dir={hydra_value(str(run_dir))}"]
    return " ".join(["python -m pods.train", *(a if a.startswith("<") else shlex.quote(a) for a in args)])


def latest_name(run_dir) -> str:
    """The checkpoint `latest` names, read without touching the directory (a signal handler may run this
    in the middle of a save): `latest` always names a complete checkpoint."""
    root = Path(run_dir) / "checkpoints"
    try:
        name = (root / "latest").read_text()[:64].strip()
    except OSError:
        return "no checkpoint"
    return str(root / name) if name.startswith("step_") else "no checkpoint"


class StopOnSignal(Callback):
    """Installs handlers for SIGNALS on construction (uninstall() puts the previous ones back). SIGHUP (the
    terminal closed) ends a run like SIGTERM; a SIGINT or SIGHUP the process was started ignoring (nohup, a
    background job of a script) stays ignored."""

    SIGNALS: tuple = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    KEEP_IGNORED: tuple = (signal.SIGINT, signal.SIGHUP)

    def __init__(self):
        self.caught, self.first, self.first_at = 0, 0, 0.0
        self.run_dir = None  # known once a trainer reaches a step boundary: named by a second Ctrl-C
        # seconds the watchdog gives a stop; None: no watchdog (a handler built by hand). pods.train.run sets
        # DEADLINE_S, then checkpoint.stop_deadline_s once the config is checked
        self.deadline_s: float | None = None
        self.watchdog: threading.Timer | None = None
        self.snapshot = None  # the state at the current step's start (pods/stopping.py)
        self.at_once = stopping.Region.at_once = one_process()  # abandon work at once: one process only
        stopping.Region.pending = 0  # a new run: no stop asked for yet
        self.previous = {
            s: signal.signal(s, self._note)
            for s in self.SIGNALS
            if not (s in self.KEEP_IGNORED and signal.getsignal(s) == signal.SIG_IGN)
        }

    def uninstall(self) -> None:
        if self.watchdog is not None:
            self.watchdog.cancel()
        stopping.Region.pending, stopping.Region.at_once = 0, False
        for s, handler in self.previous.items():
            if signal.getsignal(s) == self._note:
                signal.signal(s, handler if handler is not None else signal.SIG_DFL)

    def _note(self, signum, frame) -> None:
        if self.caught and self._again(signum):
            self._exit_now(signum, f"second {signal.Signals(signum).name}: exiting now without saving")
        first = not self.caught
        self.caught = max(self.caught, signum)  # SIGTERM (15) > SIGUSR2 (12) > SIGINT (2) > SIGHUP (1)
        if not first:
            return
        self.first, self.first_at = signum, time.monotonic()
        again = "; press Ctrl-C again to stop at once, without saving" if signum == signal.SIGINT else ""
        within = f" within {self.deadline_s:g} s (checkpoint.stop_deadline_s)" if self.deadline_s else ""
        log.warning(
            "%s: stopping%s, with the state of the last completed step saved%s",
            signal.Signals(signum).name,
            within,
            again,
        )
        if self.deadline_s:
            self.watchdog = threading.Timer(self.deadline_s, self._deadline_passed, (signum,))
            self.watchdog.daemon = True
            self.watchdog.start()
        if self.at_once:
            stopping.Region.pending = signum  # an abandonable region not yet entered is skipped
            if stopping.in_abandonable():
                raise stopping.StopRequested(signum)

    def _again(self, signum: int) -> bool:
        """Ctrl-C again, or the first signal again (not one delivery seen twice, REPEAT_S): not another kind
        (Slurm's SIGTERM after its time-limit SIGUSR2 is Slurm ending the job we are saving)."""
        if signum == signal.SIGINT:
            return True
        again = signum == self.first and signum != getattr(signal, "SIGUSR2", None)
        return again and time.monotonic() - self.first_at >= REPEAT_S

    def _deadline_passed(self, signum: int) -> None:
        name = signal.Signals(signum).name
        self._exit_now(
            signum,
            f"{name}: the run had not stopped {self.deadline_s:g} s after the signal "
            "(checkpoint.stop_deadline_s): exiting now without a new checkpoint",
        )

    def _exit_now(self, signum: int, what: str) -> None:
        """No save, no cleanup that could block. A save under way stays a temporary directory (never read by a
        resume); the newest complete checkpoint is still `latest`."""
        where = f"; the newest checkpoint is {latest_name(self.run_dir)}" if self.run_dir else ""
        print(f"pods: {what}{where}", file=sys.stderr, flush=True)
        for h in [*logging.getLogger().handlers, *log.handlers]:  # the log file's lines so far
            h.flush()
        os._exit(128 + signum)

    # --- at step boundaries --------------------------------------------------------------------------------

    def on_step_start(self, trainer) -> None:
        self.run_dir = getattr(trainer, "run_dir", None)
        self.check(trainer)
        if self.at_once and getattr(trainer, "components", None):  # the Trainer's; not a stand-in's
            # the Trainer's own, taken just before (pods/faults.py), else one of our own
            self.snapshot = getattr(trainer, "snapshot", None) or stopping.StepSnapshot(trainer)

    def on_loop_end(self, trainer) -> None:
        self.check(trainer)  # a signal during the last step: stop before the final eval

    def check(self, trainer) -> None:
        signum = int(trainer.dist.max(self.caught))  # all ranks stop at the same step
        if not signum:
            return
        if trainer.changes != trainer.saved_changes:
            trainer.save()
        self.stopped(trainer, signum)

    def abandoned(self, trainer, run_dir) -> None:
        """StopRequested reached pods.train.run: the work under way was dropped; save the state as of the last
        completed step (none before the first step) and exit 128 + signal."""
        signum = self.caught or stopping.Region.pending
        if trainer is None:  # still starting: nothing of this start to save
            self.run_dir = run_dir
            self.after_start_up(run_dir, signum)
            multirun.note_jobs_not_run(signum)
            sys.exit(128 + signum)
        stopping.settle(trainer, self.snapshot)
        self.stopped(trainer, signum)

    def after_start_up(self, run_dir, signum: int) -> None:
        """A stop during start-up (one process: only then is start-up abandoned): say how to go on."""
        log.warning(
            "%s during start-up: exiting before the first step; newest checkpoint: %s; run again with: %s",
            signal.Signals(signum).name,
            latest_name(run_dir),
            resume_command(run_dir),
        )

    def stopped(self, trainer, signum: int) -> None:
        """The run is saved: say so, note it in history.jsonl, name a multirun's jobs not run, exit."""
        self.after_save(trainer, signum)
        note = getattr(trainer, "history_event", None)  # the Trainer's; not a stand-in's
        if callable(note):
            note(
                "stop",
                signal=signal.Signals(signum).name,
                step=trainer.step,
                checkpoint=latest_name(trainer.run_dir),
            )
        if trainer.dist.is_main:
            multirun.note_jobs_not_run(signum)
        sys.exit(128 + signum)

    def after_save(self, trainer, signum: int) -> None:
        """Say what was saved and how to go on (rank 0)."""
        if trainer.dist.is_main:
            log.warning(
                "%s at step %d: checkpoint %s; resume with: %s",
                signal.Signals(signum).name,
                trainer.step,
                latest_name(trainer.run_dir),
                resume_command(trainer.run_dir),
            )


def one_process() -> bool:
    """This run is one process (no torchrun, no Slurm job of several tasks)."""
    world = os.environ.get("WORLD_SIZE") or os.environ.get("SLURM_NTASKS") or "1"
    return int(world) <= 1 if world.isdigit() else False
