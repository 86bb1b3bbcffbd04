"""The one place where the config's component names meet the registries, before the model loads.

pods.config checks fields and stays below every stage; this module loads the registries (with any
`plugins:` already imported), and for each group

    selector.name    prefilter.name    reward.weights.<name>    rollout.name    advantage.name    loss.name

checks that each name is registered (a failure lists the registered names and says `plugins=`), types and
checks the own settings of each chosen component and of each section the config holds (its registry entry's
dataclass, from the section named after it: `prefilter.greso.p_init`), refuses a section that names no
component of the group (a typo) and one of a component that is not chosen (a setting that would do
nothing: `rollout.name=hf rollout.vllm.sleep_mode=true`), applies the
entries' traits (a selector that `keeps_all` needs m = n), checks that the reward's correctness term
(`reward.correctness`) is registered, and runs the cheap half of pods.testing on the chosen selector, rewards,
prefilter, advantage estimator and loss, and the backend's own checks (FSDP support, generate()'s signature):
a component that breaks its contract is one line here, before the model loads, not a traceback at step 1.
`checked(cfg)` is validate + resolve.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from functools import partial
from typing import Any

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from pods.config import OPEN_GROUPS, ConfigError, TrainConfig, validate
from pods.registry import Registry
from pods.spelling import current_config, retired_key

KEYS = {
    "selector": "selector.name",
    "prefilter": "prefilter.name",
    "reward": "reward.weights",
    "rollout": "rollout.name",
    "advantage": "advantage.name",
    "loss": "loss.name",
}


def registries() -> dict[str, Registry]:
    """Group -> the registry its names are looked up in (importing the stage packages registers pods' own)."""
    from pods.prefilter import PREFILTERS
    from pods.reward import REWARDS
    from pods.rollout import BACKENDS
    from pods.selector import SELECTORS
    from pods.update import ADVANTAGES, LOSSES

    return {"selector": SELECTORS, "prefilter": PREFILTERS, "reward": REWARDS, "rollout": BACKENDS,
            "advantage": ADVANTAGES, "loss": LOSSES}  # fmt: skip


def chosen(c: TrainConfig, group: str) -> list[str]:
    """The component names that group `group` of `c` picks."""
    if group == "reward":  # the weighted terms, and the correctness term, computed even when not weighted
        return list(dict.fromkeys([*c.reward.weights, c.reward.correctness]))
    return [getattr(c, group).name]


def typed_settings(cls: type, raw: Any, key: str) -> Any:
    """`raw` (a dict, or an instance already) as a `cls`, its own check() run; one ConfigError line naming
    the key otherwise."""
    if isinstance(raw, cls):
        obj = raw
    else:
        try:
            obj = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(cls), raw or {}))
        except OmegaConfBaseException as e:
            field = f"{key}.{e.key}" if getattr(e, "key", None) else key
            fields = ", ".join(f.name for f in dataclasses.fields(cls))
            raise ConfigError(f"{field}: {e.msg.splitlines()[0]} (settings of {key}: {fields})") from None
    if hasattr(obj, "check"):
        try:
            obj.check()
        except ConfigError:
            raise
        except Exception as e:  # noqa: BLE001 - a plugin's check() may raise anything
            from pods.registry import raised

            raise ConfigError(f"{key}: {cls.__name__}.check() raised {raised(e, cls.__module__)}") from None
    return obj


def resolve(c: TrainConfig) -> TrainConfig:
    """Check the component names and type their settings (see the module docstring); returns the settings
    with each group's sections typed (the groups are frozen: new ones replace them)."""
    for group, reg in registries().items():
        node, key = getattr(c, group), KEYS[group]
        for name in chosen(c, group):
            if name not in reg:
                where = (
                    f"{key}={name!r}"
                    if group != "reward"
                    else (f"{key}.{name}" if name in c.reward.weights else f"reward.correctness={name!r}")
                )
                raise ConfigError(
                    f"{where} is not valid; allowed values: {', '.join(sorted(reg))} (a plugin's {reg.kind}: "
                    "name its module in plugins=[...])"
                )
        for name in node.sections:
            if hint := retired_key(f"{group}.{name}"):  # an old key in this group's YAML
                raise ConfigError(hint)
            if name not in reg:
                raise ConfigError(
                    f"{group}.{name} is neither a setting of {group} nor the section of a registered {reg.kind} "
                    f"({', '.join(sorted(reg))})"
                )
            if name not in reg.settings:
                raise ConfigError(f"{group}.{name}: {reg.kind} {name!r} declares no settings of its own")
        names = [*node.sections, *(n for n in chosen(c, group) if n in reg.settings)]
        sections = {n: typed_settings(reg.settings[n], node.sections.get(n), f"{group}.{n}") for n in names}
        unchosen = [n for n in node.sections if n not in chosen(c, group)]
        if unchosen:
            name = unchosen[0]
            where = f"reward.weights has no {name}" if group == "reward" else f"{key}={chosen(c, group)[0]!r}"
            raise ConfigError(
                f"{group}.{name}: settings of {reg.kind} {name!r}, which is not chosen ({where}): they would do "
                "nothing; drop them, or choose it"
            )
        c = dataclasses.replace(c, **{group: dataclasses.replace(node, sections=sections)})
    check_traits(c)
    conform(c)
    from pods.rollout import RolloutSettings, check_backend

    check_backend(RolloutSettings.from_config(c))  # FSDP support, generate()'s signature
    return c


