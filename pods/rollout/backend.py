"""The rollout stage's extension point: the `Generator` interface and the backend registry.

A backend is a class registered with `@register_backend("name")`; `rollout.name=name` then builds it
through `from_config(settings, model, tokenizer, device, timer, **knobs)`: its own knobs (`rollout.<name>.*`,
the fields of its settings dataclass) as keywords, as every component gets them (pods/registry.py). `settings`
is a `RolloutSettings`: the rollout group and the model and hardware groups generation depends on, typed
(pods/config.py), not the whole config; how to sample comes with each
generate() call (the sampling section, or eval's temperature). Its class-level hooks (defaults in `Backend`) tell the rest of pods what differs about it,
so no other module asks which backend is configured:

    supports_fsdp                          can it run beside hardware.distributed=fsdp (config check)
    check(settings)                        config checks relating its own knobs to the other groups
    preflight(settings)                    checks before any weights load (an engine installed, its version)
    card_share(settings)                   share of the GPU its own engine takes (pods/memory.py sizes the rest)
    keeps_generation_copy(settings, device)  whether it keeps a copy of the weights in the compute dtype
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, runtime_checkable

from pods.batch import Rollouts
from pods.config import HardwareConfig, ModelConfig, RolloutConfig, TrainConfig
from pods.errors import ConfigError
from pods.registry import ContractDeprecationWarning, Registry, knobs, takes_keywords


@dataclass(frozen=True)
class RolloutSettings:
    """What a rollout backend reads: its own group and the model and hardware it generates with."""

    rollout: RolloutConfig
    model: ModelConfig  # path, prompt/completion lengths, dtype, LoRA rank
    hardware: HardwareConfig  # compute dtype, LoRA, 4-bit base, an engine's share of the card
    seed: int  # an engine's sampling seed (the HF backend draws from torch's global generator)

    @classmethod
    def from_config(cls, c: TrainConfig) -> RolloutSettings:
        return cls(c.rollout, c.model, c.hardware, c.seed)


@runtime_checkable
class Generator(Protocol):
    """What the loop (pods/collect.py, pods/rollout/stage.py) and eval (pods/eval.py) use of a rollout backend: the one
    statement of the interface. `check_generate_signature` holds a backend's `generate` against it
    (preflight, and pods.testing.check_backend), so a backend that drops an argument fails before the
    model loads, not at the first eval."""

    pad_id: int  # the id completions are padded with
    eos_ids: list[int]  # ids that end a completion
    reads_policy: Any  # the training module generate() reads (FSDP gathers it first), or None (own copy)

    def generate(
        self,
        prompts: list[str],
        prompt_ids: list[int],
        n: int,
        temperature: float,
        top_p: float = 1.0,
        top_k: int = 0,
        add_special_tokens: bool = False,
        batch_size: int | None = None,
    ) -> Rollouts:
        """n completions per prompt, rows group-major: (P * n, ...) tensors in a Rollouts.

        prompt_ids: (P,) dataset index of each prompt. temperature 0 = greedy; top_k 0 = off.
        batch_size: sequences per generate call (eval passes eval.batch_size; None = the backend's own).
        """
        ...

    def sync_weights(self, model) -> None:
        """Make the next generate() sample from `model`'s current weights (called after each update). A backend
        that sets `syncs_by_name = True` also takes `only=` a set of weight names (copy just those): under FSDP
        the Trainer then calls it once per gathered unit, so the whole model is never gathered at once."""
        ...


def check_generate_signature(cls: type, name: str | None = None) -> None:
    """Raise TypeError, naming the parameter, if `cls.generate` cannot be called the way the loop and eval
    call `Generator.generate`: every parameter of the protocol, in order, with its default (or taken by
    *args / **kwargs); any parameter of its own must have a default."""
    import inspect

    want = list(inspect.signature(Generator.generate).parameters.values())[1:]  # without self
    fn = getattr(cls, "generate", None)
    where = f"rollout.name={name!r}: {cls.__name__}.generate" if name else f"{cls.__name__}.generate"
    if fn is None:
        raise TypeError(f"{where} is missing (see pods.rollout.backend.Generator)")
    have = list(inspect.signature(fn).parameters.values())[1:]
    var_pos = any(p.kind is p.VAR_POSITIONAL for p in have)
    var_kw = any(p.kind is p.VAR_KEYWORD for p in have)
    named = [p for p in have if p.kind in (p.POSITIONAL_OR_KEYWORD, p.POSITIONAL_ONLY, p.KEYWORD_ONLY)]
    for i, w in enumerate(want):
        h = named[i] if i < len(named) else None
        if h is None or h.kind is h.KEYWORD_ONLY:
            if var_pos and var_kw:
                continue  # a pass-through wrapper: generate(self, *args, **kwargs)
            raise TypeError(f"{where} does not take {w.name!r} (see pods.rollout.backend.Generator)")
        if h.name != w.name:
            raise TypeError(
                f"{where}: parameter {i + 1} is {h.name!r}, the Generator protocol's is {w.name!r}"
            )
        if w.default is not w.empty and h.default != w.default:
            raise TypeError(f"{where}: {w.name} must default to {w.default!r} (the Generator protocol's)")
    extra = [p.name for p in named[len(want) :] if p.default is p.empty]
    if extra:
        raise TypeError(f"{where}: {', '.join(extra)} not in the Generator protocol need defaults")


class Backend:
    """Defaults of the class-level hooks a registered backend may override (see the module docstring)."""

    supports_fsdp: ClassVar[bool] = True

    @classmethod
    def from_config(
        cls, settings: RolloutSettings, model, tokenizer, device, timer=None, **knobs
    ) -> Generator:
        raise NotImplementedError(f"{cls.__name__}.from_config")

    @staticmethod
    def check(settings: RolloutSettings) -> None:
        pass

    @staticmethod
    def preflight(settings: RolloutSettings) -> None:
        pass

    @staticmethod
    def card_share(settings: RolloutSettings) -> float:
        return 0.0

    @staticmethod
    def keeps_generation_copy(settings: RolloutSettings, device) -> bool:
        return False


BACKENDS: Registry[type[Backend]] = Registry("rollout backend")


def register_backend(name: str, settings: type | None = None):
    """Decorator: `@register_backend("sglang")` on a Backend subclass makes `rollout.name=sglang` build it.
    `settings`: a dataclass of the backend's own knobs, set as `rollout.<name>.<knob>`: from_config gets them
    as keywords, the class-level hooks (run on the config alone) read them as `settings.rollout.own()`."""
    return BACKENDS.register(name, settings)


def backend_class(name: str) -> type[Backend]:
    """The class registered under `name` (rollout.name; KeyError listing the registered names otherwise)."""
    return BACKENDS.get_or_raise(name, "rollout.name")


def check_backend(settings: RolloutSettings) -> type[Backend]:
    """The config checks that depend on the backend (run by pods.components.resolve, which has checked that
    rollout.name is registered): its generate() takes what the loop and eval pass (the Generator
    protocol), it supports the hardware profile, and its own checks (Backend.check)."""
    name = settings.rollout.name
    cls = backend_class(name)
    try:
        check_generate_signature(cls, name)
    except TypeError as e:
        raise ConfigError(str(e)) from None
    if settings.hardware.distributed == "fsdp" and not cls.supports_fsdp:
        raise ConfigError(
            f"hardware.distributed=fsdp does not support rollout.name={name} yet; use hardware.distributed=ddp"
        )
    cls.check(settings)
    return cls


def build(cls: type[Backend], settings: RolloutSettings, model, tokenizer, device, timer=None) -> Generator:
    """`cls.from_config(settings, model, tokenizer, device, timer, **knobs)`; a from_config written for the
    earlier contract (no keywords: it read `settings.rollout.own()`) is called that way, with a warning."""
    own = knobs(settings.rollout.own())
    if takes_keywords(cls.from_config, own):
        return cls.from_config(settings, model, tokenizer, device, timer, **own)
    warnings.warn(
        f"rollout backend {cls.__name__}.from_config takes no {', '.join(own)}, the earlier contract; add "
        "**knobs: its settings' fields come as keywords (docs/extending.md)",
        ContractDeprecationWarning,
        stacklevel=2,
    )
    return cls.from_config(settings, model, tokenizer, device, timer)


def build_backend(settings: RolloutSettings, model, tokenizer, device, timer=None) -> Generator:
    """Build the backend named by rollout.name and check that it has the Generator interface."""
    name = settings.rollout.name
    gen = build(backend_class(name), settings, model, tokenizer, device, timer)
    if not isinstance(gen, Generator):
        missing = [
            k
            for k in ("pad_id", "eos_ids", "reads_policy", "generate", "sync_weights")
            if not hasattr(gen, k)
        ]
        raise TypeError(
            f"rollout.name={name!r} built a {type(gen).__name__} without {', '.join(missing)} "
            "(see pods.rollout.backend.Generator)"
        )
    return gen


def build_generator(settings: RolloutSettings, model, tokenizer, device, timer=None) -> Generator:
    """The earlier name of `build_backend` (one name for the rollout backend: issue 54); it still works, with a
    warning."""
    warnings.warn(
        "pods.rollout.build_generator is build_backend now (the same arguments)", FutureWarning, stacklevel=2
    )
    return build_backend(settings, model, tokenizer, device, timer)
