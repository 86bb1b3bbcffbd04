"""Down-sampling (PODS): after rollout, keep m of the n rollouts of each prompt.

A selector is a pure function `fn(rewards, m, generator) -> keep`:
    rewards: (P, n) float tensor, one row per prompt group
    keep:    (P, m) long tensor of distinct column indices into each row, ascending
Register a new one with `@register_selector("name")`; `selector.name=name` then uses it.
"""

from pods.selection.selectors import SELECTORS, downsample, register_selector

__all__ = ["SELECTORS", "downsample", "register_selector"]
