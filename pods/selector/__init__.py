"""Down-sampling (PODS): after rollout, keep m of the n rollouts of each prompt.

A selector is a pure function `fn(rewards, m, generator, **context) -> keep`:
    rewards: (P, n) float tensor, one row per prompt group
    keep:    (P, m) long tensor of distinct column indices into each row, ascending
    context: what it names of CONTEXT, by keyword: `lengths`, `tokens`, `correct` (each (P, n)), `prompt_ids`
Register a new one with `@register_selector("name")`; `selector.name=name` then uses it. Every module of
this package is imported here, so a new selector file under pods/selector/ registers itself.
"""

from pods.registry import import_submodules
from pods.selector.selectors import CONTEXT, SELECTORS, downsample, register_selector

import_submodules(__name__)

__all__ = ["CONTEXT", "SELECTORS", "downsample", "register_selector"]
