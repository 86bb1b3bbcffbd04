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


HUB_MODELS = ["llama3.2-3b", "qwen2.5-0.5b", "qwen2.5-1.5b", "qwen2.5-3b"]


def test_hub_model_presets_differ_only_in_name_and_path(make_cfg):
    """The shared part lives once (conf/model/shared/hub.yaml): the paper's single-GPU setting."""
    cfgs = {m: OmegaConf.to_container(make_cfg(f"model={m}"), resolve=True) for m in HUB_MODELS}
    for m, c in cfgs.items():
        assert c["model"].pop("name") == m and c["model"].pop("path")
    first = cfgs[HUB_MODELS[0]]
    assert all(c == first for c in cfgs.values())
    assert first["model"]["lora"]["r"] == 64 and first["model"]["max_completion_len"] == 512
    assert first["optim"]["lr"] == 5e-6 and first["rollout"]["temperature"] == 0.9
    assert first["algo"]["prompts_per_step"] == 1


@pytest.mark.parametrize("variant", options("variant"))
def test_variant_states_only_what_differs_from_its_selector(make_cfg, variant):
    """A variant picks a selector and sets only the values that selector does not already have."""
    defaults = OmegaConf.load(CONF / "variant" / f"{variant}.yaml").defaults
    (selector,) = [d["override /selector"] for d in defaults if "override /selector" in d]
    base = make_cfg(f"selector={selector}")
    restated = {k: v for k, v in leaves("variant", variant).items() if value(base, k) == v}
    assert not restated, f"variant={variant} restates selector={selector}'s defaults: {restated}"
