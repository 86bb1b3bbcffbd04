"""The pre-rollout filter: its extension point (the `Prefilter` interface, its registry, the no-op filter)
and the stage of the loop that calls it.

The loop (pods/collect.py) calls `PrefilterStage.draw(k)` at the start of each round, `observe(picked,
correct)` once the round is graded and `end_step()` at the end of the step; `metrics()` is the step's
prefilter/*, the prompts drawn (`prefilter/prompts_drawn`) among them. The same calls on every rank.
"""

from __future__ import annotations

import inspect
import warnings
from typing import Protocol

import torch

from pods.errors import PluginError, shown
from pods.registry import ContractDeprecationWarning, Registry, calling, knobs


class Prefilter(Protocol):
    """Decides, before generating, which sampled prompts get rollouts; learns from the correctness it sees.

    Built as `cls(seed=..., **knobs)`: its own settings (the fields of the dataclass its registry entry
    declares, from `prefilter.<name>.*`) as keyword arguments, as every component gets them (pods/registry.py).
    Same calls on every rank.
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
    """The filter `group.name` (pods.config.PrefilterConfig), built with its own settings."""
    return construct(PREFILTERS.get_or_raise(group.name, "prefilter.name"), group.own(), seed)


def construct(cls: type, settings, seed: int) -> Prefilter:
    """`cls(seed=seed, **knobs)`; a class written for the earlier `cls(settings, seed)` is built that way, with
    a warning saying what to change."""
    if not _earlier_contract(cls, knobs(settings)):
        return cls(seed=seed, **knobs(settings))
    warnings.warn(
        f"prefilter {cls.__name__} takes (settings, seed), the earlier contract; take (seed=0, **knobs) "
        "instead: its settings' fields as keywords (docs/extending.md)",
        ContractDeprecationWarning,
        stacklevel=2,
    )
    return cls(settings, seed)


def _earlier_contract(cls: type, own: dict) -> bool:
    """Whether `cls.__init__` takes a settings object first: a positional parameter that is neither `seed`
    nor one of its knobs."""
    params = list(inspect.signature(cls).parameters.values())
    first = params[0] if params else None
    positional = first is not None and first.kind in (first.POSITIONAL_ONLY, first.POSITIONAL_OR_KEYWORD)
    return positional and first.name != "seed" and first.name not in own


@register_prefilter("none")
class NoFilter:
    """Keep every prompt (GRPO, PODS, dynamic sampling alone)."""

    def __init__(self, seed: int = 0, **knobs):
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


def decisions_broken(kept, k: int) -> str | None:
    """What is wrong with a prefilter's keep() answer for k prompts (None: nothing): one bool per prompt."""
    if isinstance(kept, (str, bytes, dict)) or not hasattr(kept, "__len__"):
        return f"a {type(kept).__name__}, not a list"
    if len(kept) != k:
        return f"{len(kept)} decisions for {k} prompts"
    bad = next((v for v in kept if not isinstance(v, bool)), None)
    return None if bad is None else f"a {type(bad).__name__} among the decisions"


class PrefilterStage:
    """`prefilter` (a registered Prefilter, `name` its registered name) between the prompt `sampler` and the
    rollout; `n` rollouts per prompt (selector.n: what a skip saves); `pool`: the number of prompts (bounds a
    step's draws). Each call of the filter is checked: an exception or a keep() answer that is not one bool per
    prompt is one PluginError line naming it."""

    def __init__(self, prefilter: Prefilter, sampler, n: int, pool: int, dist, timer, name: str = ""):
        self.prefilter, self.sampler, self.n, self.pool = prefilter, sampler, n, pool
        self.dist, self.timer = dist, timer
        self.name = name or type(prefilter).__name__
        self.drawn = self.skipped = 0

    def call(self, method: str, *args):
        """The filter's `method`(*args), an exception it raises named."""
        with calling("prefilter", self.name, self.prefilter, f" {method}()"):
            return getattr(self.prefilter, method)(*args)

    def keep(self, prompt_ids: list[int], epoch: int) -> list[bool]:
        kept = self.call("keep", prompt_ids, epoch)
        broken = decisions_broken(kept, len(prompt_ids))
        if broken:
            raise PluginError(
                f"prefilter {self.name!r} keep() returned {broken}: {shown(kept)} (a prefilter's keep() returns "
                f"one bool per prompt, {len(prompt_ids)} here)"
            )
        return kept

    def start_step(self) -> None:
        self.drawn = self.skipped = 0

    def draw(self, k: int) -> list[tuple[int, int]]:
        """(prompt id, epoch) of k prompts the filter keeps, taken from the sampler (fewer when a step's draws
        reach 20 k + the pool: a filter that skips almost everything cannot stall the step)."""
        kept: list[tuple[int, int]] = []
        budget = 20 * k + self.pool
        with self.timer.phase("prefilter"):
            while len(kept) < k and self.drawn < budget:
                batch = self.sampler.next(k - len(kept))
                self.drawn += len(batch)
                for (pid, ep), ok in zip(batch, self.keep([p for p, _ in batch], batch[0][1])):
                    if ok:
                        kept.append((pid, ep))
                    else:
                        self.skipped += 1
        return kept

    def observe(self, picked: list[tuple[int, int]], correct: torch.Tensor) -> None:
        """The filter remembers each prompt's outcome: `correct` (P, n), gathered from every rank (in the
        order of dist.unshard_order), for the prompts `picked` in this round."""
        with self.timer.phase("prefilter"):
            self.call("observe", self.dist.unshard_order([p for p, _ in picked]), picked[0][1], correct)

    def end_step(self) -> None:
        self.call("end_step", self.sampler.epoch)

    def metrics(self) -> dict[str, float]:
        own = self.call("metrics")
        if not isinstance(own, dict):
            raise PluginError(f"prefilter {self.name!r} metrics() returned {shown(own)}; it returns a dict")
        return {
            "prefilter/prompts_drawn": float(self.drawn),
            "prefilter/skipped": float(self.skipped),
            "prefilter/rollouts_avoided": float(self.skipped * self.n),
            **own,
        }

    def state_dict(self) -> dict:
        """The filter's state (the stage's counts are the step's): what checkpoints hold as `prefilter`."""
        return self.prefilter.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.prefilter.load_state_dict(state)
