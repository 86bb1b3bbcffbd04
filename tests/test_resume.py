"""The checkpoint layout: one state per component, each rank's random streams once, the earlier layout and
retired component keys read by conversion (the same next steps, bitwise), any other refused in one line."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from pods import checkpoint as ckpt
from pods.errors import ConfigError
from pods.resume import FORMAT, read_state
from pods.tracking import read_metrics
from pods.train import run
from tests.conftest import SAME_RUN_KEYS, SMOKE

COMMON = [
    *SMOKE,
    "prefilter=greso",
    "dynamic_sampling.enabled=true",
    "selector=max_variance",
    "selector.n=8",
    "selector.m=4",
    "eval.at_end=false",
]
COMPONENTS = {
    "scheduler",
    "sampler",
    "prefilter",
    "dynamic_sampling",
    "timer",
    "eval_every",
    "ckpt_every",
    "trainer",
}


@pytest.fixture(scope="module")
def two_steps(tmp_path_factory):
    from tests.conftest import compose_cfg

    d = tmp_path_factory.mktemp("two") / "run"
    run(compose_cfg([*COMMON, "max_steps=2"], d))
    return d


def _state_path(run_dir):
    return ckpt.latest_checkpoint(run_dir / "checkpoints") / "trainer_state.pt"


def test_the_checkpoint_is_a_dict_of_components_and_each_rank_streams_once(two_steps):
    st = torch.load(_state_path(two_steps), weights_only=False)
    assert set(st) == {"format", "step", "optimizer", "components", "per_rank"} and st["format"] == FORMAT
    assert set(st["components"]) == COMPONENTS
    assert st["components"]["trainer"]["counters"]["rollouts"] > 0
    assert set(st["components"]["dynamic_sampling"]) == {"zero_var_ratio"}
    assert [set(r) for r in st["per_rank"]] == [{"rng"}]  # one rank; the selection generator lives there only
    assert set(st["per_rank"][0]["rng"]) == {"global", "select"}


def to_v1(st: dict) -> dict:
    """trainer_state.pt as pods wrote it before components (nine top-level keys, streams saved twice)."""
    c, mine = st["components"], st["per_rank"][0]["rng"]
    return {
        "optimizer": st["optimizer"],
        "scheduler": c["scheduler"],
        "sampler": c["sampler"],
        "prefilter": c["prefilter"],
        "select_gen": mine["select"],
        "counters": c["trainer"]["counters"],
        "train_clock": c["timer"]["train_clock"],
        "next_eval": c["eval_every"]["next_time"],
        "next_ckpt": c["ckpt_every"]["next_time"],
        "zero_var_ratio": c["dynamic_sampling"]["zero_var_ratio"],
        "per_rank": [{"rng": r["rng"]["global"], "select_gen": r["rng"]["select"]} for r in st["per_rank"]],
        "rng": mine["global"],
        "step": st["step"],
    }


def test_an_old_layout_checkpoint_resumes_to_the_same_steps_and_weights(make_cfg, two_steps, tmp_path):
    new, old = tmp_path / "new", tmp_path / "old"
    shutil.copytree(two_steps, new)
    shutil.copytree(two_steps, old)
    path = _state_path(old)
    torch.save(to_v1(torch.load(path, weights_only=False)), path)
    meta = json.loads((path.parent / "meta.json").read_text())
    del meta["files"]  # pods of the earlier layout wrote no checksums
    (path.parent / "meta.json").write_text(json.dumps(meta))
    for d in (new, old):
        run(make_cfg(*COMMON, "max_steps=4", "resume=true", run_dir=d))
    a, b = (read_metrics(d / "metrics.jsonl") for d in (new, old))
    assert [r["step"] for r in b if r["kind"] == "train"] == [1, 2, 3, 4]
    for x, y in zip(a, b):
        assert all(x.get(k) == y.get(k) for k in SAME_RUN_KEYS), x["step"]
    wa, wb = (ckpt.read_weights(ckpt.latest_checkpoint(d / "checkpoints")) for d in (new, old))
    assert all(torch.equal(wa[k], wb[k]) for k in wa)


def test_a_checkpoint_holding_dynamic_sampling_as_collector_resumes_bitwise(make_cfg, two_steps, tmp_path):
    """Checkpoints written before one word per stage (issue 54) hold dynamic sampling's state under
    `collector`: it restores as `dynamic_sampling` (pods.spelling.current_components), to the same steps."""
    new, old = tmp_path / "new", tmp_path / "old"
    shutil.copytree(two_steps, new)
    shutil.copytree(two_steps, old)
    path = _state_path(old)
    st = torch.load(path, weights_only=False)
    st["components"] = {
        ("collector" if k == "dynamic_sampling" else k): v for k, v in st["components"].items()
    }
    torch.save(st, path)
    meta = json.loads((path.parent / "meta.json").read_text())
    meta["files"]["trainer_state.pt"] = ckpt._digest(path)  # as the pods that wrote it checksummed it
    (path.parent / "meta.json").write_text(json.dumps(meta))
    for d in (new, old):
        run(make_cfg(*COMMON, "max_steps=3", "resume=true", run_dir=d))
    a, b = (read_metrics(d / "metrics.jsonl") for d in (new, old))
    assert [r["step"] for r in b if r["kind"] == "train"] == [1, 2, 3] and len(a) == len(b)
    for x, y in zip(a, b):
        assert all(x.get(k) == y.get(k) for k in SAME_RUN_KEYS), x["step"]
    sa, sb = (torch.load(_state_path(d), weights_only=False)["components"] for d in (new, old))
    assert sa["dynamic_sampling"] == sb["dynamic_sampling"] and "collector" not in sb
    wa, wb = (ckpt.read_weights(ckpt.latest_checkpoint(d / "checkpoints")) for d in (new, old))
    assert all(torch.equal(wa[k], wb[k]) for k in wa)


def test_a_run_saved_with_rollout_backend_resumes(make_cfg, two_steps, tmp_path):
    """A checkpoint (and config.yaml) written before rollout.backend became rollout.name, and before advantage
    and loss had names: the resume reads the old keys as the new ones (pods.spelling.current_config) instead of
    refusing a changed experiment."""
    d = tmp_path / "run"
    shutil.copytree(two_steps, d)
    meta_path = ckpt.latest_checkpoint(d / "checkpoints") / "meta.json"
    meta = json.loads(meta_path.read_text())
    rollout = meta["config"]["rollout"]
    meta["config"]["rollout"] = {"backend": rollout.pop("name"), **rollout}
    # and before advantages and losses had names: advantage.{stats, scale_by_std}, algo.loss_agg
    meta["config"]["advantage"] = meta["config"]["advantage"].pop("grpo")
    meta["config"]["algo"]["loss_agg"] = meta["config"].pop("loss")["name"]
    meta_path.write_text(json.dumps(meta))
    assert "backend" in json.loads(meta_path.read_text())["config"]["rollout"]
    run(make_cfg(*COMMON, "max_steps=3", "resume=true", run_dir=d))
    assert [r["step"] for r in read_metrics(d / "metrics.jsonl") if r["kind"] == "train"] == [1, 2, 3]


def test_a_checkpoint_of_an_unknown_layout_is_refused_in_one_line(two_steps, tmp_path):
    d = tmp_path / "run"
    shutil.copytree(two_steps, d)
    path = _state_path(d)
    torch.save({**torch.load(path, weights_only=False), "format": 99}, path)
    with pytest.raises(ConfigError, match="format 99, this pods reads 2") as e:
        read_state(path.parent)
    assert "\n" not in str(e.value)
