"""Ctrl-C and SIGTERM end a run with a checkpoint, everywhere (pods/slurm.py's RequeueOnSignal adds Slurm's
time-limit signal and the requeue on top of this).

    first SIGINT or SIGTERM   noted; at the next step boundary (or when the loop ends) every rank saves a
    (or SIGHUP)               checkpoint, rank 0 logs one line naming it and the command that resumes it, and
                              the process exits 128 + the signal's number (130 SIGINT, 143 SIGTERM, 129 SIGHUP)
    a second SIGINT           exits at once (130), saving nothing: a save under way is left in its temporary
                              directory, which no resume reads (pods/checkpoint.py writes step_N/ atomically)

The handler only notes the signal: saving inside it would catch the loop half-way through a step. Every rank
stops at the same step (the highest signal number any rank caught wins: the save is a collective under FSDP).
"""

from __future__ import annotations

import logging
import os
import shlex
import signal
import sys
from pathlib import Path

from pods.callbacks import Callback

log = logging.getLogger("pods")


def resume_command(run_dir) -> str:
    """The command line that continues this run: the job's own overrides (Hydra's), resume=true and the run
    directory; `<your overrides>` where the process was not started by `python -m pods.train`."""
    try:
        from hydra.core.hydra_config import HydraConfig

        overrides = list(HydraConfig.get().overrides.task)
    except Exception:  # noqa: BLE001 - not under Hydra (a Trainer built in code)
        overrides = ["<your overrides>"]
    keep = [o for o in overrides if o.split("=", 1)[0].lstrip("+~") not in ("resume", "hydra.run.dir")]
    args = [*keep, "resume=true", f"hydra.run.dir={run_dir}"]
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
        self.caught = 0
        self.run_dir = None  # known once a trainer reaches a step boundary: named by a second Ctrl-C
        self.previous = {
            s: signal.signal(s, self._note)
            for s in self.SIGNALS
            if not (s in self.KEEP_IGNORED and signal.getsignal(s) == signal.SIG_IGN)
        }

    def uninstall(self) -> None:
        for s, handler in self.previous.items():
            if signal.getsignal(s) == self._note:
                signal.signal(s, handler if handler is not None else signal.SIG_DFL)

    def _note(self, signum, frame) -> None:
        if signum == signal.SIGINT and self.caught:
            self._exit_now()
        first = not self.caught
        self.caught = max(self.caught, signum)  # SIGTERM (15) > SIGUSR2 (12) > SIGINT (2) > SIGHUP (1)
        if first:
            again = "; press Ctrl-C again to stop at once, without saving" if signum == signal.SIGINT else ""
            log.warning(
                "%s: stopping with a checkpoint at the next step boundary%s",
                signal.Signals(signum).name,
                again,
            )

    def _exit_now(self) -> None:
        """The second Ctrl-C: no save, no cleanup that could block. A save under way stays a temporary
        directory (never read by a resume); the newest complete checkpoint is still `latest`."""
        where = f"; the newest checkpoint is {latest_name(self.run_dir)}" if self.run_dir else ""
        print(f"pods: second SIGINT: exiting now without saving{where}", file=sys.stderr, flush=True)
        for h in [*logging.getLogger().handlers, *log.handlers]:  # the log file's lines so far
            h.flush()
        os._exit(128 + signal.SIGINT)

    # --- at step boundaries --------------------------------------------------------------------------------

    def on_step_start(self, trainer) -> None:
        self.run_dir = getattr(trainer, "run_dir", None)
        self.check(trainer)

    def on_loop_end(self, trainer) -> None:
        self.check(trainer)  # a signal during the last step: stop before the final eval

    def check(self, trainer) -> None:
        signum = int(trainer.dist.max(self.caught))  # all ranks stop at the same step
        if not signum:
            return
        if trainer.changes != trainer.saved_changes:
            trainer.save()
        self.after_save(trainer, signum)
        note = getattr(trainer, "history_event", None)  # the Trainer's; not a stand-in's
        if callable(note):
            note(
                "stop",
                signal=signal.Signals(signum).name,
                step=trainer.step,
                checkpoint=latest_name(trainer.run_dir),
            )
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
