"""A run that would measure something other than its config says stops in one line (pods/guard.py), never
with exit 0 and a checkpoint that passes for training:

1. a non-finite reward, loss, gradient norm or weight stops the run at the step it appears; no checkpoint is
   written from non-finite weights, `latest` keeps naming a finite one, and a resume from it is clean;
2. steps that roll out nothing (a pre-rollout filter that skips every prompt) warn, save nothing, and
   max_empty_steps of them in a row (or a run that would end on them) stop the run;
3. a resume that changes how the lr schedule is computed (max_steps under cosine) is refused, or allowed by
   resume_allow_schedule_change=true and recorded in history.jsonl;
4. a dataset cache file that does not hold its settings' rows (cut short, edited) is generated again.
"""

from __future__ import annotations

import json
import logging
import shutil
import sys
from types import SimpleNamespace

import pytest
import torch
from omegaconf import OmegaConf
from safetensors.torch import load_file

from pods import checkpoint as ckpt
from pods.cli import one_line_errors
from pods.config import DatasetConfig
from pods.data import load_examples, tasks
from pods.distributed import Dist
from pods.errors import ConfigError, IntegrityError, NonFiniteError, PluginError
from pods.guard import RunGuard, nonfinite_param, sampling
from pods.prefilter import PREFILTERS
from pods.reward import REWARDS
from pods.timing import PhaseTimer
from pods.train import run
from pods.update.optim import check_schedule_kept
from tests.conftest import SMOKE

ONE_DIST = Dist(OmegaConf.create({"distributed": "none"}), torch.device("cpu"))


def one_line(e: pytest.ExceptionInfo) -> str:
    msg = str(e.value)
    assert "\n" not in msg and "Traceback" not in msg, msg
    return msg


def latest_weights(run_dir) -> dict[str, torch.Tensor]:
    path = ckpt.latest_checkpoint(run_dir / "checkpoints")
    return load_file(next((path / "model").glob("*.safetensors")))


# --- 1. non-finite values -----------------------------------------------------------------------------------


NAN_PLUGIN = """
from pods.reward import register_reward


@register_reward("nan_reward")
def nan_reward(completions, answers, **kw):  # finite on preflight's 3 synthetic completions, NaN in training
    return [float("nan") if len(completions) > 3 else 0.0] * len(completions)
"""


def test_a_reward_plugin_returning_nan_stops_the_run_at_that_step(make_cfg, tmp_path, monkeypatch):
    (tmp_path / "nan_reward_plugin.py").write_text(NAN_PLUGIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    d = tmp_path / "run"
    over = ["plugins=[nan_reward_plugin]", "+reward.weights.nan_reward=1.0", "eval.at_start=false"]
    try:
        with pytest.raises(NonFiniteError) as e:
            run(make_cfg(*SMOKE, *over, run_dir=d))
    finally:  # the plugin and what it registered go with the test
        sys.modules.pop("nan_reward_plugin", None)
        REWARDS.pop("nan_reward", None)
    msg = one_line(e)
    assert msg.startswith("non-finite reward at step 1: reward 'nan_reward' returned nan for completion 0"), (
        msg
    )
    assert (
        not (d / "checkpoints").exists() and not (d / "metrics.jsonl").exists()
    )  # nothing recorded as trained


def test_finite_reward_terms_whose_weighted_sum_overflows_stop_too():
    from pods.reward.registry import RewardOutput, RewardStage

    def reward(texts, answers, prompts=None, rows=None):  # each term finite; the weighted sum is not
        return RewardOutput(total=[1e39] * len(texts), terms={}, correct=[False] * len(texts))

    reward.weights = {"huge": 1e30}
    stage = RewardStage(reward, ["p"], ["1"], None, ONE_DIST, PhaseTimer())
    batch = SimpleNamespace(texts=["a", "b"], prompt_ids=[0], group_size=2, num_groups=1)
    with pytest.raises(NonFiniteError, match=r"^non-finite reward: 2 weighted reward sums overflow float32"):
        stage.score(batch)


@pytest.fixture(scope="module")
def blown_up(tmp_path_factory):
    """optim.lr=1e30 after one step of warm-up at lr 0: step 1 saves finite weights, step 2's optimizer step
    makes them non-finite (1e30 per element: each is finite, their norm is not, and the next forward is NaN)."""
    from tests.conftest import compose_cfg

    d = tmp_path_factory.mktemp("lr") / "run"
    over = [*SMOKE, "optim.lr=1e30", "optim.warmup_steps=1", "checkpoint.every_steps=1"]
    with pytest.raises(NonFiniteError) as e:
        run(compose_cfg(over, d))
    return d, over, one_line(e)


def test_lr_1e30_stops_at_the_step_whose_weights_are_not_finite(blown_up):
    d, _, msg = blown_up
    assert msg.startswith("non-finite weights at step 2: the norm of "), msg
    assert "optim.lr=1e+30" in msg and "no checkpoint is written from it" in msg
    assert [p.name for p in ckpt.checkpoints(d / "checkpoints")] == ["step_0000001"]
    weights = latest_weights(d)
    assert weights and all(torch.isfinite(w).all() for w in weights.values())


def test_a_resume_of_the_blown_up_run_is_clean_and_one_line(blown_up, make_cfg):
    d, over, _ = blown_up
    with pytest.raises(NonFiniteError) as e:
        run(make_cfg(*over, "resume=true", run_dir=d))  # from step 1, finite: step 2 blows up again
    assert one_line(e).startswith("non-finite weights at step 2: ")
    assert ckpt.latest_checkpoint(d / "checkpoints").name == "step_0000001"


def test_lr_1e30_from_the_first_step_leaves_no_checkpoint_and_a_resume_is_refused(make_cfg, tmp_path):
    d = tmp_path / "run"
    over = [*SMOKE, "optim.lr=1e30", "checkpoint.every_steps=1"]
    with pytest.raises(NonFiniteError, match="^non-finite weights at step 1: "):
        run(make_cfg(*over, run_dir=d))
    assert not ckpt.checkpoints(d / "checkpoints")
    with pytest.raises(ConfigError, match="there is no checkpoint") as e:
        run(make_cfg(*over, "resume=true", run_dir=d))  # the eval at step 0 is on record: not started over
    one_line(e)


def test_a_checkpoint_with_non_finite_weights_is_refused_on_resume(blown_up, make_cfg, tmp_path):
    from safetensors.torch import save_file

    d = tmp_path / "run"
    shutil.copytree(blown_up[0], d)
    path = ckpt.latest_checkpoint(d / "checkpoints")
    weights_file = next((path / "model").glob("*.safetensors"))
    weights = load_file(weights_file)
    weights["model.norm.weight"][0] = float("nan")  # as a pods that did not check could have saved it
    save_file(weights, weights_file, metadata={"format": "pt"})
    meta = json.loads((path / "meta.json").read_text())
    del meta["files"]  # an older pods's checkpoint: no checksums
    (path / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(NonFiniteError) as e:
        run(make_cfg(*blown_up[1], "resume=true", run_dir=d))
    assert one_line(e) == (
        f"non-finite weights: checkpoint {path} holds them (model.norm.weight); resume from an older checkpoint "
        "(move this one aside) or start the run over"
    )


def test_a_non_finite_reward_in_eval_names_the_step_and_stops_every_rank():
    guard = RunGuard(torch.nn.Linear(2, 2), ONE_DIST, OmegaConf.create({"lr": 1e-5, "grad_clip": 0.1}), 3)
    with pytest.raises(NonFiniteError) as e, guard.at(4, "eval"):
        raise NonFiniteError("reward", "reward 'r' returned nan for completion 0 of 2 (1 non-finite)")
    assert str(e.value) == (
        "non-finite reward at step 4: reward 'r' returned nan for completion 0 of 2 (1 non-finite) (eval); the "
        "run stops here"
    )
    from pods.reward.registry import RewardOutput, grade

    def fine(texts, answers, prompts=None, rows=None):
        return RewardOutput(total=[1.0] * len(texts), terms={}, correct=[True] * len(texts))

    another_rank = SimpleNamespace(sum=lambda x: x + 1.0)  # this rank's rewards are finite, another's are not
    data = SimpleNamespace(prompts=["p"], answers=["1"], fields=None)
    with pytest.raises(PluginError, match="^reward: a reward function failed on another rank"):
        grade(fine, ["a", "b"], [0], 2, data, another_rank)


def test_nan_token_probabilities_while_sampling_are_named_not_a_traceback():
    guard = RunGuard(torch.nn.Linear(2, 2), ONE_DIST, OmegaConf.create({"lr": 1e-5, "grad_clip": 0.1}), 3)
    with pytest.raises(NonFiniteError) as e, guard.at(3), sampling("rollouts"):
        torch.multinomial(torch.tensor([[float("nan"), 1.0]]), 1)  # what HF generate samples with
    assert str(e.value).startswith(
        "non-finite token probabilities at step 3: the policy's logits hold NaN or inf while sampling rollouts"
    )
    with pytest.raises(RuntimeError, match="another failure"), sampling("rollouts"):
        raise RuntimeError("another failure")  # any other error goes through as it is


def test_a_non_finite_gradient_norm_or_loss_stops_at_its_step():
    guard = RunGuard(torch.nn.Linear(2, 2), ONE_DIST, OmegaConf.create({"lr": 1e-5, "grad_clip": 0.1}), 3)
    with pytest.raises(NonFiniteError, match=r"^non-finite gradient norm at step 7: update/grad_norm=nan"):
        guard.after_update(7, {"update/loss": float("nan"), "update/grad_norm": float("nan")})
    with pytest.raises(NonFiniteError, match=r"^non-finite gradient norm at step 7: update/grad_norm=1.0"):
        guard.after_update(
            7, {"update/loss": 0.1, "update/grad_norm": 1.0, "update/nonfinite_grad_steps": 1.0}
        )
    with pytest.raises(NonFiniteError, match=r"^non-finite loss at step 8: update/loss=inf"):
        guard.after_update(8, {"update/loss": float("inf"), "update/grad_norm": 0.5})
    guard.after_update(9, {"update/loss": 0.1, "update/grad_norm": 0.5})  # finite: goes on
    guard.after_update(9, {"update/skipped": 1.0})  # no update this step: nothing to check but the weights


@pytest.mark.parametrize("value", [float("nan"), float("inf"), 1e30])
def test_a_weight_whose_norm_is_not_finite_is_found_and_named(value):
    model = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Linear(3, 3))
    assert nonfinite_param(model, ONE_DIST) is None
    with torch.no_grad():
        model[1].bias.fill_(value)  # 1e30: finite, but its norm (and the next forward) overflow float32
    model[0].weight.requires_grad_(False)  # frozen weights are not the optimizer's: not checked
    assert nonfinite_param(model, ONE_DIST) == "1.bias"


def test_the_command_line_prints_one_line_and_exits_2(capsys):
    with pytest.raises(SystemExit) as e, one_line_errors():
        raise NonFiniteError("weights", "the norm of w is not finite (optim.lr=1e+30)", 1)
    assert e.value.code == 2
    assert capsys.readouterr().err == "pods: error: non-finite weights at step 1: the norm of w is not finite " \
        "(optim.lr=1e+30)\n"  # fmt: skip


# --- 2. steps that roll out nothing -------------------------------------------------------------------------


class SkipAll:
    """A pre-rollout filter that keeps no prompt."""

    def __init__(self, seed: int = 0, **knobs):
        pass

    def keep(self, prompt_ids, epoch):
        return [False] * len(prompt_ids)

    def observe(self, prompt_ids, epoch, correct):
        pass

    def end_step(self, epoch):
        pass

    def metrics(self):
        return {}

    def state_dict(self):
        return {}

    def load_state_dict(self, state):
        pass


@pytest.mark.parametrize("max_steps", [5, 2])  # stopped by max_empty_steps=3; a run that would end on them
def test_a_prefilter_that_skips_every_prompt_stops_without_a_checkpoint(
    max_steps, make_cfg, tmp_path, monkeypatch, caplog
):
    monkeypatch.setitem(PREFILTERS, "skip_all", SkipAll)
    d = tmp_path / "run"
    cfg = make_cfg(*SMOKE, "prefilter.name=skip_all", f"max_steps={max_steps}", "checkpoint.every_steps=1",
                   "eval.at_start=false", run_dir=d)  # fmt: skip
    with caplog.at_level(logging.WARNING, logger="pods"), pytest.raises(IntegrityError) as e:
        run(cfg)
    steps = "steps 1-3" if max_steps == 5 else "steps 1-2"
    assert one_line(e).startswith(f"{steps} rolled out nothing ("), str(e.value)
    assert "max_empty_steps=3" in str(e.value)
    assert (
        "step 1 rolled out nothing (the pre-rollout filter kept no prompt): 1 of max_empty_steps=3"
        in caplog.text
    )
    assert not ckpt.checkpoints(d / "checkpoints")


def test_an_empty_step_between_trained_ones_is_only_a_warning(caplog):
    guard = RunGuard(torch.nn.Linear(2, 2), ONE_DIST, OmegaConf.create({"lr": 1e-5, "grad_clip": 0.1}), 2)
    with caplog.at_level(logging.WARNING, logger="pods"):
        guard.after_step(1, 0)
        assert not guard.may_save()  # a periodic checkpoint waits for a step that trained
        guard.after_step(2, 16)
        guard.after_step(3, 0)
    assert caplog.text.count("rolled out nothing") == 2
    guard.after_step(4, 16)
    guard.at_end(4)  # ends on a trained step: fine
    assert guard.may_save()
    guard.after_step(5, 0)
    with pytest.raises(
        IntegrityError, match=r"^steps 5-6 rolled out nothing \(2 in a row, max_empty_steps=2\)"
    ):
        guard.after_step(6, 0)


# --- 3. a resume that changes the lr schedule ---------------------------------------------------------------


def config(max_steps: int, schedule="cosine", warmup_ratio=0.0, allow=False) -> dict:
    return {"max_steps": max_steps, "algo": {"mu": 1}, "resume_allow_schedule_change": allow,
            "optim": {"schedule": schedule, "warmup_ratio": warmup_ratio, "warmup_steps": 0}}  # fmt: skip


def test_which_max_steps_changes_change_the_schedule():
    assert (
        check_schedule_kept(config(4, "constant"), config(8, "constant"), "step_4") == {}
    )  # lr does not depend
    with pytest.raises(ConfigError, match=r"warm-up 0 -> constant, warm-up 1"):
        check_schedule_kept(config(4, "constant", 0.1), config(10, "constant", 0.1), "step_4")
    assert check_schedule_kept(config(4), config(8, allow=True), "step_4") == {
        "lr_schedule": (
            "cosine over 4 optimizer steps, warm-up 0",
            "cosine over 8 optimizer steps, warm-up 0",
        )
    }
    old = config(4)
    del old["optim"]["warmup_steps"], old["algo"]  # a checkpoint of an older pods: the defaults
    assert check_schedule_kept(old, config(4), "step_4") == {}


def test_a_resume_with_more_steps_under_cosine_is_refused_or_recorded(make_cfg, tmp_path):
    d = tmp_path / "run"
    over = [*SMOKE, "optim.schedule=cosine", "max_steps=1", "eval.at_start=false", "eval.at_end=false"]
    run(make_cfg(*over, run_dir=d))
    with pytest.raises(ConfigError) as e:  # refused before the model loads
        run(make_cfg(*over, "max_steps=2", "resume=true", run_dir=d))
    msg = one_line(e)
    assert msg.startswith("resume=true: max_steps=2 (checkpoint step_0000001: 1) changes the learning-rate ")
    assert "(cosine over 1 optimizer steps, warm-up 0 -> cosine over 2 optimizer steps, warm-up 0)" in msg
    assert "resume_allow_schedule_change=true" in msg
    run(make_cfg(*over, "max_steps=2", "resume=true", "resume_allow_schedule_change=true", run_dir=d))
    events = [json.loads(x) for x in (d / "history.jsonl").read_text().splitlines()]
    resumed = events[-1]
    assert resumed["event"] == "resume" and resumed["changed"]["max_steps"] == [1, 2]
    assert resumed["changed"]["lr_schedule"] == [
        "cosine over 1 optimizer steps, warm-up 0",
        "cosine over 2 optimizer steps, warm-up 0",
    ]
    assert resumed["changed"]["resume_allow_schedule_change"] == [False, True]


# --- 4. the dataset cache -----------------------------------------------------------------------------------


@pytest.fixture
def cached_task(tmp_path, monkeypatch):
    """A reasoning-gym task of 64 train rows, generated and cached under PODS_CACHE_DIR."""
    monkeypatch.setenv("PODS_CACHE_DIR", str(tmp_path / "cache"))
    base = {"name": "t", "source": "reasoning_gym", "task": "chain_sum", "train_size": 64, "eval_size": 8}
    cfg = OmegaConf.merge(OmegaConf.structured(DatasetConfig), base)
    rows = load_examples(cfg, "train")[0]
    return cfg, rows, tasks.task_cache_path(cfg, "train")


def _cut(entry: dict, keep: int, consistent: bool) -> dict:
    data = entry["data"][:keep]
    if not consistent:  # the rows cut, the count and hash left: an edit or a partial copy
        return {**entry, "data": data}
    from pods.data.cache import _digest

    return {**entry, "data": data, "rows": keep, "sha256": _digest(entry["settings"], data)}


@pytest.mark.parametrize("damage", ["cut", "cut_consistently", "older_layout", "row_edited"])
def test_a_cache_file_that_does_not_hold_its_rows_is_generated_again(damage, cached_task, caplog):
    cfg, rows, path = cached_task
    entry = json.loads(path.read_text())
    if damage == "cut":
        bad = _cut(entry, 10, consistent=False)
    elif damage == "cut_consistently":
        bad = _cut(entry, 10, consistent=True)
    elif damage == "older_layout":  # a bare list of 10 rows, as an older pods wrote the file (cut short)
        bad = entry["data"][:10]
    else:
        bad = json.loads(json.dumps(entry))
        bad["data"][3][1]["answer"] = "12345"
    path.write_text(json.dumps(bad))
    with caplog.at_level(logging.WARNING, logger="pods"):
        again = load_examples(cfg, "train")[0]
    assert again == rows and len(again) == 64
    warned = [r.getMessage() for r in caplog.records if "task cache" in r.getMessage()]
    assert len(warned) == 1 and warned[0].endswith("; generating the task again"), warned
    assert json.loads(path.read_text()) == entry  # written whole again
