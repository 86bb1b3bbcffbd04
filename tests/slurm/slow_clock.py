"""A test plugin (plugins=[tests.slurm.slow_clock], +reward.weights.slow_clock=0.0): a reward term of weight 0
that sleeps 1 s per step until pods has saved on a time-limit signal (its job log says "SIGUSR2 at step"), so
that a smoke run outlives Slurm's time-limit signal without more compute, and then finishes fast; not at all
where SLOW_CLOCK=0 (a run resumed by hand). The total reward, and so the run, is unchanged."""

import os
import time
from pathlib import Path

from pods.reward import register_reward


def _saved_on_sigusr2() -> bool:
    # SUBMITIT_FOLDER is the sweep's `.submitit/%j`, the placeholder unexpanded: look in every job's folder
    jobs = Path(os.environ.get("SUBMITIT_FOLDER", "/nonexistent")).parent
    return any("SIGUSR2 at step" in p.read_text(errors="replace") for p in jobs.glob("*/*_log.out"))


@register_reward("slow_clock")
def slow_clock(completions, answers, **kw):
    if os.environ.get("SLOW_CLOCK") != "0" and not _saved_on_sigusr2():
        time.sleep(1.0)
    return [0.0] * len(completions)
