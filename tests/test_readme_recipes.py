"""README's extension recipes, run as README.md and docs/extending.md write them: every ```python block that opens
with `# my_<name>.py` is saved under that name, and README's `PYTHONPATH=my_plugins python -m pods.train ...`
command runs them on the smoke settings. A recipe that drifts from an interface (a generate() without
an argument eval passes, a renamed hook) fails here, not in a user's first eval."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from pods.tracking import read_metrics
from tests.conftest import SMOKE

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
EXTENDING = (ROOT / "docs" / "extending.md").read_text()  # the prefilter and backend recipes live there


def recipe_files() -> dict[str, str]:
    """{file name: code} of the ```python blocks of README and docs/extending.md that open with `# my_<name>.py`."""
    blocks = re.findall(r"```python\n(.*?)```", README + EXTENDING, flags=re.S)
    return {m.group(1): b for b in blocks if (m := re.match(r"# (my_\w+\.py)\n", b))}


def logical_lines(text: str) -> list[str]:
    """The text's lines with shell continuations (a line ending in a backslash) joined, as bash reads them."""
    return re.sub(r"\\\n\s*", " ", text).splitlines()


def recipe_command() -> list[str]:
    """README's command that runs the plugins, as argv (its `PYTHONPATH=...` prefix dropped)."""
    lines = [
        ln
        for ln in logical_lines(README)
        if ln.startswith("PYTHONPATH=my_plugins python -m pods.train") and "hydra.searchpath" not in ln
    ]
    assert len(lines) == 1, f"README holds {len(lines)} plugin commands; this test runs exactly one"
    return shlex.split(lines[0])[1:]


@pytest.mark.slow
def test_readme_recipes_run_verbatim_from_the_command_line(tmp_path):
    files = recipe_files()
    assert set(files) == {
        "my_selectors.py",
        "my_rewards.py",
        "my_filters.py",
        "my_backend.py",
        "my_advantages.py",
    }
    plugins = tmp_path / "my_plugins"
    plugins.mkdir()
    for name, code in files.items():
        (plugins / name).write_text(code)
    argv = recipe_command()
    assert argv[:3] == ["python", "-m", "pods.train"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(plugins), str(ROOT)])}
    cmd = [sys.executable, *argv[1:], *SMOKE, f"hydra.run.dir={tmp_path}/run"]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = tmp_path / "run"
    cfg = OmegaConf.load(run / "config.yaml")
    assert sorted(cfg.plugins) == sorted(Path(f).stem for f in files)
    assert (cfg.selector.name, cfg.prefilter.name, cfg.rollout.name) == (
        "min_reward",
        "even_only",
        "my_engine",
    )
    assert cfg.selector.min_reward.jitter == 0.1  # the plugin selector's own setting, from the command line
    assert (cfg.advantage.name, cfg.advantage.median.scale) == ("median", 0.5)
    records = read_metrics(run / "metrics.jsonl")
    train = [r for r in records if r["kind"] == "train"]
    assert [r["step"] for r in train] == [1, 2, 3]
    assert all("reward/brevity" in r for r in train)
    assert any(r["kind"] == "eval" for r in records)  # eval called the recipe backend's generate()


def test_a_plugin_s_own_yaml_is_found_in_the_plugin_s_folder(tmp_path):
    """docs/extending.md's `hydra.searchpath=[file://my_plugins/conf]` line, run from the folder that holds my_plugins/:
    `selector=min_reward` picks the plugin folder's YAML (printed with --cfg job: composed, not trained)."""
    lines = [
        ln
        for ln in EXTENDING.splitlines()
        if ln.startswith("PYTHONPATH=my_plugins") and "hydra.searchpath" in ln
    ]
    assert len(lines) == 1, "docs/extending.md holds one command for a plugin's own YAML"
    conf = tmp_path / "my_plugins" / "conf" / "selector"
    conf.mkdir(parents=True)
    (tmp_path / "my_plugins" / "my_selectors.py").write_text(recipe_files()["my_selectors.py"])
    (conf / "min_reward.yaml").write_text("name: min_reward\nn: 8\nm: 3\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "my_plugins"), str(ROOT)])}
    argv = shlex.split(lines[0])[1:]
    proc = subprocess.run([sys.executable, *argv[1:], "--cfg", "job"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    selector = OmegaConf.create(proc.stdout).selector
    assert (selector.name, selector.n, selector.m) == ("min_reward", 8, 3)


def test_the_readme_advantage_estimator_runs_and_is_picked_by_name(tmp_path, monkeypatch, make_cfg):
    """README's `my_advantages.py`, imported as a plugin: it conforms, its numbers are the hand-computed ones,
    and `advantage.name=median advantage.median.scale=0.5` picks it with its knob."""
    import torch

    from pods.components import checked
    from pods.registry import load_plugins
    from pods.testing import check_advantage
    from pods.update import ADVANTAGES, estimate_advantages

    code = recipe_files()["my_advantages.py"]
    assert len(code.strip().splitlines()) < 20
    (tmp_path / "my_advantages.py").write_text(code)
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        load_plugins(["my_advantages"])  # what preflight does with plugins=[...]
        c = checked(
            make_cfg("plugins=[my_advantages]", "advantage.name=median", "advantage.median.scale=0.5")
        )
        check_advantage("median", settings=c.advantage.own())
        rewards = torch.tensor([[1.0, 0.0, 3.0], [2.0, 2.0, 2.0]])  # medians 1 and 2
        adv = estimate_advantages(c.advantage.name, rewards, rewards, c.advantage.own())
        assert adv.tolist() == [0.0, -0.5, 1.0, 0.0, 0.0, 0.0]
    finally:
        ADVANTAGES.pop("median", None)
        ADVANTAGES.settings.pop("median", None)
        ADVANTAGES.traits.pop("median", None)
        sys.modules.pop("my_advantages", None)


def test_the_first_screen_plugin_command_composes_and_its_reward_conforms(tmp_path, monkeypatch, make_cfg):
    """README's "Change one component" step: its `PYTHONPATH=. python -m pods.train plugins=[my_rewards] ...`
    command, with README's `my_rewards.py` beside it, composes and checks (the plugin imported first, as preflight
    does), and the reward holds to its contract."""
    from pods.components import checked
    from pods.registry import load_plugins
    from pods.reward import REWARDS
    from pods.testing import check_reward

    lines = [ln for ln in logical_lines(README) if ln.startswith("PYTHONPATH=. python -m pods.train")]
    assert len(lines) == 1, "README's first screen holds one command for its reward plugin"
    argv = shlex.split(lines[0].split("#")[0])[1:]
    assert argv[:3] == ["python", "-m", "pods.train"]
    (tmp_path / "my_rewards.py").write_text(recipe_files()["my_rewards.py"])
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        load_plugins(["my_rewards"])
        c = checked(make_cfg(*argv[3:]))
        assert list(c.plugins) == ["my_rewards"] and c.reward.weights["brevity"] == 0.1
        check_reward("brevity")
    finally:
        REWARDS.pop("brevity", None)
        sys.modules.pop("my_rewards", None)
