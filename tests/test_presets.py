"""Every preset keeps the values it sets, whatever order the command line names the groups in.

Merge order (conf/train.yaml): group options < model < experiment < scale < variant < debug < key=value.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from pods.config import validate

CONF = Path(__file__).resolve().parent.parent / "conf"


def options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


def leaves(group: str, option: str) -> dict:
    """Dotted key -> value the preset file itself sets (not its defaults list, not hydra.*)."""
    path = CONF / group / f"{option}.yaml"
    node = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
    node.pop("defaults", None)
    node.pop("hydra", None)
    if "@package _global_" not in path.read_text():
        node = {group: node}
    out = {}

    def walk(d, prefix):
        for k, v in d.items():
            if isinstance(v, dict) and v:
                walk(v, f"{prefix}{k}.")
            else:
                out[f"{prefix}{k}"] = v

    walk(node, "")
    return out


def value(cfg, key: str):
    """The composed value, interpolations left as written (a preset's `${...}` compares as text)."""
    node = OmegaConf.to_container(cfg, resolve=False)
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return "<missing>"
        node = node[part]
    return node


def assert_survive(cfg, expected: dict, what: str) -> None:
    lost = {k: (v, value(cfg, k)) for k, v in expected.items() if value(cfg, k) != v}
    assert not lost, f"{what}: preset values lost (key: (preset, composed)): {lost}"


@pytest.mark.parametrize("scale", options("scale"))
@pytest.mark.parametrize("experiment", options("experiment"))
def test_experiment_x_scale_in_both_orders(make_cfg, experiment, scale):
    a = make_cfg(f"+experiment={experiment}", f"+scale={scale}")
    b = make_cfg(f"+scale={scale}", f"+experiment={experiment}")
    c = make_cfg(f"scale={scale}", f"experiment={experiment}")  # the slots are in the defaults list too
    assert OmegaConf.to_yaml(a) == OmegaConf.to_yaml(b) == OmegaConf.to_yaml(c)
    s = leaves("scale", scale)
    assert_survive(a, s, f"scale={scale}")  # a scale shrinks any experiment: all of its values win
    e = {k: v for k, v in leaves("experiment", experiment).items() if k not in s}
    assert_survive(a, e, f"experiment={experiment}")
    model = {"cpu": "tiny", "gpu": "headline"}[scale]
    assert a.model.name == model
    assert_survive(a, {k: v for k, v in leaves("model", model).items() if k not in s and k not in e}, model)
    validate(a)


@pytest.mark.parametrize("model", options("model"))
def test_every_model_preset_keeps_its_values(make_cfg, model):
    cfg = make_cfg(f"model={model}")
    assert_survive(cfg, leaves("model", model), f"model={model}")
    if model == "headline":
        assert cfg.rollout.temperature == 1.0  # was dead: rollout/hf's 0.9 used to win
    # a command-line key=value still wins over the preset
    assert make_cfg(f"model={model}", "rollout.temperature=0.5").rollout.temperature == 0.5


@pytest.mark.parametrize("group", ["hardware", "rollout", "selector", "reward", "dataset", "logger"])
def test_every_group_option_keeps_its_values_under_any_model(make_cfg, group):
    for option, model in itertools.product(options(group), options("model")):
        cfg = make_cfg(f"model={model}", f"{group}={option}")
        own = leaves(group, option)
        # a model preset deliberately wins over the rollout group (its temperature); nothing else overlaps
        clash = {k for k in own if k in leaves("model", model)}
        assert clash <= {"rollout.temperature"}, (group, option, model, clash)
        assert_survive(cfg, {k: v for k, v in own.items() if k not in clash}, f"{group}={option}")


@pytest.mark.parametrize("variant", options("variant"))
@pytest.mark.parametrize("experiment", ["gsm8k_main", "greso"])
def test_variant_in_either_order(make_cfg, experiment, variant):
    a = make_cfg(f"+variant={variant}", f"+experiment={experiment}", "+scale=cpu")
    b = make_cfg("+scale=cpu", f"+experiment={experiment}", f"+variant={variant}")
    assert OmegaConf.to_yaml(a) == OmegaConf.to_yaml(b)
    assert_survive(a, leaves("variant", variant), f"variant={variant}")
    validate(a)


@pytest.mark.parametrize("spelling", ["+debug=smoke", "debug=smoke"])
def test_debug_both_spellings_and_last(make_cfg, spelling):
    cfg = make_cfg("+experiment=greso", spelling, "+scale=cpu", "+variant=pods")
    assert_survive(cfg, leaves("debug", "smoke"), "debug=smoke")
    assert OmegaConf.to_yaml(cfg) == OmegaConf.to_yaml(
        make_cfg(spelling, "+variant=pods", "+scale=cpu", "+experiment=greso")
    )