def check_traits(c: TrainConfig) -> None:
    """What the chosen entries' traits ask of the rest of the config."""
    from pods.selector import SELECTORS

    s = c.selector
    if SELECTORS.trait(s.name, "keeps_all") and s.m != s.n:
        raise ConfigError(
            f"selector.m={s.m} != selector.n={s.n} needs a down-sampler; selector {s.name!r} keeps all n "
            "(choose selector=max_variance, or random, max_reward)"
        )
    if not SELECTORS.trait(s.name, "keeps_all") and s.m < 2:
        raise ConfigError(f"selector.m={s.m} must be >= 2 with selector.name={s.name}")
    if not SELECTORS.trait(s.name, "keeps_all") and s.m == s.n:
        logging.getLogger("pods").warning(
            "selector.m = selector.n = %d: down-sampler %r keeps every rollout, so nothing is down-sampled "
            "(set selector.m < selector.n, or selector=none for plain GRPO)",
            s.n,
            s.name,
        )


def conform(c: TrainConfig) -> None:
    """The cheap half of pods.testing on the chosen selector, rewards and prefilter (no model, no grading
    workers): a component that breaks its contract is one ConfigError line naming its key."""
    from pods import testing
    from pods.prefilter import PREFILTERS
    from pods.reward import REWARDS
    from pods.selector import SELECTORS
    from pods.update import ADVANTAGES, LOSSES

    s, p, a, loss = c.selector, c.prefilter, c.advantage, c.loss
    checks = {
        f"selector.name={s.name!r}": partial(
            testing.check_selector, SELECTORS[s.name], 2, s.n, s.m, settings=s.own()
        ),
        f"prefilter.name={p.name!r}": partial(testing.check_prefilter, PREFILTERS[p.name], p.own(), c.seed),
        **{f"reward {n!r}": partial(testing.check_reward_signature, REWARDS[n]) for n in chosen(c, "reward")},
        f"advantage.name={a.name!r}": partial(testing.check_advantage, ADVANTAGES[a.name], settings=a.own()),
        f"loss.name={loss.name!r}": partial(testing.check_loss, LOSSES[loss.name], settings=loss.own()),
    }
    for key, check in checks.items():
        try:
            check()
        except AssertionError as e:
            raise ConfigError(f"{key}: {str(e).splitlines()[0]} (pods.testing)") from None
        except Exception as e:  # noqa: BLE001 - a plugin's code may raise anything
            from pods.registry import raised

            raise ConfigError(f"{key} fails its contract: {raised(e)} (pods.testing)") from None


def summary(c: TrainConfig) -> dict[str, dict]:
    """Every active component of the run, by stage, with its settings (its own section's, or the group's
    fields it reads): run_info.json's `components`, and the first lines of the log (`log_summary`)."""
    from pods.registry import knobs

    own = lambda group: {"name": group.name, **knobs(group.own())}  # noqa: E731
    s, a = c.selector, c.algo
    out = {
        "prefilter": own(c.prefilter),
        "rollout": {**own(c.rollout), "batch_size": c.rollout.batch_size},  # the backend
        "reward": {"weights": dict(c.reward.weights), "correctness": c.reward.correctness},
        "dynamic_sampling": dataclasses.asdict(c.dynamic_sampling),
        "selector": {"name": s.name, "n": s.n, "m": s.m, **knobs(s.own())},
        "advantage": own(c.advantage),
        "loss": {**own(c.loss), "epsilon": a.epsilon, "epsilon_high": a.epsilon_high, "beta": a.beta},
    }
    return json.loads(json.dumps(out, default=str))  # plain JSON values (a tuple as a list)


def log_summary(components: dict[str, dict]) -> None:
    """One line per stage: `prefilter: greso (p_init=0.5, ...)`, `dynamic_sampling: off`."""
    log = logging.getLogger("pods")
    for stage, settings in components.items():
        rest = ", ".join(f"{k}={v}" for k, v in settings.items() if k not in ("name", "enabled"))
        name = settings.get("name") or {True: "on", False: "off"}.get(settings.get("enabled"), "")
        log.info("%s: %s", stage, f"{name} ({rest})" if name and rest and name != "off" else name or rest)


def checked(cfg: Any) -> TrainConfig:
    """The composed config typed and fully checked: old spellings that still run read as today's keys
    (pods.spelling.current_config: `advantage.stats`, `algo.loss_agg`), fields (pods.config.validate), then
    components."""
    if not isinstance(cfg, TrainConfig):
        cfg = current_config(OmegaConf.to_container(cfg, resolve=True) if OmegaConf.is_config(cfg) else cfg)
    return resolve(validate(cfg))


__all__ = ["OPEN_GROUPS", "checked", "registries", "resolve"]
