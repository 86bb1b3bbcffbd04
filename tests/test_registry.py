"""Registries: a new file under pods/selector/ registers without editing __init__.py; bad names and
unimportable plugins fail in one line. (README's plugin recipes run verbatim in tests/test_readme_recipes.py.)"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pods.components import checked
from pods.config import ConfigError
from pods.registry import Registry, import_submodules
from pods.train import load_plugins, preflight

ROOT = Path(__file__).resolve().parents[1]


def test_a_new_selector_file_under_pods_selection_registers_without_editing_init(tmp_path):
    # in a copy of the package: a file added to this checkout's pods/selector/ would be imported by any pods
    # process starting meanwhile (a test on another worker under `pytest -n`), and fail it once removed
    shutil.copytree(ROOT / "pods", tmp_path / "pods", ignore=shutil.ignore_patterns("assets", "__pycache__"))
    (tmp_path / "pods" / "assets").symlink_to(ROOT / "pods" / "assets")
    (tmp_path / "pods" / "selector" / "zz_recipe_probe.py").write_text(
        "from pods.selector.selectors import register_selector\n\n"
        "@register_selector('zz_probe')\ndef probe(rewards, m, generator=None):\n    return rewards[:, :m]\n"
    )
    code = "import pods; from pods.selector import SELECTORS; print(pods.__file__, 'zz_probe' in SELECTORS)"
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert out.stdout.split() == [str(tmp_path / "pods" / "__init__.py"), "True"], out.stderr[-2000:]


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
        checked(make_cfg(override))
    assert message in str(e.value) and "\n" not in str(e.value)


def test_a_plugin_that_cannot_be_imported_is_one_line(make_cfg):
    with pytest.raises(
        ConfigError, match=r"plugins=\['no_such_plugin_mod'\]: cannot import 'no_such_plugin_mod'"
    ):
        load_plugins(list(make_cfg("plugins=[no_such_plugin_mod]").plugins))


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["rollout.name=sglang"], "rollout.name='sglang' is not valid; allowed values: hf, vllm"),
        (["hardware.distributed=fsdp", "rollout=vllm"], "fsdp does not support rollout.name=vllm yet"),
    ],
)
def test_the_backend_is_checked_in_preflight_before_anything_loads(make_cfg, monkeypatch, overrides, message):
    import pods.memory

    monkeypatch.setattr(pods.memory, "choose_lora", lambda *a: pytest.fail("sized"))
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


def test_build_generator_is_build_backend_under_its_earlier_name(monkeypatch):
    """One name for the rollout backend (issue 54): the old builder still works, with a warning."""
    from pods.rollout import backend

    monkeypatch.setattr(backend, "build_backend", lambda *a: ("built", a))
    with pytest.warns(FutureWarning, match="build_backend"):
        assert backend.build_generator("settings", "model", "tok", "cpu") == (
            "built",
            ("settings", "model", "tok", "cpu", None),
        )
