"""Reward stage: `build_reward(reward)(completions, answers) -> RewardOutput` (reward: pods.config.RewardConfig).

Reward functions live in a registry (`@register_reward("name")`), and a config weighs them by name.
Grading is bounded in time per answer and per batch, runs in a pool of worker processes, and never runs
model text; see grading.py. Plain numbers are compared exactly; numbers.py states the rule. Every module of
this package is imported here, so a new file of reward functions registers itself.
"""

from pods.registry import import_submodules
from pods.reward.grading import Grader, extract_answer
from pods.reward.numbers import Number, numbers_equal, parse_number
from pods.reward.preflight import check_on_data
from pods.reward.registry import REWARDS, Reward, RewardOutput, RewardStage, build_reward, register_reward

import_submodules(__name__)  # functions.py registers accuracy and format

__all__ = [
    "REWARDS",
    "Grader",
    "Number",
    "Reward",
    "RewardOutput",
    "RewardStage",
    "build_reward",
    "check_on_data",
    "extract_answer",
    "numbers_equal",
    "parse_number",
    "register_reward",
]
