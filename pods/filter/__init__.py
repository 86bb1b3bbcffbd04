"""Pre-rollout filtering: decide, before generating, which sampled prompts are worth rollouts.

A prefilter is a class with `keep(prompt_ids, epoch) -> list[bool]`, `observe(prompt_ids, epoch, rewards)`,
`end_step(epoch)`, `metrics()`, `state_dict()` and `load_state_dict()`. Register with
`@register_prefilter("name")`; `prefilter.name=name` then uses it (and a conf/prefilter/<name>.yaml makes
`prefilter=name` work).
"""

from pods.filter.greso import PREFILTERS, GresoFilter, NoFilter, build_prefilter, register_prefilter

__all__ = ["PREFILTERS", "GresoFilter", "NoFilter", "build_prefilter", "register_prefilter"]
