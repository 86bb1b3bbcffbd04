"""Shared fixtures: compose configs the way `python -m pods.train` does, without starting a run."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

from pods.config import register_schema

CONF = str(Path(__file__).resolve().parent.parent / "conf")
register_schema()


def compose_cfg(overrides: list[str] | None = None, run_dir: str | Path = "outputs/test-run"):
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=CONF, version_base="1.3"):
        return compose("train", overrides=[f"run_dir={run_dir}", *(overrides or [])])


def random_qwen2(vocab: int, hidden: int, heads: int, kv_heads: int, layers: int = 2, seed: int = 0, **kw):
    """A randomly initialised Qwen2 of a toy shape (intermediate = 2 x hidden), built right after seeding torch
    so that the weights, and the random draws after it, are the same in every test that asks for it."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    cfg = Qwen2Config(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        **kw,
    )
    return Qwen2ForCausalLM(cfg)


@pytest.fixture
def make_cfg(tmp_path):
    def make(*overrides: str, run_dir: Path | None = None):
        return compose_cfg(list(overrides), run_dir or tmp_path / "run")

    return make


# Train-record keys whose values two runs must share to count as the same run (resume, DDP vs FSDP):
# one per stage (reward, update, selection, pre-rollout filter, rollout, batch).
SAME_RUN_KEYS = (
    "reward/mean",
    "update/loss",
    "update/grad_norm",
    "update/rows",
    "selector/kept_reward_mean",
    "prefilter/p_easy",
    "rollout/tokens",
    "rollout/rollouts",
    "train/groups",
)

# A few-second run of the tiny model: the one shrink, conf/debug/smoke.yaml (3 steps, 2 prompts, small data),
# on the CPU; tests add down-sampling that keeps fewer rollouts than it draws (8 -> 4) and an lr large enough
# that 3 steps visibly move the weights.
SMOKE = ["debug=smoke", "hardware=cpu", "selector.n=8", "selector.m=4", "optim.lr=1e-3"]


# PODS_TEST_ORDER_SEED=<int>: run the tests in a random order (scripts/ci_stress.sh --random-order), to show that
# none depends on another having run first. Modules are shuffled, then the tests inside each, so a module's
# fixtures are still built once; the same seed gives the same order.
ORDER_SEED = "PODS_TEST_ORDER_SEED"


def pytest_report_header(config):
    seed = os.environ.get(ORDER_SEED)
    return f"test order: shuffled with {ORDER_SEED}={seed}" if seed else None


def pytest_collection_modifyitems(config, items):
    seed = os.environ.get(ORDER_SEED)
    if not seed:
        return
    rng = random.Random(int(seed))
    modules: dict[str, list] = {}
    for item in items:
        modules.setdefault(str(item.path), []).append(item)
    groups = list(modules.values())
    rng.shuffle(groups)
    for group in groups:
        rng.shuffle(group)
    items[:] = [item for group in groups for item in group]
