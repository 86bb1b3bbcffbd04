"""A component that breaks at run time (a reward, selector, prefilter, advantage estimator or loss: a plugin's
or pods' own) ends the run as a stop signal does: one line, exit 2, the last completed step saved.

    what                                        the line (PluginError; a reward's NaN: NonFiniteError)
    a reward's count, type or NaN; a raise      reward 'x' returned 3 values for 16 completions ... / raised
    a selector's indices (shape, range, ...)    selector 'x' returned repeated indices in a row: Tensor ...
    a prefilter's keep() answer; a raise        prefilter 'x' keep() returned 3 decisions for 2 prompts ...
    an advantage's shape, dtype or NaN          advantage 'x' returned shape (8,): Tensor ...
    a loss that is no scalar, has no gradient   loss 'x' returned nan from finite log-probs and advantages
    or is NaN from finite inputs

Each is checked where the value comes back into the loop (pods/reward/registry.py, pods/selector/selectors.py,
pods/prefilter/registry.py, pods/update/advantages.py, pods/update/loss.py); an exception it raises is named by
pods.registry.calling. Then, here:

    one process, the weights not yet moved      the state of the step's start is restored (StepSnapshot, as
    (a fault before the update's first          for a stop signal: pods/stopping.py) and saved if the newest
    optimizer step)                             checkpoint is older; `resume=true` continues from it and
                                                reaches what an uninterrupted run would have
    an eval's fault                             its step is complete: saved, the eval pending (a resume runs
                                                it first)
    several processes, or a fault after an      nothing is saved (ranks may have stopped at different points;
    optimizer step (a loss in algo.mu's         the weights are no longer the step's start); the line names
    second pass)                                the newest checkpoint, intact

The line ends with what was saved and how to go on: `...; the run stopped at step 3 with step 2 saved in
checkpoint <dir>/checkpoints/step_0000002: fix the component, then continue the run with resume=true`.
"""

from __future__ import annotations

from contextlib import contextmanager

from pods import stopping
from pods.errors import NonFiniteError, component_fault
from pods.signals import latest_name


def count_optimizer_steps(trainer) -> None:
    """trainer.optimizer_steps counts the optimizer's steps: a fault after one cannot go back to the step's
    start (its weights are not in StepSnapshot)."""
    trainer.optimizer_steps = 0

    def counted(*_):
        trainer.optimizer_steps += 1

    # accelerate's AcceleratedOptimizer (several processes) wraps the torch optimizer without its hook lists
    optimizer = getattr(trainer.optimizer, "optimizer", trainer.optimizer)
    if hasattr(optimizer, "register_step_post_hook"):
        optimizer.register_step_post_hook(counted)


def snapshot(trainer) -> stopping.StepSnapshot | None:
    """The state of the step about to start, for a fault or a stop to go back to (one process only)."""
    if trainer.dist.world != 1:
        return None
    return stopping.StepSnapshot(trainer)


@contextmanager
def saved_on_fault(trainer, where: str):
    """Around a step (`where`: "step 3") or an eval ("the eval at step 2"): a component's fault saves the last
    completed step where it can (the module docstring) and is raised again with what was saved."""
    try:
        yield
    except Exception as e:
        if not component_fault(e):
            raise
        raise with_note(e, stopped(trainer, where, e)) from e


def stopped(trainer, where: str, e: BaseException) -> str:
    """Make the newest checkpoint the last completed step's where one process can; returns what the line adds."""
    snap = getattr(trainer, "snapshot", None)
    steps = getattr(trainer, "optimizer_steps", 0)
    moved = not trainer.eval_pending and snap is not None and steps != snap.optimizer_steps  # an eval's: done
    why = "several processes" if trainer.dist.world != 1 else "the optimizer had stepped" if moved else None
    if why is None:
        stopping.settle(trainer, snap)  # back to the step's start (an eval's: the step stays) and saved
    done = trainer.step if trainer.eval_pending or snap is None else snap.step  # the last completed step
    newest = latest_name(trainer.run_dir)
    trainer.history_event("fault", step=done, checkpoint=newest, error=str(e)[:500])
    if why is not None:
        return f"; the run stopped at {where} without saving ({why}); the newest checkpoint is {newest}"
    if newest == "no checkpoint":
        return f"; the run stopped at {where}, before any step completed: nothing to save"
    return (
        f"; the run stopped at {where} with step {done} saved in checkpoint {newest}: fix the component, "
        "then continue the run with resume=true"
    )


def with_note(e: BaseException, note: str) -> BaseException:
    """`e` again, of its own type, its message followed by `note`."""
    if isinstance(e, NonFiniteError):  # what the note says replaces pods/guard.py's "the run stops here"
        return NonFiniteError(e.what, e.detail.removesuffix("; the run stops here") + note, e.step)
    return type(e)(f"{e}{note}")
