"""pods.components: the one place where component names meet the registries, and where a component's own
settings (its registry entry's dataclass) are typed and checked; pods.config stays below every stage."""

from __future__ import annotations

import ast
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from pods.components import checked
from pods.config import ConfigError, as_container
from pods.selector import SELECTORS, register_selector
from pods.testing import check_selector

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class TopSettings:
    highest: bool = True  # keep the m highest rewards, else the m lowest
    k: int = 1

    def check(self) -> None:
        if self.k < 1:
            raise ConfigError(f"selector.test_top.k={self.k} must be >= 1")


def top(rewards, m, generator=None, highest=True, k=1):
    order = torch.argsort(-rewards if highest else rewards, dim=1, stable=True)
    return order[:, :m].sort(dim=1).values


@pytest.fixture
def with_top():
    register_selector("test_top", settings=TopSettings)(top)
    yield
    del SELECTORS["test_top"], SELECTORS.settings["test_top"]


def test_a_component_s_settings_come_from_its_section_typed(make_cfg, with_top):
    c = checked(make_cfg("selector.name=test_top", "selector.test_top.highest=false"))
    assert c.selector.own() == TopSettings(highest=False)
    assert as_container(c)["selector"]["test_top"] == {"highest": False, "k": 1}  # saved as it was written
    check_selector(top, settings=c.selector.own())


def test_a_chosen_component_without_a_section_gets_its_defaults(make_cfg, with_top):
    assert checked(make_cfg("selector.name=test_top")).selector.own() == TopSettings()


@pytest.mark.parametrize(
    "override, message",
    [
        ("selector.test_top.k=0", "selector.test_top.k=0 must be >= 1"),
        ("selector.test_top.kk=2", "selector.test_top.kk: Key 'kk' not in 'TopSettings'"),
        (
            "selector.test_top.k=many",
            "selector.test_top.k: Value 'many' of type 'str' could not be converted",
        ),
        ("selector.tset_top.k=2", "selector.tset_top is neither a setting of selector nor the section of"),
        ("selector.random.k=2", "selector 'random' declares no settings of its own"),
    ],
)
def test_a_bad_section_is_one_line_naming_the_key(make_cfg, with_top, override, message):
    with pytest.raises(ConfigError) as e:
        checked(make_cfg("selector.name=test_top", override))
    assert message in str(e.value) and "\n" not in str(e.value)


def test_an_unknown_name_lists_the_registered_ones_and_says_plugins(make_cfg):
    with pytest.raises(
        ConfigError, match=r"allowed values: max_reward, max_variance, none, random .*plugins="
    ):
        checked(make_cfg("selector.name=nope"))


def test_config_imports_no_stage():
    """pods/config.py is the bottom layer: it imports no stage, not even inside a function."""
    tree = ast.parse((ROOT / "pods" / "config.py").read_text())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)} | {
        a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names
    }
    pods_modules = sorted(m for m in imported if m and m.startswith("pods"))
    assert pods_modules == ["pods.errors", "pods.naming"], pods_modules
    code = "import sys, pods.config; print(sorted(m for m in sys.modules if m.startswith('pods.')))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert eval(out.stdout) == ["pods.config", "pods.errors"]


@dataclass
class CapSettings:
    cap: int = 10


def test_a_reward_gets_its_settings_as_keywords(make_cfg):
    from pods.reward import REWARDS, build_reward, register_reward

    register_reward("test_capped", settings=CapSettings)(
        lambda completions, answers, cap=10, **kw: [min(len(c), cap) / cap for c in completions]
    )
    try:
        c = checked(make_cfg("+reward.weights.test_capped=1.0", "reward.test_capped.cap=4"))
        r = build_reward(c.reward)
        try:
            assert r(["abcdefgh", "ab"], ["1", "1"]).terms["test_capped"] == [1.0, 0.5]
        finally:
            r.close()
    finally:
        del REWARDS["test_capped"], REWARDS.settings["test_capped"]


