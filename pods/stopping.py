"""A stop that arrives before the scheduler's SIGKILL: pods/signals.py notes the signal, this module makes the
stop quick (checkpoint.stop_deadline_s, 20 s by default, inside Slurm's and Kubernetes' 30 s grace).

    where the signal lands                what happens
    start-up, rollout, reward             abandoned at once: the handler raises StopRequested in the main
    (`abandonable` regions)               thread, the run restores the state of the step's start (taken by
                                          StepSnapshot) and saves it if the newest checkpoint is older
    eval                                  abandoned at once; its step is complete and saved, the eval
                                          marked pending: a resume runs it first
    the update, a save, a record          finished; the run stops at the next step boundary or region
    anything still running at the         the deadline watchdog (pods/signals.py) exits without a new
    deadline                              checkpoint; the newest one stays intact (saves are atomic)

Why restore instead of save as is: a step abandoned part-way has drawn prompts, advanced the random streams
and the prefilter's memory, but not moved the weights; the checkpoint must be one an uninterrupted run could
have taken at the last step boundary, so that the resume is bitwise the same run. Abandoning at once is for
a run of one process: ranks abandoning at different collectives would wait on each other forever, so a run of
several ranks stops at the next step boundary, bounded by the watchdog.
"""

from __future__ import annotations

import copy
import logging
from contextlib import contextmanager

from pods.errors import component_fault

log = logging.getLogger("pods")


class StopRequested(BaseException):
    """A stop signal landed in abandonable work. A BaseException, as KeyboardInterrupt: a reward plugin's
    `except Exception` must not swallow it."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


class Region:
    """Whether the main thread is in abandonable work, and a stop already asked for: process-wide, like the
    signal handlers that read them (one run per process)."""

    depth = 0
    at_once = False  # a stop abandons work at once: a run of one process, its handler installed
    pending = 0  # the signal of a stop that may abandon work (set by the handler of a one-process run)


@contextmanager
def abandonable():
    """Work a stop signal may cut short at once: nothing it does is saved before it ends. A stop asked for
    before it starts (during the update) skips it."""
    if Region.pending:
        raise StopRequested(Region.pending)
    Region.depth += 1
    try:
        yield
    finally:
        Region.depth -= 1


@contextmanager
def abandonable_eval(trainer):
    """An eval a stop or a component's fault (pods/faults.py) may cut short. Its step is complete: the
    checkpoint holds it with the eval pending (a resume runs it first) and the random streams as the eval found
    them (one process: several save nothing then)."""
    one = Region.at_once or getattr(getattr(trainer, "dist", None), "world", 0) == 1
    rng = copy.deepcopy(trainer.rng.state_dict()) if one else None
    try:
        with abandonable():
            yield
    except BaseException as e:
        if not (isinstance(e, StopRequested) or component_fault(e)):
            raise
        if rng is not None:
            trainer.rng.load_state_dict(rng)
        trainer.eval_pending = True
        raise
    trainer.eval_pending = False


def in_abandonable() -> bool:
    return Region.depth > 0


class StepSnapshot:
    """The state a checkpoint at the last step boundary holds, copied at the step's start: everything the
    checkpoint saves but the weights and optimizer, which a step changes only in its update (`optimizer_steps`:
    the trainer's count then, pods/faults.py)."""

    def __init__(self, trainer):
        self.step, self.last_eval_step, self.changes = trainer.step, trainer.last_eval_step, trainer.changes
        self.optimizer_steps = getattr(trainer, "optimizer_steps", 0)
        self.lines = trainer.logger.lines if trainer.logger else None  # metrics.jsonl lines it covers
        states = {k: c.state_dict() for k, c in trainer.components().items()}
        self.states = copy.deepcopy({**states, "rng": trainer.rng.state_dict()})

    def restore(self, trainer) -> None:
        for name, c in trainer.components().items():
            c.load_state_dict(self.states[name])
        trainer.rng.load_state_dict(self.states["rng"])
        trainer.step, trainer.last_eval_step, trainer.changes = self.step, self.last_eval_step, self.changes
        if trainer.logger:  # the lines it covers (a step writes its record only after its update)
            trainer.logger.lines = self.lines


def settle(trainer, snapshot: StepSnapshot | None) -> None:
    """After StopRequested or a component's fault (pods/faults.py): make the newest checkpoint hold the state as
    of the last completed step."""
    gen_copy = getattr(trainer.backend, "copy", None)
    if getattr(gen_copy, "merged", False):  # a generate cut short with the adapters merged into the base
        gen_copy.restore()
    if trainer.changes == trainer.saved_changes:
        return  # the newest checkpoint is the last completed step: the abandoned work is simply dropped
    if not trainer.eval_pending:  # a step under way: back to its start (its eval: the step stays, see above)
        if snapshot is None:  # only before the first step, when nothing is unsaved
            log.warning("stop: no state of a completed step to save; the newest checkpoint stays")
            return
        snapshot.restore(trainer)
    if trainer.changes != trainer.saved_changes:
        trainer.save()
