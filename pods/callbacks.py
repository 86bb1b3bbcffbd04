"""Hooks into the training loop, for benchmarks and tools: pass instances as `Trainer(preflight(cfg), run_dir,
callbacks=[...])`. Each method gets the trainer; `on_step_end` also gets the step's record (the train line
of metrics.jsonl, without the fields the logger adds). The loop ignores what they return.

    class StepTimes(Callback):
        def on_step_start(self, trainer):
            self.t0 = time.perf_counter()

        def on_step_end(self, trainer, record):
            print(trainer.step, time.perf_counter() - self.t0, record["timing/generation"])
"""

from __future__ import annotations

import logging


class Callback:
    def on_step_start(self, trainer) -> None:
        """Before the step's prompts are drawn."""

    def on_step_end(self, trainer, record: dict) -> None:
        """After the update and the step's record are logged, before any eval or checkpoint."""

    def on_loop_end(self, trainer) -> None:
        """After the last step, before the final eval and checkpoint."""


ZERO_SIGNAL_STEPS = 3  # steps in a row that train on nothing for want of reward variance before the warning


class ZeroVarianceWarning(Callback):
    """The loop's own: one warning, the first time ZERO_SIGNAL_STEPS steps in a row rolled out groups but
    trained on nothing, because in every group all n rollouts got the same reward (zero variance: every
    advantage 0, the update skipped). The run goes on (a later step may differ); the warning names the
    sampling temperature, under which the rollouts of a prompt agree, and the count."""

    def __init__(self, temperature: float, n: int, is_main: bool = True):
        self.temperature, self.n, self.is_main = temperature, n, is_main
        self.streak = self.rollouts = 0
        self.warned = False

    def on_step_end(self, trainer, record: dict) -> None:
        rolled = record.get("rollout/rollouts", 0.0)
        if not (record.get("update/skipped") and rolled):  # trained on something, or rolled out nothing
            self.streak = self.rollouts = 0
            return
        self.streak, self.rollouts = self.streak + 1, self.rollouts + int(rolled)
        if self.streak >= ZERO_SIGNAL_STEPS and not self.warned and self.is_main:
            self.warned = True
            step = trainer.step
            logging.getLogger("pods").warning(
                "steps %d-%d trained on nothing: in each, every group's selector.n=%d rollouts got the same "
                "reward (zero variance, so every advantage is 0; %d rollouts in all). At sampling.temperature=%g "
                "the rollouts of a prompt agree: raise it, or train on prompts the policy solves only sometimes",
                step - self.streak + 1,
                step,
                self.n,
                self.rollouts,
                self.temperature,
            )