def floaty(rewards, m, generator=None):
    return torch.argsort(rewards, dim=1)[:, :m].float()  # float indices: the loop would fail at step 1


def no_generator(rewards, m):
    return torch.argsort(rewards, dim=1)[:, :m].sort(dim=1).values


@pytest.mark.parametrize(
    "fn, message",
    [
        (
            floaty,
            "selector.name='test_bad': selector on continuous rewards: dtype torch.float32; indices are integers",
        ),
        (no_generator, "selector.name='test_bad': selector: takes (rewards, m); the loop passes 'generator'"),
    ],
)
def test_a_selector_that_breaks_its_contract_is_refused_before_the_model_loads(make_cfg, fn, message):
    register_selector("test_bad")(fn)
    try:
        with pytest.raises(ConfigError) as e:
            checked(make_cfg("selector.name=test_bad"))
        assert message in str(e.value) and "\n" not in str(e.value)
    finally:
        del SELECTORS["test_bad"]


@pytest.mark.parametrize(
    "overrides, message",
    [
        (
            ["prefilter.name=none", "prefilter.greso.p_init=0.9"],
            "prefilter.greso: settings of prefilter 'greso', which is not chosen (prefilter.name='none')",
        ),
        (
            ["selector.test_top.k=2"],
            "selector.test_top: settings of selector 'test_top', which is not chosen",
        ),
        (
            ["rollout.name=hf", "rollout.vllm.gpu_memory_utilization=0.5"],
            "rollout.vllm: settings of rollout backend 'vllm', which is not chosen (rollout.name='hf')",
        ),
        (
            ["hardware=gpu_lora", "rollout=vllm", "rollout.name=hf"],  # the profile's vllm share, hf chosen
            "rollout.vllm: settings of rollout backend 'vllm', which is not chosen (rollout.name='hf')",
        ),
    ],
)
def test_settings_of_a_component_that_is_not_chosen_are_refused(make_cfg, with_top, overrides, message):
    with pytest.raises(ConfigError) as e:
        checked(make_cfg(*overrides))
    assert message in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize(
    "overrides, share",
    [
        (["hardware=gpu_lora", "rollout=vllm"], 0.5),  # conf/hardware_rollout/gpu_lora_vllm.yaml
        (["experiment=gsm8k_main", "rollout=vllm"], 0.5),  # the profile chosen by an experiment
        (["hardware=gpu", "rollout=vllm"], 0.35),  # no file for this pair: the backend's default
        (["hardware=gpu_lora"], None),  # hf runs: no vllm section at all
    ],
)
def test_a_hardware_profile_sets_only_the_chosen_backends_knobs(make_cfg, overrides, share):
    c = checked(make_cfg(*overrides))
    assert set(c.rollout.sections) == {c.rollout.name}
    assert (c.rollout.own().gpu_memory_utilization if c.rollout.name == "vllm" else None) == share


def test_keeping_all_is_a_trait_of_the_registry_entry_not_a_name(make_cfg):
    register_selector("test_all", keeps_all=True)(
        lambda r, m, generator=None: torch.arange(m).expand(len(r), m)
    )
    try:
        c = checked(make_cfg("selector.name=test_all", "selector.n=8", "selector.m=8"))
        assert c.selector.name == "test_all"
        with pytest.raises(ConfigError, match="selector.m=4 != selector.n=8 needs a down-sampler"):
            checked(make_cfg("selector.name=test_all", "selector.n=8", "selector.m=4"))
    finally:
        del SELECTORS["test_all"]


