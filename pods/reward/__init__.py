"""Reward stage: `build_reward(cfg)(completions, answers) -> RewardOutput`.

Reward functions live in a registry (`@register_reward("name")`), and a config weighs them by name.
Grading is bounded in time per completion and never runs model text; see grading.py.
"""

from pods.reward import functions  # noqa: F401  (registers accuracy and format)
from pods.reward.grading import Grader, extract_answer, parse_number
from pods.reward.registry import REWARDS, Reward, RewardOutput, build_reward, register_reward

__all__ = [
    "REWARDS",
    "Grader",
    "Reward",
    "RewardOutput",
    "build_reward",
    "extract_answer",
    "parse_number",
    "register_reward",
]
