"""Every preset keeps the values it sets, whatever order the command line names the groups in.

Merge order (conf/train.yaml's defaults list, plain Hydra): stage groups < model < experiment < scale < arm
< debug < key=value. Nothing patches Hydra: the order of the defaults list decides, not the command line's.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from pods.components import checked

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
    a = make_cfg(f"experiment={experiment}", f"scale={scale}")
    b = make_cfg(f"scale={scale}", f"experiment={experiment}")
    assert OmegaConf.to_yaml(a) == OmegaConf.to_yaml(b)
    s = leaves("scale", scale)
    assert_survive(a, s, f"scale={scale}")  # a scale shrinks any experiment: all of its values win
    e = {k: v for k, v in leaves("experiment", experiment).items() if k not in s}
    assert_survive(a, e, f"experiment={experiment}")
    model = {"cpu": "tiny", "gpu": "headline"}[scale]
    assert a.model.name == model
    assert_survive(a, {k: v for k, v in leaves("model", model).items() if k not in s and k not in e}, model)
    checked(a)


@pytest.mark.parametrize("model", options("model"))
def test_model_presets_set_model_only(model):
    """A model preset writes into model.* only; what depends on the model (lr, temperature, ...) is its
    model.recipe, which the stages read by interpolation (pods/config.py: RecipeConfig)."""
    for path in (CONF / "model" / f"{model}.yaml", CONF / "model" / "shared" / "hub.yaml"):
        assert "@package" not in path.read_text(), f"{path.name}: a model preset is in package model"


@pytest.mark.parametrize("model", options("model"))
def test_every_model_preset_keeps_its_values(make_cfg, model):
    cfg = make_cfg(f"model={model}")
    assert_survive(cfg, leaves("model", model), f"model={model}")
    r = cfg.model.recipe  # the stages follow the model's recipe ...
    assert (cfg.optim.lr, cfg.optim.weight_decay, cfg.optim.grad_clip) == (r.lr, r.weight_decay, r.grad_clip)
    assert (cfg.sampling.temperature, cfg.algo.prompts_per_step) == (r.temperature, r.prompts_per_step)
    if model == "headline":
        assert cfg.sampling.temperature == 1.0
    # ... and a command-line key=value still wins over the recipe
    assert make_cfg(f"model={model}", "sampling.temperature=0.5").sampling.temperature == 0.5


@pytest.mark.parametrize(
    "group", ["hardware", "rollout", "prefilter", "selector", "reward", "dataset", "logger"]
)
def test_every_group_option_keeps_its_values_under_any_model(make_cfg, group):
    for option, model in itertools.product(options(group), options("model")):
        cfg = make_cfg(f"model={model}", f"{group}={option}")
        assert_survive(cfg, leaves(group, option), f"{group}={option}")


@pytest.mark.parametrize("arm", options("arm"))
@pytest.mark.parametrize("experiment", ["gsm8k_main", "greso"])
def test_arm_in_either_order(make_cfg, experiment, arm):
    a = make_cfg(f"arm={arm}", f"experiment={experiment}", "scale=cpu")
    b = make_cfg("scale=cpu", f"experiment={experiment}", f"arm={arm}")
    assert OmegaConf.to_yaml(a) == OmegaConf.to_yaml(b)
    assert_survive(a, leaves("arm", arm), f"arm={arm}")
    checked(a)


@pytest.mark.parametrize("arm", options("arm"))
def test_an_arm_is_named_by_the_variant_it_produces(make_cfg, arm):
    """One name for GRPO 16/16 (`none-n16-m16`) in a sweep, a run directory and a compare table."""
    from pods.naming import variant_name

    c = make_cfg(f"arm={arm}")
    assert (
        variant_name(
            c.selector.name, c.selector.n, c.selector.m, c.prefilter.name, c.dynamic_sampling.enabled
        )
        == arm
    )


@pytest.mark.parametrize("arm", options("arm"))
def test_arm_states_only_what_differs_from_its_selector(make_cfg, arm):
    """An arm picks the stage options and sets only the values those options do not already have."""
    defaults = OmegaConf.load(CONF / "arm" / f"{arm}.yaml").defaults
    (selector,) = [d["override /selector"] for d in defaults if "override /selector" in d]
    base = make_cfg(f"selector={selector}")
    restated = {k: v for k, v in leaves("arm", arm).items() if value(base, k) == v}
    assert not restated, f"arm={arm} restates selector={selector}'s defaults: {restated}"


def test_debug_is_last(make_cfg):
    cfg = make_cfg("experiment=greso", "debug=smoke", "scale=cpu", "arm=max_variance-n64-m16")
    assert_survive(cfg, leaves("debug", "smoke"), "debug=smoke")
    assert OmegaConf.to_yaml(cfg) == OmegaConf.to_yaml(
        make_cfg("debug=smoke", "arm=max_variance-n64-m16", "scale=cpu", "experiment=greso")
    )


def test_plus_spelling_gets_a_one_line_hint():
    from pods.cli import plus_hint

    assert plus_hint(["+experiment=greso", "seed=1"]) == (
        "+experiment=greso: 'experiment' already has its slot in conf/train.yaml's defaults; "
        "write experiment=greso (without '+')"
    )
    for group in ("scale", "arm", "debug", "selector", "prefilter", "model"):
        assert plus_hint([f"+{group}=x"]) is not None
    assert plus_hint(["+dataset.task_kwargs.min_terms=2", "++optim.lr=1", "experiment=greso"]) is None


def test_plus_spelling_exits_2_with_the_hint(tmp_path):
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-m", "pods.train", "+experiment=greso", "+scale=cpu", f"hydra.run.dir={tmp_path}/r"],
        capture_output=True, text=True, cwd=CONF.parent, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "pods: error: +experiment=greso: 'experiment' already has its slot in conf/train.yaml's defaults; "
        "write experiment=greso (without '+')"
    ]


def test_no_module_patches_hydra_internals():
    root = CONF.parent
    offenders = [
        str(p.relative_to(root))
        for d in ("pods", "scripts", "tests")
        for p in (root / d).rglob("*.py")
        if "hydra._internal" in p.read_text() and p.name != "test_presets.py"
    ]
    assert not offenders


HUB_MODELS = ["llama3.2-3b", "qwen2.5-0.5b", "qwen2.5-1.5b", "qwen2.5-3b"]


def test_hub_model_presets_differ_only_in_name_and_path(make_cfg):
    """The shared part lives once (conf/model/shared/hub.yaml): the paper's single-GPU setting."""
    cfgs = {m: OmegaConf.to_container(make_cfg(f"model={m}"), resolve=True) for m in HUB_MODELS}
    for m, c in cfgs.items():
        assert c["model"].pop("name") == m and c["model"].pop("path")
    first = cfgs[HUB_MODELS[0]]
    assert all(c == first for c in cfgs.values())
    assert first["model"]["lora"]["r"] == 64 and first["model"]["max_completion_len"] == 512
    assert first["optim"]["lr"] == 5e-6 and first["sampling"]["temperature"] == 0.9
    assert first["algo"]["prompts_per_step"] == 1


@pytest.mark.parametrize(
    "overrides,n_m",
    [([], (4, 2)), (["selector=none"], (4, 4)), (["arm=none-n16-m16"], (4, 4)), (["selector=none", "selector.n=6"], (6, 6))],
)  # fmt: skip
def test_debug_smoke_keeps_the_selectors_down_sampling(make_cfg, overrides, n_m):
    """debug=smoke shrinks n, and a down-sampler still keeps fewer than it draws; one that keeps all (GRPO)
    keeps n (pods.naming.kept, by the selector's keeps_all trait)."""
    c = checked(make_cfg("debug=smoke", *overrides))
    assert (c.selector.n, c.selector.m) == n_m
