"""Run identity (pods/identity.py): which keys define an experiment, the name that says it, and a multirun
over any key whose every job runs in its own directory."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf

from pods import identity as ident
from pods.compare import main as compare
from pods.config import ConfigError
from pods.train import check_run_dir
from tests.conftest import compose_cfg, run_name_of

ROOT = Path(__file__).resolve().parents[1]


# --- the rule, on plain dicts ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "key,defines",
    [
        ("optim.lr", True),
        ("loss.name", True),
        ("selector.my_plugin.k", True),  # a plugin's knob
        ("dataset.eval_size", True),
        ("eval.num_samples", True),
        ("max_steps", False),  # FREE_KEYS: how long, how often, where it logs, how work is cut
        ("eval.every_steps", False),
        ("checkpoint.every_steps", False),
        ("logger.project", False),
        ("update.micro_batch_size", False),
        ("run_dir", False),
        ("seed", False),  # one seed of the experiment
        ("name", False),  # labels
        ("experiment", False),
        ("hydra.run.dir", False),
    ],
)
def test_which_keys_define_a_run(key, defines):
    assert ident.defines(key) is defines


def test_a_field_an_older_config_lacks_is_no_difference_but_a_dict_entry_is():
    fields = frozenset({"optim.lr", "reward.name"})
    new = {"optim.lr": 1e-5, "reward.name": "accuracy", "reward.weights.format": 0.1}
    old = {"reward.name": "accuracy"}  # older: no optim.lr (a field added since), no weights.format
    assert ident.changed(old, new, fields) == {"reward.weights.format": (ident.ABSENT, 0.1)}
    assert ident.changed(old, new, fields, shared_only=True) == {}  # a config.yaml beside a composed config
    assert ident.changed({"k": True}, {"k": 1}, fields) == {"k": (True, 1)}  # True is not 1


def test_the_digest_is_short_stable_and_empty_for_nothing():
    assert ident.digest({}) == ""
    d = ident.digest({"optim.lr": 1e-5, "selector.k": 2})
    assert len(d) == 8 and d == ident.digest({"selector.k": 2.0, "optim.lr": 1e-5})  # order, 2.0 == 2
    assert d != ident.digest({"optim.lr": 2e-5, "selector.k": 2})


def test_the_name_says_the_variant_the_stages_and_a_digest_of_the_rest():
    defaults = {"selector.name": "max_variance", "selector.n": 64, "selector.m": 16, "prefilter.name": "none",
                "dynamic_sampling.enabled": False, "loss.name": "token", "optim.lr": 5e-6}  # fmt: skip
    assert ident.identity(defaults, defaults, 0).name == "max_variance-n64-m16-s0"
    run = {**defaults, "selector.name": "random", "loss.name": "sequence", "optim.lr": 1e-5}
    i = ident.identity(run, defaults, 3)
    assert i.variant == "random-n64-m16" and i.stages == ("loss.sequence",)
    assert i.digest == ident.digest({"optim.lr": 1e-5})  # the variant's and the stages' keys are said already
    assert i.name == f"random-n64-m16-loss.sequence-{i.digest}-s3"


# --- names of composed configs -----------------------------------------------------------------------------


def test_a_default_run_keeps_its_name():
    assert run_name_of() == "max_variance-n64-m16-s0"
    assert run_name_of("selector=random", "seed=2") == "random-n64-m16-s2"
    assert run_name_of("arm=none-n16-m16") == "none-n16-m16-s0"
    # what a resume may change is not in the name
    free = ("max_steps=5", "eval.every_steps=3", "checkpoint.every_steps=7", "logger=wandb", "resume=true")
    assert run_name_of(*free) == "max_variance-n64-m16-s0"


def test_every_key_outside_the_free_ones_renames_the_run():
    smoke = run_name_of("debug=smoke")
    assert (
        smoke.startswith("max_variance-n4-m2-") and smoke.endswith("-s0") and smoke != "max_variance-n4-m2-s0"
    )
    names = {
        smoke,
        run_name_of("debug=smoke", "loss=sequence"),
        run_name_of("debug=smoke", "advantage=rloo"),
        run_name_of("debug=smoke", "optim.lr=1e-4"),
        run_name_of("debug=smoke", "sampling.temperature=0.7"),
        run_name_of("debug=smoke", "+selector.max_variance.my_knob=1"),  # a plugin's knob
        run_name_of("debug=smoke", "+selector.max_variance.my_knob=2"),
    }
    assert len(names) == 7
    assert run_name_of("debug=smoke", "loss=sequence") == smoke.replace("-m2-", "-m2-loss.sequence-")


def test_a_key_an_older_config_lacks_at_its_default_keeps_the_name():
    """A field added to the schema since a run started: its config lacks it, its name stays."""
    cfg = compose_cfg(["debug=smoke", "optim.lr=1e-4"])
    flat = ident.resolved(cfg)
    older = {k: v for k, v in flat.items() if k not in ("rollout.name", "eval.temperature")}
    assert len(older) == len(flat) - 2
    assert ident.identity(older, ident.default_config(), 0).name == ident.of_config(cfg).name


def test_run_info_records_the_variant_the_digest_and_the_defining_config():
    cfg = compose_cfg(["debug=smoke", "loss=sequence", "seed=4"])
    who = ident.describe(cfg)
    assert who["variant"] == "max_variance-n4-m2" and who["seed"] == 4 and who["stages"] == ["loss.sequence"]
    assert who["name"] == f"max_variance-n4-m2-loss.sequence-{who['digest']}-s4"
    assert who["defining"]["loss.name"] == "sequence" and "max_steps" not in who["defining"]
    assert "seed" not in who["defining"]


# --- a directory holding another experiment --------------------------------------------------------------


def held(tmp_path: Path, info: dict | None = None, config: dict | None = None) -> Path:
    d = tmp_path / "held"
    d.mkdir(parents=True)
    (d / "metrics.jsonl").write_text('{"kind": "train", "step": 1}\n')
    if info is not None:
        (d / "run_info.json").write_text(json.dumps(info))
    if config is not None:
        (d / "config.yaml").write_text(yaml.safe_dump(config))
    return d


def refusal(run_dir: Path, *overrides: str) -> str:
    with pytest.raises(ConfigError) as e:
        check_run_dir(run_dir, False, ident.describe(compose_cfg(list(overrides), run_dir)))
    return str(e.value)


def test_a_dir_of_another_experiment_is_named_so_not_offered_a_resume(tmp_path):
    then = ident.describe(compose_cfg(["debug=smoke"]))
    d = held(tmp_path, {"name": then["name"], "seed": 0, "defining": then["defining"]})
    msg = refusal(d, "debug=smoke", "loss=sequence")
    assert "already holds a different experiment (its run_info.json differs in 1 key(s): loss.name=sequence " \
        "(that run: token)); resume=true would continue that run under this config" in msg  # fmt: skip
    assert "pass resume=true" not in msg
    assert "holds seed 0 of this experiment, not seed 1" in refusal(d, "debug=smoke", "seed=1")
    same = refusal(d, "debug=smoke", "max_steps=9")  # a free key: the same experiment
    assert (
        "already holds a run of this experiment and seed" in same
        and "pass resume=true to continue it" in same
    )


def test_an_older_run_is_told_by_its_config_yaml(tmp_path):
    cfg = OmegaConf.to_container(compose_cfg(["debug=smoke"]), resolve=True)  # as config.yaml holds it
    d = held(tmp_path, {"name": "max_variance-n4-m2-s0", "seed": 0}, cfg)
    assert "its config.yaml differs in 1 key(s): optim.lr=0.0001 (that run: 6e-05)" in refusal(
        d, "debug=smoke", "optim.lr=1e-4"
    )
    assert "records no config" in refusal(held(tmp_path / "bare"), "debug=smoke")


# --- a real multirun --------------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_multirun_over_the_loss_runs_every_job_in_its_own_dir(tmp_path):
    """`python -m pods.train -m debug=smoke loss=token,sequence`: job 1 stopped on job 0's directory (both were
    max_variance-n4-m2-s0), the rest never started; and pods.compare read them as two seeds of one variant."""
    sweep = tmp_path / "sweep"
    shrink = ["max_steps=1", "eval.at_start=false", "dataset.eval_size=4", "hardware.num_threads=1"]
    cmd = ["-m", "debug=smoke", "hardware=cpu", "loss=token,sequence", *shrink, f"hydra.sweep.dir={sweep}"]
    proc = subprocess.run(
        [sys.executable, "-m", "pods.train", *cmd], cwd=ROOT, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    common = ["debug=smoke", "hardware=cpu", *shrink]
    names = [run_name_of(*common, f"loss={loss}") for loss in ("token", "sequence")]
    assert sorted(p.parent.name for p in sweep.glob("*/metrics.jsonl")) == sorted(names)
    assert names[1] == names[0].replace("-m2-", "-m2-loss.sequence-")
    for name in names:
        info = json.loads((sweep / name / "run_info.json").read_text())
        assert info["name"] == name and info["variant"] == "max_variance-n4-m2"
        assert info["defining"]["loss.name"] in ("token", "sequence") and info["digest"] in name
    out = tmp_path / "cmp"
    base = "max_variance-n4-m2 [loss.name=token]"
    assert compare([str(sweep), "--baseline", base, "--n-boot", "0", "--out", str(out)]) == 0
    summary = (out / "summary.md").read_text()
    assert f"| {base} | 1 |" in summary and "| max_variance-n4-m2 [loss.name=sequence] | 1 |" in summary
