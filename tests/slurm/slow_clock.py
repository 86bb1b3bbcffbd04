"""A test plugin (plugins=[tests.slurm.slow_clock], +reward.weights.slow_clock=0.0): a reward term of weight 0
that sleeps SLOW_CLOCK_S seconds (default 1) per call until pods has saved on both of Slurm's stops, a
time-limit signal and a requeue (its job logs say "SIGUSR2 at step" and "SIGTERM at step"), so that a smoke
run outlives them without more compute, whichever comes first, and then finishes fast; not at all where
SLOW_CLOCK=0 (a run resumed by hand). The total reward, and so the run, is unchanged."""

import os
import time
from pathlib import Path

from pods.reward import register_reward

STOPS = ("SIGUSR2 at step", "SIGTERM at step")


def _saved_on_both_stops() -> bool:
    # SUBMITIT_FOLDER is the sweep's `.submitit/%j`, the placeholder unexpanded: look in every job's folder
    jobs = Path(os.environ.get("SUBMITIT_FOLDER", "/nonexistent")).parent
    logs = "".join(p.read_text(errors="replace") for p in jobs.glob("*/*_log.out"))
    return all(stop in logs for stop in STOPS)


@register_reward("slow_clock")
def slow_clock(completions, answers, **kw):
    if os.environ.get("SLOW_CLOCK") != "0" and not _saved_on_both_stops():
        time.sleep(float(os.environ.get("SLOW_CLOCK_S", "1")))
    return [0.0] * len(completions)
