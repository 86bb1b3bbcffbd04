"""Down-sampling (PODS): after rollout, keep m of the n rollouts of each prompt.

A selector is a pure function `fn(rewards, m, generator) -> keep`:
    rewards: (P, n) float tensor, one row per prompt group
    keep:    (P, m) long tensor of distinct column indices into each row, ascending
Register a new one with `@register_selector("name")`; `selector.name=name` then uses it. Every module of
this package is imported here, so a new selector file under pods/selector/ registers itself.
"""

from pods.registry import import_submodules
from pods.selector.selectors import SELECTORS, downsample, register_selector

import_submodules(__name__)

__all__ = ["SELECTORS", "downsample", "register_selector"]
