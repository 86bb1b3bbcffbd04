"""Run identity: which keys define an experiment, and the run name that says it.

The rule. A run is defined by its whole config but for
- the keys a resume may change (pods.history.FREE_KEYS: how long it goes, how often it is evaluated and saved,
  where it logs, how work is batched),
- `seed` (a run is one seed of its experiment), `name` (a label, the one this module makes) and `experiment`
  (a preset's label: what the preset sets is in the other keys).
Every other key defines it: the stages and their own sections (a plugin's knobs too), model, dataset (so the
train and the eval set), reward, sampling, algo, optim, eval.num_samples and eval.temperature, hardware (dtype,
LoRA), plugins. Two runs are one experiment when no defining key differs; a key one config lacks is no
difference when it is a schema field (a newer pods added it, and its default does what the older pods did),
but an entry of a dict (reward.weights, dataset.task_kwargs, a component's section) one config lacks is.

The name says what differs from the defaults (conf/train.yaml composed without overrides):
    <variant>[-<group>.<option>...][-<digest>]-s<seed>
the variant (pods.naming.variant_name), then the choices of the rollout, reward, advantage and loss stages that
are not the default's (`loss.sequence`), then 8 hex digits of sha256 over every other defining key that
differs from the defaults (the variant's and the stage choices' keys are said already). A run at the defaults
keeps `max_variance-n64-m16-s0`, `selector=random` is `random-n64-m16-s0`, and `loss=sequence` in debug=smoke
is `max_variance-n4-m2-loss.sequence-<digest>-s0`; a key added with a default renames no old run. The `-s<seed>`
token stays last, so readers that pair seeds by it keep working.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pods.history import flatten, is_free
from pods.naming import run_name, variant_name

LABELS = ("seed", "name", "experiment")  # not definitions: the seed of one experiment, and two labels
VARIANT_KEYS = ("prefilter.name", "dynamic_sampling.enabled", "selector.name", "selector.n", "selector.m")
STAGES = ("rollout", "reward", "advantage", "loss")  # their option, when not the default's, is in the name
ABSENT = "<absent>"
DIGEST_LEN = 8
# what an eval measures: runs that differ here were scored on different questions, or scored differently
EVAL_SET_KEYS = (
    "dataset.name",
    "dataset.source",
    "dataset.task",
    "dataset.task_kwargs",
    "dataset.hf_config",
    "dataset.eval_split",
    "dataset.eval_task",
    "dataset.eval_size",
    "dataset.data_seed",
    "eval.num_samples",
    "eval.temperature",
)


def defines(key: str) -> bool:
    """Whether a dotted key defines the experiment (the module docstring's rule)."""
    return not is_free(key) and key not in LABELS and key != "hydra" and not key.startswith("hydra.")


def under(key: str, prefixes) -> bool:
    return any(key == p or key.startswith(p + ".") for p in prefixes)


def defining(config: Mapping) -> dict[str, Any]:
    """The defining keys of a config (nested or flat dotted), flat: {"optim.lr": 1e-05, ...}."""
    return {k: v for k, v in flatten(dict(config)).items() if defines(k)}


@functools.lru_cache(maxsize=1)
def schema_fields() -> frozenset[str]:
    """Every dotted field of the schema (pods.config.TrainConfig) that is not a dict's entry."""
    from pods.config import TrainConfig

    def walk(cls, prefix=""):
        for f in dataclasses.fields(cls):
            key = prefix + f.name
            value = f.default_factory() if f.default_factory is not dataclasses.MISSING else None
            if dataclasses.is_dataclass(value):
                yield from walk(type(value), key + ".")
            elif not isinstance(value, dict):
                yield key

    return frozenset(walk(TrainConfig))


def changed(
    old: Mapping, new: Mapping, fields: frozenset[str] | None = None, shared_only: bool = False
) -> dict[str, tuple]:
    """key -> (old value, new value) for every key of two flat defining configs that differs; a key one side
    lacks is a difference unless it is a schema field (`fields`; the module docstring), or `shared_only` (one
    side is a saved config.yaml, which holds every knob of a component, the other a composed config)."""
    fields = schema_fields() if fields is None else fields
    out = {}
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key, ABSENT), new.get(key, ABSENT)
        if _same(a, b) or (ABSENT in (a, b) and (shared_only or key in fields)):
            continue
        out[key] = (a, b)
    return out


