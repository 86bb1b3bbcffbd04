"""Pre-rollout filtering: decide, before generating, which sampled prompts are worth rollouts.

A prefilter is a class with the `Prefilter` interface (pods/prefilter/registry.py: `keep(prompt_ids, epoch) ->
list[bool]`, `observe(prompt_ids, epoch, correct)`, `end_step(epoch)`, `metrics()`, `state_dict()` and
`load_state_dict()`), registered with `@register_prefilter("name")`; `prefilter.name=name` then uses it (and a
conf/prefilter/<name>.yaml makes `prefilter=name` work). Every module of this package is imported here, so a
new filter file registers itself.
"""

from pods.prefilter.greso import GresoFilter
from pods.prefilter.registry import (
    PREFILTERS,
    NoFilter,
    Prefilter,
    PrefilterStage,
    build_prefilter,
    register_prefilter,
)
from pods.registry import import_submodules

import_submodules(__name__)

__all__ = [
    "PREFILTERS",
    "GresoFilter",
    "NoFilter",
    "Prefilter",
    "PrefilterStage",
    "build_prefilter",
    "register_prefilter",
]