def test_the_correctness_term_is_a_configured_role(make_cfg):
    from pods.reward import REWARDS, build_reward, register_reward

    register_reward("test_passes")(
        lambda completions, answers, **kw: [float("pass" in c) for c in completions]
    )
    try:
        with pytest.raises(ConfigError, match="reward.correctness='test_nope' is not valid; allowed values:"):
            checked(make_cfg("reward.correctness=test_nope"))
        c = checked(make_cfg("reward.correctness=test_passes"))  # computed, not weighted
        r = build_reward(c.reward)
        try:
            out = r(["pass <answer>1</answer>", "<answer>1</answer>"], ["1", "1"])
            assert out.correct == [True, False] and out.terms["test_passes"] == [1.0, 0.0]
            assert out.terms["accuracy"] == [1.0, 1.0]  # right answers, but not what decides correctness here
        finally:
            r.close()
    finally:
        del REWARDS["test_passes"]


def test_a_down_sampler_given_m_equal_n_says_so_in_one_warning(make_cfg, caplog):
    with caplog.at_level("WARNING", logger="pods"):
        checked(make_cfg("selector.m=64"))  # max_variance, n = 64
    lines = [r.getMessage() for r in caplog.records if "nothing is down-sampled" in r.getMessage()]
    assert len(lines) == 1 and "selector.m = selector.n = 64" in lines[0] and "\n" not in lines[0]
    caplog.clear()
    with caplog.at_level("WARNING", logger="pods"):
        checked(make_cfg("selector=none"))  # GRPO keeps all n by design: no warning
    assert not [r for r in caplog.records if "down-sampled" in r.getMessage()]


@pytest.mark.parametrize(
    "overrides,advantage,loss",
    [([], ("grpo", {"stats": "kept", "scale_by_std": True}), ("token", None)),
     (["advantage=rloo", "loss=dapo", "loss.dapo.clip_high=0.3"], ("rloo", None),
      ("dapo", {"clip_low": 0.2, "clip_high": 0.3})),
     (["advantage.name=dr_grpo", "loss.name=dr_grpo"], ("dr_grpo", {"stats": "kept"}), ("dr_grpo", {"norm_len": 0})),
     (["advantage.stats=full", "advantage.scale_by_std=false", "algo.loss_agg=sequence"],
      ("grpo", {"stats": "full", "scale_by_std": False}), ("sequence", None))],
)  # fmt: skip
def test_advantage_and_loss_are_picked_by_name_old_keys_included(make_cfg, overrides, advantage, loss):
    c = checked(make_cfg(*overrides))
    for group, (name, knobs) in (("advantage", advantage), ("loss", loss)):
        g = getattr(c, group)
        assert g.name == name and (knobs is None) == (g.own() is None)
        assert knobs is None or vars(g.own()) == knobs
    assert c.algo.loss_agg is None  # read as loss.name


@pytest.mark.parametrize(
    "override,message",
    [("advantage.name=ppo", "advantage.name='ppo' is not valid; allowed values: dr_grpo, grpo, rloo"),
     ("loss=dr_grpo loss.dr_grpo.norm=3", "loss.dr_grpo.norm: Key 'norm' not in 'DrGrpoSettings'"),
     ("loss.dapo.clip_high=0.3", "loss.dapo: settings of loss 'dapo', which is not chosen (loss.name='token')"),
     ("advantage=rloo advantage.rloo.x=1", "advantage.rloo: advantage 'rloo' declares no settings of its own")],
)  # fmt: skip
def test_an_unknown_estimator_or_a_bad_knob_is_one_line(make_cfg, override, message):
    with pytest.raises(ConfigError) as e:
        checked(make_cfg(*override.split()))
    assert message in str(e.value) and "\n" not in str(e.value)


def test_a_loss_that_breaks_its_contract_stops_preflight(make_cfg):
    from pods.update import LOSSES, register_loss

    register_loss("test_micro_mean")(
        lambda logp, old_logp, adv, mask: ((-adv[:, None] * logp * mask).mean(), {})
    )
    try:
        with pytest.raises(ConfigError, match=r"^loss.name='test_micro_mean': loss: .*\(pods.testing\)$"):
            checked(make_cfg("loss.name=test_micro_mean"))
    finally:
        LOSSES.pop("test_micro_mean")
        LOSSES.traits.pop("test_micro_mean")