def _same(a, b) -> bool:
    """Equal values; True is not 1."""
    return a == b and isinstance(a, bool) == isinstance(b, bool)


def canonical(value: Any) -> Any:
    """A value as the digest reads it: 2.0 and 2 are one number (an untyped section key given either way)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, list):
        return [canonical(v) for v in value]
    return value


def digest(keys: Mapping[str, Any]) -> str:
    """8 hex digits of sha256 over the keys and values; '' for none."""
    if not keys:
        return ""
    text = json.dumps({k: canonical(v) for k, v in sorted(keys.items())}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:DIGEST_LEN]


@dataclasses.dataclass(frozen=True)
class Identity:
    """Who a run is: its variant, the stage choices and the digest of the rest that differs from the
    defaults (`differs`: those keys, the run's values), and its seed."""

    variant: str
    stages: tuple[str, ...]
    digest: str
    differs: dict[str, Any]
    seed: int

    @property
    def stem(self) -> str:
        """The experiment's name: the run name without the seed."""
        return "-".join([self.variant, *self.stages, *([self.digest] if self.digest else [])])

    @property
    def name(self) -> str:
        return run_name(self.stem, self.seed)


def identity(flat: Mapping[str, Any], defaults: Mapping[str, Any], seed: int) -> Identity:
    """The identity of a flat defining config against the defaults' (both `defining(...)`)."""
    differs = {k: new for k, (_, new) in changed(defaults, flat).items()}
    value = lambda key: flat.get(key, defaults.get(key))  # noqa: E731 - a key an older config lacks
    ds = value("dynamic_sampling.enabled")
    variant = variant_name(
        str(value("selector.name")),
        int(value("selector.n")),
        int(value("selector.m")),
        str(value("prefilter.name")),
        ds if isinstance(ds, bool) else str(ds).lower() == "true",
    )
    stages = tuple(f"{g}.{flat[g + '.name']}" for g in STAGES if f"{g}.name" in differs)
    said = {*VARIANT_KEYS, *(f"{g}.name" for g in STAGES)}
    return Identity(
        variant, stages, digest({k: v for k, v in differs.items() if k not in said}), differs, seed
    )


def resolved(node, prefix: str = "") -> dict[str, Any]:
    """The defining keys of a composed (OmegaConf) config, flat, each resolved; keys that do not define the
    run (run_dir: `${hydra:...}`, the hydra node) are never resolved, so this works while Hydra is still
    setting up the job's directory."""
    from omegaconf import MissingMandatoryValue, OmegaConf

    out: dict[str, Any] = {}
    for key in node:
        dotted = f"{prefix}.{key}" if prefix else str(key)
        if not defines(dotted):
            continue
        try:
            value = node[key]
        except MissingMandatoryValue:
            out[dotted] = "???"
            continue
        if OmegaConf.is_dict(value):  # an empty one adds no key, as flatten
            out.update(resolved(value, dotted))
        elif OmegaConf.is_list(value):
            out[dotted] = OmegaConf.to_container(value, resolve=True)
        else:
            out[dotted] = value
    return out


@functools.lru_cache(maxsize=1)
def default_config() -> dict[str, Any]:
    """conf/train.yaml composed without overrides, its defining keys resolved (cached: one per process). Inside
    a Hydra app (the run directory's resolver) by the app's own compose; else on pods' config dir."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from pods.config import CONF_DIR, register_schema

    register_schema()
    if GlobalHydra.instance().is_initialized():
        return resolved(compose("train"))
    with initialize_config_dir(CONF_DIR, version_base="1.3"):
        return resolved(compose("train"))


def of_config(cfg) -> Identity:
    """The identity of a composed config (an OmegaConf node, the hydra node in it or not) or a plain one."""
    flat, seed = _flat_and_seed(cfg)
    return identity(flat, default_config(), seed)


def _flat_and_seed(cfg) -> tuple[dict[str, Any], int]:
    from omegaconf import OmegaConf

    from pods.config import TrainConfig, as_container

    if isinstance(cfg, TrainConfig):  # a Trainer built in code: its typed (settled) settings
        cfg = as_container(cfg)
    if OmegaConf.is_config(cfg):
        return resolved(cfg), int(OmegaConf.select(cfg, "seed", default=0) or 0)
    return defining(cfg), int(cfg.get("seed", 0) or 0)


def describe(cfg) -> dict:
    """run_info.json's identity fields of a config (composed, plain, or typed settings): name, variant, the
    stage choices, the digest and the full defining config (flat, dotted)."""
    flat, seed = _flat_and_seed(cfg)
    ident = identity(flat, default_config(), seed)
    return {
        "name": ident.name,
        "seed": seed,
        "variant": ident.variant,
        "stages": list(ident.stages),
        "digest": ident.digest,
        "defining": flat,
    }


def recorded(run_dir) -> tuple[dict[str, Any], int, str] | None:
    """(defining config, seed, where it was read) of a run directory: run_info.json's `defining`, else its
    config.yaml's (a run of an older pods); None when it holds neither."""
    import yaml

    run_dir = Path(run_dir)
    try:
        info = json.loads((run_dir / "run_info.json").read_text())
        if isinstance(info, dict) and isinstance(info.get("defining"), dict):
            return info["defining"], int(info.get("seed", 0)), "run_info.json"
    except (OSError, ValueError):
        pass
    try:
        cfg = yaml.safe_load((run_dir / "config.yaml").read_text())
    except (OSError, yaml.YAMLError):
        return None
    return (defining(cfg), int(cfg.get("seed", 0) or 0), "config.yaml") if isinstance(cfg, dict) else None


def held_run_message(run_dir, who: dict | None) -> str:
    """Why a fresh start refuses a run directory that holds a run, and what to do: a resume only where the
    run there is this experiment and seed (`who`: describe's), never one that would continue another."""
    saved = recorded(run_dir) if who else None
    if saved is None:
        return (
            f"run_dir={run_dir} already holds a run (metrics or checkpoints) that records no config to tell "
            "whether it is this experiment; choose another hydra.run.dir (a resume=true of another experiment "
            "is refused at its checkpoint)"
        )
    flat, seed, source = saved
    diff = changed(flat, who["defining"], shared_only=source == "config.yaml")
    then = "resume=true would continue that run under this config: choose another hydra.run.dir"
    if not diff and seed == who["seed"]:
        return (
            f"run_dir={run_dir} already holds a run of this experiment and seed (metrics or checkpoints); "
            "pass resume=true to continue it, or choose another hydra.run.dir"
        )
    if not diff:
        return f"run_dir={run_dir} holds seed {seed} of this experiment, not seed {who['seed']}; {then}"
    shown = "; ".join(f"{k}={_show(b)} (that run: {_show(a)})" for k, (a, b) in list(diff.items())[:6])
    more = f"; and {len(diff) - 6} more" if len(diff) > 6 else ""
    return (
        f"run_dir={run_dir} already holds a different experiment (its {source} differs in {len(diff)} "
        f"key(s): {shown}{more}); {then}"
    )


def _show(v: Any) -> str:
    return v if isinstance(v, str) else json.dumps(v, default=str)


def config_run_name(*_args, _root_) -> str:
    """`${pods.run_name:}`: the run's name from its whole config. Arguments, as an older config's
    `${pods.run_name:<prefilter>,...,<seed>}` passes, are not read: the name needs every key."""
    return of_config(_root_).name


def register_resolver() -> None:
    """`${pods.run_name:}` in conf/train.yaml's hydra.run.dir and hydra.sweep.subdir (pods.train registers it)."""
    from omegaconf import OmegaConf

    OmegaConf.register_new_resolver("pods.run_name", config_run_name, replace=True)
