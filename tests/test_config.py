"""Every option of every config group composes, and bad values fail before any model loads."""

from pathlib import Path

import pytest
from omegaconf import OmegaConf
from omegaconf.errors import ConfigKeyError, ValidationError

from pods.config import ConfigError, validate
from pods.train import preflight

CONF = Path(__file__).resolve().parent.parent / "conf"
GROUPS = ["model", "dataset", "reward", "selector", "hardware", "rollout", "logger", "variant"]


def options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


@pytest.mark.parametrize("group,option", [(g, o) for g in GROUPS for o in options(g)])
def test_every_option_composes_and_validates(make_cfg, group, option):
    prefix = "+" if group == "variant" else ""
    cfg = make_cfg(f"{prefix}{group}={option}")
    validate(cfg)  # hub models compose without loading anything
    OmegaConf.to_container(cfg, resolve=True)


@pytest.mark.parametrize("experiment", options("experiment"))
@pytest.mark.parametrize("scale", [None, "cpu"])
def test_every_experiment_composes(make_cfg, experiment, scale):
    over = [f"+experiment={experiment}"] + ([f"+scale={scale}"] if scale else [])
    cfg = make_cfg(*over)
    validate(cfg)
    assert cfg.experiment
    if scale == "cpu":
        assert cfg.model.name == "tiny" and cfg.hardware.device == "cpu"


def test_default_is_the_embedded_cpu_run(make_cfg):
    cfg = make_cfg()
    assert cfg.model.name == "tiny" and cfg.selector.name == "max_variance"
    assert Path(cfg.model.path, "config.json").exists()


def test_selector_n_m_sweepable(make_cfg):
    cfg = make_cfg("selector=max_variance", "selector.n=128", "selector.m=8")
    validate(cfg)
    assert (cfg.selector.n, cfg.selector.m) == (128, 8)


@pytest.mark.parametrize(
    "override,match",
    [
        (["selector.m=80"], "selector.m=80 must be between 1 and selector.n=64"),
        (["selector=none", "selector.n=1", "selector.m=1"], "selector.n=1 must be >= 2"),
        (["selector.m=1"], "selector.m=1 must be >= 2 with selector.downsample=max_variance"),
        (["selector=none", "selector.m=8"], "needs a down-sampler"),
        (["selector.downsample=maxvar"], "allowed values: max_reward, max_variance, none, random"),
        (
            ["selector.prefilter=gresoo"],
            "selector.prefilter='gresoo' is not valid; allowed values: greso, none",
        ),
        (["optim.lr=-1e-5"], "optim.lr=-1e-05 must be > 0"),
        (["optim.schedule=linear"], "optim.schedule='linear' is not valid; allowed values: constant, cosine"),
        (["algo.loss_agg=mean"], "algo.loss_agg"),
        (["rollout.temperature=0"], "rollout.temperature=0"),
        (["hardware.device=tpu"], "hardware.device='tpu' is not valid; allowed values: auto, cpu, cuda"),
        (["dataset.template=no placeholder"], "must contain '{question}'"),
        (["hardware.distributed=fsdp", "hardware=gpu_lora"], "fsdp does not support hardware.lora yet"),
        (["hardware.distributed=fsdp", "rollout=vllm"], "fsdp does not support rollout.backend=vllm yet"),
        (
            ["hardware.distributed=mpi"],
            "hardware.distributed='mpi' is not valid; allowed values: none, ddp, fsdp",
        ),
        (["hardware.num_threads=-1"], "hardware.num_threads=-1: must be >= 0"),
    ],
)
def test_bad_values_name_the_key(make_cfg, override, match):
    with pytest.raises(ConfigError, match=match.replace("(", r"\(").replace(")", r"\)").replace("+", r"\+")):
        validate(make_cfg(*override))


def test_unknown_key_and_wrong_type_fail_at_compose(make_cfg):
    with pytest.raises(Exception, match="lrr"):
        make_cfg("optim.lrr=1e-3")
    with pytest.raises(Exception, match="max_steps"):
        make_cfg("max_steps=many")


def test_unknown_group_option_lists_choices(make_cfg):
    with pytest.raises(Exception, match="max_variance") as e:
        make_cfg("selector=maxvar")
    assert "Available options" in str(e.value)


def test_gpu_profile_without_gpu_fails_in_preflight(make_cfg):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    with pytest.raises(ConfigError, match="hardware=gpu needs a CUDA GPU"):
        preflight(make_cfg("hardware=gpu"))


def test_missing_local_model_dir(make_cfg, tmp_path):
    with pytest.raises(ConfigError, match="model.path="):
        preflight(make_cfg(f"model.path={tmp_path}/nope/"))


def test_run_dir_with_checkpoints_needs_resume(make_cfg, tmp_path):
    (tmp_path / "run" / "checkpoints" / "step_0000001").mkdir(parents=True)
    with pytest.raises(ConfigError, match="resume=true"):
        preflight(make_cfg())


def test_schema_rejects_types(make_cfg):
    with pytest.raises((ValidationError, ConfigKeyError, Exception), match="selector.n|n"):
        make_cfg("selector.n=abc")


def test_hub_model_offline_and_uncached_fails_fast(make_cfg, monkeypatch, tmp_path):
    from pods.hub import OfflineError, hub_reachable

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # an empty cache
    hub_reachable.cache_clear()
    with pytest.raises(OfflineError, match=r"Qwen/Qwen2.5-3B-Instruct' \(model.path\).*unreachable"):
        preflight(make_cfg("model=qwen2.5-3b", "hardware=cpu"))
    hub_reachable.cache_clear()


def test_cli_exits_nonzero_with_the_key_in_the_message(tmp_path):
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-m", "pods.train", "selector.m=80", f"hydra.run.dir={tmp_path}/r"],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parent.parent,
        timeout=120,
    )
    assert proc.returncode == 2
    assert "selector.m=80 must be between 1 and selector.n=64" in proc.stderr
    assert not (tmp_path / "r" / "metrics.jsonl").exists()  # failed before anything ran
