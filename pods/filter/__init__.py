"""Pre-rollout filtering: decide, before generating, which sampled prompts are worth rollouts.

A prefilter is a class with the `Prefilter` interface (pods/filter/registry.py), registered with
`@register_prefilter("name")`; `selector.prefilter=name` then uses it. Every module of this package is
imported here, so a new filter file registers itself.
"""

from pods.filter.greso import GresoFilter
from pods.filter.registry import PREFILTERS, NoFilter, Prefilter, build_prefilter, register_prefilter
from pods.registry import import_submodules

import_submodules(__name__)

__all__ = ["PREFILTERS", "GresoFilter", "NoFilter", "Prefilter", "build_prefilter", "register_prefilter"]
