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


class Callback:
    def on_step_start(self, trainer) -> None:
        """Before the step's prompts are drawn."""

    def on_step_end(self, trainer, record: dict) -> None:
        """After the update and the step's record are logged, before any eval or checkpoint."""

    def on_loop_end(self, trainer) -> None:
        """After the last step, before the final eval and checkpoint."""
