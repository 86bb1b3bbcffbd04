"""The pre-rollout filter's extension point: the `Prefilter` interface, its registry and the no-op filter."""

from __future__ import annotations

from typing import Protocol

import torch

from pods.registry import Registry


class Prefilter(Protocol):
    """Decides, before generating, which sampled prompts get rollouts; learns from the rewards it sees.

    Built as `cls(settings, seed)` (settings: the `prefilter` group, pods.config.PrefilterConfig). Same calls on
    every rank.
    """

    def keep(self, prompt_ids: list[int], epoch: int) -> list[bool]: ...

    def observe(self, prompt_ids: list[int], epoch: int, rewards: torch.Tensor) -> None:
        """rewards: (P, n) correctness (1.0 or 0.0) of the groups generated for prompt_ids."""

    def end_step(self, epoch: int) -> None: ...

    def metrics(self) -> dict[str, float]:
        """The step's filter/* metrics."""

    def state_dict(self) -> dict: ...

    def load_state_dict(self, state: dict) -> None: ...


PREFILTERS: Registry[type[Prefilter]] = Registry("prefilter")


def register_prefilter(name: str):
    """Decorator: `@register_prefilter("name")` on a Prefilter class makes `prefilter.name=name` build it."""
    return PREFILTERS.register(name)


def build_prefilter(cfg, seed: int) -> Prefilter:
    """The filter `cfg.name` (pods.config.PrefilterConfig: the name and the filter's own knobs)."""
    return PREFILTERS.get_or_raise(cfg.name, "prefilter.name")(cfg, seed)


@register_prefilter("none")
class NoFilter:
    """Keep every prompt (GRPO, PODS, dynamic sampling alone)."""

    def __init__(self, cfg=None, seed: int = 0):
        pass

    def keep(self, prompt_ids: list[int], epoch: int) -> list[bool]:
        return [True] * len(prompt_ids)

    def observe(self, prompt_ids: list[int], epoch: int, rewards: torch.Tensor) -> None:
        pass

    def end_step(self, epoch: int) -> None:
        pass

    def metrics(self) -> dict[str, float]:
        return {}

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass
