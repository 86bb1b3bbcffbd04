"""A plugin's mistake is one line naming the plugin: before the model loads where it can be known then (a
reward's return value and row fields, a settings check() that raises, a prefilter state no checkpoint can
hold), else at the first call that shows it (a reward's count, a selector's indices), exit 2 with the newest
checkpoint intact."""

from __future__ import annotations

import math
import os
import pickle
import subprocess
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from pods import cli, train
from pods.components import checked
from pods.config import ConfigError
from pods.errors import PluginError
from pods.prefilter import PREFILTERS
from pods.prefilter.registry import NoFilter
from pods.reward import REWARDS
from pods.selector import SELECTORS
from pods.selector.selectors import downsample
from tests.conftest import SMOKE

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def registered():
    """Register components for one test: `registered(REWARDS, "name", fn, settings=None)`; removed after."""
    added = []

    def add(registry, name, obj, settings=None):
        registry.register(name, settings)(obj)
        added.append((registry, name))

    yield add
    for registry, name in added:
        registry.pop(name)
        registry.settings.pop(name, None)
        registry.traits.pop(name, None)


@pytest.fixture
def no_model(monkeypatch):
    """The policy must not load: a refusal before it is the point of the test."""

    def load_policy(*a, **kw):
        raise AssertionError("the model was loaded before the refusal")

    monkeypatch.setattr("pods.trainer.load_policy", load_policy)


def refused_before_the_model(make_cfg, *overrides) -> str:
    """Run the config in this process up to the model; the one-line PluginError it is refused with."""
    with pytest.raises(PluginError) as e:
        train.run(make_cfg(*SMOKE, *overrides))
    assert "\n" not in str(e.value)
    return str(e.value)


# --- rewards, before the model loads -------------------------------------------------------------------


def short(completions, answers, **kw):
    return [0.0] * (len(completions) - 1)


@pytest.mark.parametrize(
    "fn, message",
    [
        (
            lambda completions, answers, **kw: 0.5,
            "reward 'test_bad' returned 0.5 for 3 completions; a reward",
        ),
        (short, "reward 'test_bad' returned 2 values for 3 completions ([0.0, 0.0]); a reward returns one"),
        (lambda c, a, **kw: [math.nan] * len(c), "reward 'test_bad' returned [nan, nan, nan] on 3 synthetic"),
        (
            lambda c, a, **kw: [1 / 0],
            "reward 'test_bad' raised on 3 synthetic completions of the train set's",
        ),
        (lambda c, a, level, **kw: [0.0] * len(c), "reward 'test_bad' takes 'level', a field the train rows"),
    ],
    ids=["a float", "one value short", "nan", "raises", "a field the rows lack"],
)
def test_a_reward_that_breaks_its_contract_is_refused_before_the_model_loads(
    make_cfg, registered, no_model, fn, message
):
    registered(REWARDS, "test_bad", fn)
    got = refused_before_the_model(make_cfg, "+reward.weights.test_bad=1.0")
    assert message in got, got


def test_a_reward_that_takes_a_field_the_rows_have_runs(make_cfg, registered, monkeypatch):
    seen = []

    def answer_length(completions, answers, question, **kw):
        seen.append(question)
        return [float(len(a)) for a in answers]

    registered(REWARDS, "test_field", answer_length)
    monkeypatch.setattr(
        "pods.trainer.load_policy", lambda *a, **kw: (_ for _ in ()).throw(RuntimeError("past"))
    )
    with pytest.raises(RuntimeError, match="past"):  # every check passed: the model is next
        train.run(make_cfg(*SMOKE, "+reward.weights.test_field=0.0"))
    assert len(seen) == 1 and len(seen[0]) == 3 and all(isinstance(q, str) for q in seen[0])


# --- a reward or a selector at run time -----------------------------------------------------------------


def test_a_reward_s_wrong_count_at_run_time_names_it(registered):
    from pods.reward.registry import Grader, Reward

    registered(REWARDS, "test_three", lambda completions, answers, **kw: [1.0, 0.0, 1.0])
    reward = Reward("r", {"test_three": 1.0}, Grader(), correctness="test_three")
    assert reward(["a", "b", "c"], ["1", "1", "1"]).total == [1.0, 0.0, 1.0]
    with pytest.raises(
        PluginError, match=r"^reward 'test_three' returned 3 values for 8 completions \(\[1\.0"
    ):
        reward(["a"] * 8, ["1"] * 8)


@pytest.mark.parametrize(
    "keep, message",
    [
        (
            lambda P, m: torch.zeros(P, m, dtype=torch.long),
            "returned repeated indices in a row: Tensor (2, 3)",
        ),
        (
            lambda P, m: torch.full((P, m), 9),
            "returned out-of-range indices: Tensor (2, 3) torch.int64 [[9, 9,",
        ),
        (lambda P, m: torch.arange(m - 1).expand(P, -1), "returned shape (2, 2): Tensor (2, 2)"),
        (lambda P, m: [[0, 1, 2]] * P, "returned a list, not a tensor: [[0, 1, 2], [0, 1, 2]]"),
        (lambda P, m: torch.arange(m).expand(P, -1).float(), "returned dtype torch.float32: "),
    ],
    ids=["repeated", "out of range", "one short", "a list", "floats"],
)
def test_a_selector_s_bad_answer_is_one_line_naming_it_and_showing_it(registered, keep, message):
    registered(SELECTORS, "test_bad", lambda rewards, m, generator=None: keep(rewards.shape[0], m))
    with pytest.raises(PluginError) as e:
        downsample("test_bad", torch.rand(2, 8), 3)
    got = str(e.value)
    assert got.startswith(f"selector 'test_bad' {message}") and "\n" not in got, got
    assert got.endswith("(a selector returns (P, m) = (2, 3) distinct integer indices in [0, 8) per row)")


def test_a_plugin_error_ends_the_run_in_one_printed_line_exit_2(capsys, tmp_path):
    import logging

    log_file = tmp_path / "train.log"
    root, file, console = (
        logging.getLogger(),
        logging.FileHandler(log_file),
        logging.StreamHandler(sys.stdout),
    )
    root.addHandler(file), root.addHandler(console)
    try:
        with pytest.raises(SystemExit) as e, cli.one_line_errors():
            raise PluginError("selector 'x' returned repeated indices")
    finally:
        root.removeHandler(file), root.removeHandler(console)
        file.close()
    out, err = capsys.readouterr()
    assert e.value.code == 2 and err == "pods: error: selector 'x' returned repeated indices\n"
    assert "repeated" not in out  # the console: once, on stderr
    assert (
        log_file.read_text() == "PluginError: selector 'x' returned repeated indices\n"
    )  # the log file: once


# --- settings check() and prefilter state, at preflight ------------------------------------------------


@dataclass
class Knobs:
    k: int = 1

    def check(self) -> None:
        assert self.k > 0, "k must be positive"


def test_an_exception_from_a_settings_check_is_one_line_naming_the_component(make_cfg, registered):
    registered(
        SELECTORS, "test_knobs", lambda rewards, m, generator=None, k=1: rewards.argsort(1)[:, :m], Knobs
    )
    with pytest.raises(ConfigError) as e:
        checked(make_cfg("selector.name=test_knobs", "selector.test_knobs.k=0"))
    assert str(e.value).startswith(
        "selector.test_knobs: Knobs.check() raised AssertionError: k must be positive ("
    ), str(e.value)
    assert "test_plugin_errors.py:" in str(e.value) and "\n" not in str(e.value)


class LambdaState(NoFilter):
    """Remembers each prompt's outcomes in a defaultdict whose factory is a lambda: no pickle holds it."""

    def __init__(self, seed: int = 0, **knobs):
        self.seen = defaultdict(lambda: [])

    def state_dict(self) -> dict:
        return {"seen": self.seen}


def test_a_prefilter_whose_state_cannot_be_pickled_is_refused_at_preflight(make_cfg, registered):
    with pytest.raises(Exception):  # noqa: B017 - what torch.save would meet at the first checkpoint
        pickle.dumps(LambdaState().state_dict())
    registered(PREFILTERS, "test_lambda", LambdaState)
    with pytest.raises(ConfigError) as e:
        checked(make_cfg("prefilter.name=test_lambda"))
    assert str(e.value).startswith(
        "prefilter.name='test_lambda': prefilter: state_dict() when built does not survive a checkpoint's save "
        "and load ("
    ), str(e.value)
    assert "\n" not in str(e.value)


def test_pods_own_prefilters_pass_the_pickle_check():
    from pods.testing import check_prefilter

    for name in PREFILTERS:
        if not name.startswith("test_"):
            check_prefilter(name)


# --- from the command line ---------------------------------------------------------------------------

LATE_REPEAT = """
import os
from pathlib import Path

import torch

from pods.selector import register_selector


@register_selector("test_late_repeat")
def late_repeat(rewards, m, generator=None):
    # honest until the run has saved step 2, then every index the same
    if (Path(os.environ["TEST_RUN_DIR"]) / "checkpoints" / "step_0000002").exists():
        return torch.zeros(rewards.shape[0], m, dtype=torch.long)
    return torch.argsort(rewards, dim=1, stable=True)[:, :m].sort(1).values
"""

SCALAR = """
from pods.reward import register_reward


@register_reward("test_scalar")
def scalar(completions, answers, **kw):
    return 0.5
"""


def pods_train(tmp_path: Path, plugin: str, *overrides: str) -> subprocess.CompletedProcess:
    (tmp_path / "test_plugin_mod.py").write_text(plugin)
    run = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}", "TEST_RUN_DIR": str(run)}
    args = [*SMOKE, "plugins=[test_plugin_mod]", f"hydra.run.dir={run}", *overrides]
    return subprocess.run(
        [sys.executable, "-m", "pods.train", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def printed_once(p: subprocess.CompletedProcess, message: str) -> str:
    """The one `pods: error:` line, which holds `message`, printed once in all of the output (no traceback)."""
    errors = [x for x in p.stderr.splitlines() if x.startswith("pods: error:")]
    assert p.returncode == 2 and len(errors) == 1 and message in errors[0], p.stderr[-3000:]
    assert (p.stdout + p.stderr).count(message) == 1 and "Traceback" not in p.stdout + p.stderr
    return errors[0]


def test_a_reward_refused_at_preflight_from_the_command_line_is_one_line(tmp_path):
    p = pods_train(tmp_path, SCALAR, "+reward.weights.test_scalar=1.0")
    printed_once(p, "reward 'test_scalar' returned 0.5 for 3 completions")
    (log,) = (tmp_path / "run").glob("*.log")
    assert log.read_text().count("PluginError: reward 'test_scalar' returned 0.5") == 1
    assert (
        not (tmp_path / "run" / "checkpoints").exists() and not (tmp_path / "run" / "metrics.jsonl").exists()
    )


def test_a_selector_that_breaks_at_run_time_ends_the_run_with_the_checkpoint_intact(tmp_path):
    p = pods_train(tmp_path, LATE_REPEAT, "selector.name=test_late_repeat", "checkpoint.every_steps=1")
    line = printed_once(p, "selector 'test_late_repeat' returned repeated indices in a row: Tensor (2, 4)")
    assert "[[0, 0, 0, 0], [0, 0, 0, 0]]" in line
    ckpts = tmp_path / "run" / "checkpoints"
    assert (ckpts / "latest").read_text().strip() == "step_0000002"  # step 3 was refused before its save
    saved = ["latest", "step_0000001", "step_0000002"]
    assert sorted(x.name for x in ckpts.iterdir()) == saved  # no partial save, no temporary copy left
