"""A test plugin (plugins=[tests.slurm.slow_clock], +reward.weights.slow_clock=0.0): a reward term of weight 0
that sleeps 0.25 s per step until the job's second restart, so that a smoke run outlives Slurm's time-limit
signal without more compute, and then finishes fast. The total reward, and so the run, is unchanged."""

import os
import time

from pods.reward import register_reward


@register_reward("slow_clock")
def slow_clock(completions, answers, **kw):
    if int(os.environ.get("SLURM_RESTART_COUNT", "0")) < 2:
        time.sleep(0.25)
    return [0.0] * len(completions)
