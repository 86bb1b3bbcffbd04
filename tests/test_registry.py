"""README's recipes, followed by a newcomer: a selector, a reward, a prefilter and a rollout backend written
in a module outside pods, named in `plugins:` and picked by name on the command line, are the ones the run
uses; a new file under pods/selection/ registers without editing __init__.py; bad names fail in one line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pods.config import ConfigError, validate
from pods.registry import Registry, import_submodules
from pods.tracking import read_metrics
from pods.train import load_plugins, preflight
from tests.conftest import SMOKE

ROOT = Path(__file__).resolve().parents[1]

PLUGIN = '''
"""A throwaway plugin: one component per README recipe; each notes in $RECIPE_LOG that it was used."""
import os

import torch

from pods.filter import NoFilter, register_prefilter
from pods.reward import register_reward
from pods.rollout import HFGenerator, register_backend
from pods.selection import register_selector


def used(what):
    with open(os.environ["RECIPE_LOG"], "a") as f:
        f.write(what + "\\n")


@register_selector("recipe_min_reward")
def min_reward(rewards: torch.Tensor, m: int, generator=None) -> torch.Tensor:
    used("selector")
    return torch.argsort(rewards, dim=1, stable=True)[:, :m].sort(dim=1).values


@register_reward("recipe_length")
def length(completions, answers, **kw):
    used("reward")
    return [min(len(c), 100) / 100 for c in completions]


@register_prefilter("recipe_even")
class EvenPrompts(NoFilter):  # as README's recipe: NoFilter gives the no-op methods
    """Roll out only prompts with an even index."""

    def __init__(self, cfg, seed):
        self.skipped = 0

    def keep(self, prompt_ids, epoch):
        used("prefilter")
        out = [p % 2 == 0 for p in prompt_ids]
        self.skipped += out.count(False)
        return out

    def observe(self, prompt_ids, epoch, rewards):
        assert all(p % 2 == 0 for p in prompt_ids)

    def metrics(self):
        return {"filter/recipe_skipped": float(self.skipped)}


@register_backend("recipe_hf")
class LoggedHF(HFGenerator):
    def generate(self, *args, **kwargs):
        used("backend")
        return super().generate(*args, **kwargs)
'''


def test_plugins_from_the_readme_recipes_are_used_by_a_run_from_the_command_line(tmp_path):
    (tmp_path / "plugins").mkdir()
    (tmp_path / "plugins" / "recipe_plugin.py").write_text(PLUGIN)
    log = tmp_path / "used.txt"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(tmp_path / "plugins")]),
        "RECIPE_LOG": str(log),
    }
    cmd = [
        sys.executable, "-m", "pods.train", *SMOKE, "plugins=[recipe_plugin]",
        "selector.name=recipe_min_reward", "prefilter.name=recipe_even", "rollout.backend=recipe_hf",
        "+reward.weights.recipe_length=0.1", f"hydra.run.dir={tmp_path}/run",
    ]  # fmt: skip
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert set(log.read_text().split()) == {"selector", "reward", "prefilter", "backend"}
    train = [r for r in read_metrics(tmp_path / "run" / "metrics.jsonl") if r["kind"] == "train"]
    assert [r["step"] for r in train] == [1, 2, 3]
    assert all("reward/recipe_length" in r and "filter/recipe_skipped" in r for r in train)
    assert train[-1]["filter/recipe_skipped"] > 0


def test_a_new_selector_file_under_pods_selection_registers_without_editing_init():
    path = ROOT / "pods" / "selection" / f"zz_recipe_probe_{os.getpid()}.py"
    path.write_text(
        "from pods.selection.selectors import register_selector\n\n"
        "@register_selector('zz_probe')\ndef probe(rewards, m, generator=None):\n    return rewards[:, :m]\n"
    )
    try:
        code = "from pods.selection import SELECTORS; print('zz_probe' in SELECTORS)"
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True)
        assert out.stdout.strip() == "True", out.stderr[-2000:]
    finally:
        path.unlink()


def test_import_submodules_imports_every_module_of_a_package(tmp_path, monkeypatch):
    pkg = tmp_path / "recipe_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from pods.registry import Registry\nTHINGS = Registry('thing')\n")
    for name in ("a", "b"):
        (pkg / f"{name}.py").write_text(
            f"from recipe_pkg import THINGS\nTHINGS.register('{name}')(object())\n"
        )
    monkeypatch.syspath_prepend(str(tmp_path))
    import_submodules("recipe_pkg")
    assert sorted(sys.modules["recipe_pkg"].THINGS) == ["a", "b"]


@pytest.mark.parametrize(
    "override, message",
    [
        ("prefilter.name=nope", "allowed values: greso, none"),
        ("selector.name=nope", "allowed values: max_reward, max_variance, none, random"),
    ],
)
def test_an_unknown_component_fails_at_config_time_listing_the_registered_ones(make_cfg, override, message):
    with pytest.raises(ConfigError) as e:
        validate(make_cfg(override))
    assert message in str(e.value) and "\n" not in str(e.value)


def test_a_plugin_that_cannot_be_imported_is_one_line(make_cfg):
    with pytest.raises(
        ConfigError, match=r"plugins=\['no_such_plugin_mod'\]: cannot import 'no_such_plugin_mod'"
    ):
        load_plugins(list(make_cfg("plugins=[no_such_plugin_mod]").plugins))


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["rollout.backend=sglang"], "rollout.backend='sglang' is not valid; allowed values: hf, vllm"),
        (["hardware.distributed=fsdp", "rollout=vllm"], "fsdp does not support rollout.backend=vllm yet"),
    ],
)
def test_the_backend_is_checked_in_preflight_before_anything_loads(make_cfg, monkeypatch, overrides, message):
    import pods.memory

    monkeypatch.setattr(pods.memory, "choose_finetune", lambda *a: pytest.fail("sized"))
    with pytest.raises(ConfigError) as e:
        preflight(make_cfg(*overrides))
    assert message in str(e.value) and "\n" not in str(e.value)


def test_registry_lookup_lists_the_valid_names():
    r = Registry("widget")
    r.register("a")(1)
    with pytest.raises(KeyError, match="x='b' is not registered; valid widget names: a"):
        r.get_or_raise("b", "x")
    with pytest.raises(ValueError, match="already registered"):
        r.register("a")(2)
