"""The pre-rollout filter's extension point: the `Prefilter` interface, its registry and the no-op filter."""

from __future__ import annotations

from typing import Protocol

import torch

from pods.registry import Registry


class Prefilter(Protocol):
    """Decides, before generating, which sampled prompts get rollouts; learns from the correctness it sees.

    Built as `cls(settings, seed)` (settings: the dataclass its registry entry declares, from
    `prefilter.<name>.*`, or None). Same calls on every rank.
    """

    def keep(self, prompt_ids: list[int], epoch: int) -> list[bool]: ...

    def observe(self, prompt_ids: list[int], epoch: int, correct: torch.Tensor) -> None:
        """correct: (P, n) correctness (1.0 or 0.0) of the groups generated for prompt_ids."""

    def end_step(self, epoch: int) -> None: ...

    def metrics(self) -> dict[str, float]:
        """The step's prefilter/* metrics."""

    def state_dict(self) -> dict: ...

    def load_state_dict(self, state: dict) -> None: ...


PREFILTERS: Registry[type[Prefilter]] = Registry("prefilter")


def register_prefilter(name: str, settings: type | None = None):
    """Decorator: `@register_prefilter("name")` on a Prefilter class makes `prefilter.name=name` build it.
    `settings`: a dataclass of the filter's own knobs, set as `prefilter.<name>.<knob>`."""
    return PREFILTERS.register(name, settings)


def build_prefilter(group, seed: int) -> Prefilter:
    """The filter `group.name` (pods.config.PrefilterConfig), built with its own settings (None if its
    registry entry declares none)."""
    return PREFILTERS.get_or_raise(group.name, "prefilter.name")(group.own(), seed)


@register_prefilter("none")
class NoFilter:
    """Keep every prompt (GRPO, PODS, dynamic sampling alone)."""

    def __init__(self, cfg=None, seed: int = 0):
        pass

    def keep(self, prompt_ids: list[int], epoch: int) -> list[bool]:
        return [True] * len(prompt_ids)

    def observe(self, prompt_ids: list[int], epoch: int, correct: torch.Tensor) -> None:
        pass

    def end_step(self, epoch: int) -> None:
        pass

    def metrics(self) -> dict[str, float]:
        return {}

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass
