"""Every option of every config group composes, and bad values fail before any model loads."""

import copy
import math
from pathlib import Path

import pytest
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf
from omegaconf.errors import ValidationError

from pods.components import checked
from pods.config import ConfigError
from pods.train import preflight

CONF = Path(__file__).resolve().parent.parent / "conf"
GROUPS = ["model", "dataset", "reward", "prefilter", "selector", "hardware", "rollout", "logger", "arm"]


def options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


@pytest.mark.parametrize("group,option", [(g, o) for g in GROUPS for o in options(g)])
def test_every_option_composes_and_validates(make_cfg, group, option):
    cfg = make_cfg(f"{group}={option}")
    checked(cfg)  # hub models compose without loading anything
    OmegaConf.to_container(cfg, resolve=True)


@pytest.mark.parametrize("experiment", options("experiment"))
@pytest.mark.parametrize("scale", [None, "cpu"])
def test_every_experiment_composes(make_cfg, experiment, scale):
    over = [f"experiment={experiment}"] + ([f"scale={scale}"] if scale else [])
    cfg = make_cfg(*over)
    checked(cfg)
    assert cfg.experiment
    if scale == "cpu":
        assert cfg.model.name == "tiny" and cfg.hardware.device == "cpu"


def test_default_is_the_embedded_cpu_run(make_cfg):
    cfg = make_cfg()
    assert cfg.model.name == "tiny" and cfg.selector.name == "max_variance"
    assert Path(cfg.model.path, "config.json").exists()


def test_selector_n_m_sweepable(make_cfg):
    cfg = make_cfg("selector=max_variance", "selector.n=128", "selector.m=8")
    checked(cfg)
    assert (cfg.selector.n, cfg.selector.m) == (128, 8)


@pytest.mark.parametrize(
    "override,match",
    [
        (["selector.m=80"], "selector.m=80 must be between 1 and selector.n=64"),
        (["selector=none", "selector.n=1", "selector.m=1"], "selector.n=1 must be >= 2"),
        (["selector.m=1"], "selector.m=1 must be >= 2 with selector.name=max_variance"),
        (["selector=none", "selector.m=8"], "needs a down-sampler"),
        (["selector.name=maxvar"], "allowed values: max_reward, max_variance, none, random"),
        (
            ["prefilter.name=gresoo"],
            "prefilter.name='gresoo' is not valid; allowed values: greso, none",
        ),
        (["optim.lr=-1e-5"], "optim.lr=-1e-05 must be > 0"),
        (["optim.schedule=linear"], "optim.schedule='linear' is not valid; allowed values: constant, cosine"),
        (["algo.loss_agg=mean"], "algo.loss_agg"),
        (["sampling.temperature=0"], "sampling.temperature=0"),
        (["hardware.device=tpu"], "hardware.device='tpu' is not valid; allowed values: auto, cpu, cuda"),
        (["dataset.template=no placeholder"], "must contain '{question}'"),
        (["hardware.distributed=fsdp", "hardware=gpu_lora"], "fsdp does not support hardware.lora yet"),
        (
            ["hardware.distributed=mpi"],
            "hardware.distributed='mpi' is not valid; allowed values: none, ddp, fsdp",
        ),
        (["hardware.num_threads=-1"], "hardware.num_threads=-1: must be >= 0"),
        (
            ["rollout.hf.compile=maybe"],
            "rollout.hf.compile='maybe' is not valid; allowed values: auto, true, false",
        ),
        (["rollout.hf.prompt_bucket=0"], "rollout.hf.prompt_bucket=0 must be >= 1"),
        (["update.micro_batch_tokens=-1"], "update.micro_batch_tokens=-1 must be >= 0"),
        (["update.fsdp_prefetch=-1"], "update.fsdp_prefetch=-1 must be >= 0"),
        (
            ["update.row_bucket=-8"],
            "update.row_bucket=-8 must be >= 0 (0 = off, null = the device decides)",
        ),
        (
            ["hardware=cpu", "hardware.expandable_segments=true"],
            "hardware.expandable_segments=true sets the CUDA allocator",
        ),
        (
            ["rollout.hf.compile=true", "hardware=gpu_lora", "hardware.load_in_4bit=true"],
            "rollout.hf.compile=true needs a bf16 copy of the weights",
        ),
    ],
)
def test_bad_values_name_the_key(make_cfg, override, match):
    with pytest.raises(ConfigError, match=match.replace("(", r"\(").replace(")", r"\)").replace("+", r"\+")):
        checked(make_cfg(*override))


@pytest.mark.parametrize(
    "override,match",
    [
        # issue 13: accepted silently before
        (["reward.weights.accuracy=0", "reward.weights.format=0"], "sum to 0"),
        (
            ["reward.weights.accuracy=1", "reward.weights.format=-1"],
            "reward.weights.format=-1.0 must be >= 0",
        ),
        (["reward.weights.accuracy=-1"], "reward.weights.accuracy=-1.0 must be >= 0"),
        (
            ["+reward.weights.lenght=1"],
            "reward.weights.lenght is not valid; allowed values: accuracy, ",  # then format and any registered by other tests
        ),
        (["reward.timeout_s=0"], "reward.timeout_s=0.0 must be > 0"),
        (
            ["dynamic_sampling.enabled=true", "dynamic_sampling.max_rounds=0"],
            "dynamic_sampling.max_rounds=0 must be >= 1",
        ),
        (["prefilter.greso.min_keep=2"], "prefilter.greso.min_keep=2.0 must be in [0, 1)"),
        (["prefilter.greso.p_step=-0.5"], "prefilter.greso.p_step=-0.5 must be in [0, 1]"),
        (["prefilter.greso.target_zero_var=1.5"], "prefilter.greso.target_zero_var=1.5 must be in [0, 1]"),
        (["prefilter.greso.easy_share=-0.1"], "prefilter.greso.easy_share=-0.1 must be in [0, 1]"),
        (["dynamic_sampling.oversample=0.5"], "dynamic_sampling.oversample=0.5 must be >= 1"),
        (["prefilter.greso.p_min=0.9", "prefilter.greso.p_init=0.5"], "p_min <= p_init <= p_max"),
        (["advantage.stats=all"], "advantage.grpo.stats='all' is not valid; allowed values: kept, full"),
        (["loss=dapo", "loss.dapo.clip_low=1.5"], "loss.dapo.clip_low=1.5 must be in (0, 1)"),
        (["loss=dr_grpo", "loss.dr_grpo.norm_len=-1"], "loss.dr_grpo.norm_len=-1 must be >= 0"),
        (["loss=dapo", "algo.loss_agg=sequence"], "algo.loss_agg=sequence is the old spelling of loss.name"),
        (["model.recipe.lr=0"], "model.recipe.lr=0.0 must be > 0"),
        (["algo.epsilon_high=-1"], "algo.epsilon_high=-1.0 must be > 0"),
        (["algo.epsilon=1.5"], "algo.epsilon=1.5 must be in (0, 1)"),
        (["algo.mu=0"], "algo.mu=0 must be >= 1"),
        (["eval.every_seconds=-5"], "eval.every_seconds=-5.0 must be >= 0"),
        (["eval.every_steps=-1"], "eval.every_steps=-1 must be >= 0"),
        (["checkpoint.every_steps=-1"], "checkpoint.every_steps=-1 must be >= 0"),
        (["checkpoint.every_seconds=-1"], "checkpoint.every_seconds=-1.0 must be >= 0"),
        (["checkpoint.keep_last=0"], "checkpoint.keep_last=0 must be >= 1"),
        # failing late or raw before
        (["sampling.top_k=-1"], "sampling.top_k=-1 must be >= 0"),
        (["dataset.train_size=0"], "dataset.train_size=0 must be >= 1"),
        (["dataset.eval_size=0"], "dataset.eval_size=0 must be >= 1"),
        # siblings
        (["sampling.top_p=0"], "sampling.top_p=0.0 must be in (0, 1]"),
        (["sampling.top_p=1.5"], "sampling.top_p=1.5 must be in (0, 1]"),
        (["rollout.batch_size=0"], "rollout.batch_size=0 must be auto or a whole number >= 1"),
        (["eval.temperature=-1"], "eval.temperature=-1.0 must be >= 0"),
        (["eval.num_samples=0"], "eval.num_samples=0 must be >= 1"),
        (["eval.batch_size=0"], "eval.batch_size=0 must be auto or a whole number >= 1"),
        (["optim.lr=nan"], "optim.lr=nan must be a finite number"),
        (["optim.lr=0"], "optim.lr=0.0 must be > 0"),
        (["optim.warmup_ratio=1"], "optim.warmup_ratio=1.0 must be in [0, 1)"),
        (["optim.warmup_steps=-1"], "optim.warmup_steps=-1 must be >= 0"),
        (
            ["optim.warmup_steps=10", "optim.warmup_ratio=0.1"],
            "optim.warmup_steps or optim.warmup_ratio, not both",
        ),
        (["optim.betas=[0.9,1.0]"], "optim.betas=[0.9, 1.0] must be two numbers in [0, 1)"),
        (["max_steps=0"], "max_steps=0 must be >= 1"),
        (["max_train_time=-1"], "max_train_time=-1.0 must be >= 0"),
        (["seed=-1"], "seed=-1 must be >= 0"),
        (["update.micro_batch_size=0"], "update.micro_batch_size=0 must be >= 1"),
        (
            ["rollout.vllm.gpu_memory_utilization=1.2"],
            "rollout.vllm.gpu_memory_utilization=1.2 must be in (0, 1]",
        ),
        (["hardware.lora=true", "model.lora.r=0"], "model.lora.r=0 must be >= 1"),
        (["hardware.lora=true", "model.lora.dropout=1"], "model.lora.dropout=1.0 must be in [0, 1)"),
        (["model.max_completion_len=0"], "model.max_completion_len=0 must be >= 1"),
        (["logger.log_completions=-1"], "logger.log_completions=-1 must be >= 0"),
    ],
)
def test_range_checks_name_key_and_range(make_cfg, override, match):
    with pytest.raises(ConfigError) as e:
        checked(make_cfg(*override))
    assert match in str(e.value)
    assert "\n" not in str(e.value)  # one line


@pytest.mark.parametrize(
    "override,match",
    [
        (["dataset.task_kwargs.min_terms=-5"], "dataset.task_kwargs="),
        (["+dataset.task_kwargs.no_such_option=1"], "no_such_option"),
        (["dataset.task=no_such_task"], "dataset.task='no_such_task' is not a reasoning-gym task"),
    ],
)
def test_task_kwargs_checked_in_preflight(make_cfg, override, match):
    with pytest.raises(ConfigError, match=match):
        preflight(make_cfg(*override))


def _numeric_leaves(node, prefix=""):
    for k, v in node.items():
        if isinstance(v, dict):
            yield from _numeric_leaves(v, f"{prefix}{k}.")
        elif (isinstance(v, (int, float)) and not isinstance(v, bool)) or k == "epsilon_high":
            yield f"{prefix}{k}", v


@pytest.mark.parametrize("rollout", ["hf", "vllm"])
def test_every_numeric_field_has_a_range_check(make_cfg, rollout):
    """A class test: any numeric field set to an absurd value fails validation with its own key named (each
    backend's knobs with that backend chosen: another's are refused as settings that would do nothing)."""
    from pods.config import as_container

    base = ["hardware.lora=true", "prefilter=greso", "dynamic_sampling.enabled=true", f"rollout={rollout}"]
    composed = make_cfg(*base)
    keys = dict(_numeric_leaves(as_container(checked(composed))))  # components' settings included
    keys = {k: v for k, v in keys.items() if not k.startswith(("reward.weights.", "dataset.task_kwargs."))}
    assert len(keys) > 40
    if rollout != "hf":  # the other groups' fields: checked once, with hf
        keys = {k: v for k, v in keys.items() if k.startswith(f"rollout.{rollout}.")}
        assert keys
    unchecked = []
    for key, v in keys.items():
        bad = (
            -1000
            if isinstance(v, int) and not isinstance(v, bool) and key != "algo.epsilon_high"
            else math.nan
        )
        for val in {bad, -1000.5} if bad is math.nan else {bad}:
            cfg = copy.deepcopy(composed)  # with this one value set (composing anew costs 0.25 s a value)
            OmegaConf.update(cfg, key, val)
            try:
                checked(cfg)
            except ConfigError as e:
                if key not in str(e):
                    unchecked.append((key, val, str(e)))
            else:
                unchecked.append((key, val, "accepted"))
    assert not unchecked, unchecked


def test_unknown_key_and_wrong_type_fail_at_compose(make_cfg):
    with pytest.raises(ConfigCompositionException, match="optim.lrr"):
        make_cfg("optim.lrr=1e-3")
    with pytest.raises(ConfigCompositionException, match="max_steps=many"):
        make_cfg("max_steps=many")


def test_unknown_group_option_lists_choices(make_cfg):
    with pytest.raises(Exception, match="max_variance") as e:
        make_cfg("selector=maxvar")
    assert "Available options" in str(e.value)


def test_run_dir_with_checkpoints_needs_resume(make_cfg, tmp_path):
    (tmp_path / "run" / "checkpoints" / "step_0000001").mkdir(parents=True)
    with pytest.raises(ConfigError, match="resume=true"):
        preflight(make_cfg())


def test_schema_rejects_types(make_cfg):
    with pytest.raises(ConfigCompositionException, match=r"selector\.n=abc") as e:
        make_cfg("selector.n=abc")
    assert isinstance(e.value.__cause__, ValidationError)  # the schema's type check, not some other failure


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


@pytest.mark.parametrize(
    "args,match",
    [
        (["sampling.top_k=-1"], "sampling.top_k=-1 must be >= 0"),
        (["reward.weights.accuracy=0", "reward.weights.format=0"], "sum to 0"),
        (["hydra.run.dir={file}/run"], "hydra.run.dir='{file}/run' is not writable"),
        (["optim.lrr=1"], "lrr"),  # Hydra's own compose error: exit 2 as well
    ],
)
def test_cli_config_errors_exit_2_before_the_model_loads(tmp_path, args, match):
    import subprocess
    import sys

    (tmp_path / "file").write_text("not a directory")
    args = [a.format(file=tmp_path / "file") for a in args]
    if not any(a.startswith("hydra.run.dir") for a in args):
        args.append(f"hydra.run.dir={tmp_path}/r")
    proc = subprocess.run(
        [sys.executable, "-m", "pods.train", *args],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parent.parent,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert match.format(file=tmp_path / "file") in proc.stderr
    assert "Traceback" not in proc.stderr and "Loading weights" not in proc.stderr
    assert not (tmp_path / "r" / "metrics.jsonl").exists()


def test_unwritable_run_dir_fails_in_preflight(make_cfg, tmp_path, monkeypatch):
    (tmp_path / "file").write_text("")
    with pytest.raises(ConfigError, match="run_dir=.* is not writable"):
        preflight(make_cfg(run_dir=tmp_path / "file" / "run"))
    # a read-only checkpoints/ (root ignores permission bits, so simulate the OS refusing the write)
    ckpts = tmp_path / "run" / "checkpoints"
    ckpts.mkdir(parents=True)
    import tempfile

    real = tempfile.NamedTemporaryFile

    def refuse(*a, dir=None, **k):
        if Path(dir) == ckpts:
            raise PermissionError(13, "Permission denied")
        return real(*a, dir=dir, **k)

    monkeypatch.setattr(tempfile, "NamedTemporaryFile", refuse)
    with pytest.raises(ConfigError, match=r"run_dir/checkpoints=.* is not writable \(Permission denied\)"):
        preflight(make_cfg("resume=true"))


def _restated(node, schema, prefix: str) -> list[str]:
    """Keys of an option file (nested groups too) whose value equals the schema's default."""
    same = []
    for k in node:
        if k not in schema or k in ("name", "backend", "source", "weights"):
            continue
        if OmegaConf.is_missing(schema, k) or OmegaConf.is_interpolation(schema, k):
            continue
        if OmegaConf.is_interpolation(node, k):  # an option's own link (selector none: m follows n)
            continue
        if OmegaConf.is_dict(node[k]) and OmegaConf.is_dict(schema[k]):
            same += _restated(node[k], schema[k], f"{prefix}{k}.")
        elif node[k] == schema[k]:
            same.append(prefix + k)
    return same


@pytest.mark.parametrize(
    "group", ["hardware", "rollout", "dataset", "reward", "logger", "prefilter", "selector", "model"]
)
def test_no_option_restates_a_schema_default(group):
    """Each default is stated once, beside its comment in pods/config.py; an option file sets what differs
    (and the keys that name the option: name, backend, source), nested groups (model.lora) included."""
    from pods.config import TrainConfig

    schema = OmegaConf.structured(TrainConfig)[group]
    for path in sorted((CONF / group).rglob("*.yaml")):
        same = _restated(OmegaConf.load(path), schema, f"{group}.")
        assert not same, f"{path.name} restates the defaults of {', '.join(same)}"


@pytest.mark.parametrize(
    "overrides,plain",
    [([], False), (["selector=none"], True), (["arm=none-n64-m64"], True),
     (["arm=greso+dynamic_sampling+none-n16-m16"], False), (["arm=dynamic_sampling+none-n16-m16"], False),
     (["selector=none", "prefilter=greso"], False)],
)  # fmt: skip
def test_a_saved_config_tells_compare_whether_it_is_plain_grpo(make_cfg, overrides, plain):
    from pods.analysis.load import is_plain_grpo

    assert is_plain_grpo(OmegaConf.to_container(make_cfg(*overrides), resolve=True)) is plain


@pytest.mark.parametrize(
    "group,match",
    [
        ("DynamicSamplingConfig(enabled=True, max_rounds=0)", "dynamic_sampling.max_rounds=0 must be >= 1"),
        ("SelectorConfig(name='none', n=16, m=20)", "selector.m=20 must be between 1 and selector.n=16"),
        (
            "GroupNormSettings(stats='all')",
            "advantage.grpo.stats='all' is not valid; allowed values: kept, full",
        ),
        ("RecipeConfig(temperature=0.0)", "model.recipe.temperature=0.0 must be > 0"),
        ("RewardConfig(name='r', weights={})", "reward.weights is empty"),
        ("GresoConfig(p_min=0.9, p_init=0.5)", "prefilter.greso needs p_min <= p_init <= p_max"),
        ("GresoConfig(min_keep=1.0)", "prefilter.greso.min_keep=1.0 must be in [0, 1)"),
        (
            "VLLMSettings(gpu_memory_utilization=1.2)",
            "rollout.vllm.gpu_memory_utilization=1.2 must be in (0, 1]",
        ),
        ("OptimConfig(lr=1e-5, weight_decay=0.1, grad_clip=-1.0)", "optim.grad_clip=-1.0 must be >= 0"),
    ],
)
def test_each_group_checks_itself_in_one_line(group, match):
    """A group's dataclass checks its own fields, without the rest of the config."""
    from pods import config
    from pods.prefilter.greso import GresoConfig
    from pods.rollout.vllm import VLLMSettings
    from pods.update.advantages import GroupNormSettings

    obj = eval(group, {**vars(config), "GresoConfig": GresoConfig, "VLLMSettings": VLLMSettings,
                       "GroupNormSettings": GroupNormSettings})  # fmt: skip
    with pytest.raises(ConfigError) as e:
        obj.check()
    assert match in str(e.value) and "\n" not in str(e.value)
    defaults = type(obj)(**{k: v for k, v in vars(obj).items() if k == "name" and v != "maxvar"})
    if type(obj).__name__ not in ("SelectorConfig", "RewardConfig", "OptimConfig"):
        defaults.check()  # the defaults pass


def test_validate_returns_the_typed_groups(make_cfg):
    from pods.config import DynamicSamplingConfig
    from pods.prefilter.greso import GresoConfig

    typed = checked(make_cfg("arm=greso+dynamic_sampling+none-n16-m16"))
    assert typed.prefilter.name == "greso" and typed.prefilter.own() == GresoConfig()
    assert typed.dynamic_sampling == DynamicSamplingConfig(enabled=True)
    assert (typed.selector.name, typed.selector.n, typed.selector.m) == ("none", 16, 16)
    assert typed.optim.lr == typed.model.recipe.lr == 6e-5  # interpolations resolved


@pytest.mark.parametrize(
    "group", sorted(p.stem for p in (Path(__file__).parents[1] / "conf/reward").glob("*.yaml"))
)
def test_a_reward_group_weighs_only_its_own_terms(make_cfg, group):
    """Each reward group's weights are its YAML's, not merged with a default (reward=format once weighed accuracy
    1.0 as well)."""
    own = OmegaConf.load(Path(__file__).parents[1] / f"conf/reward/{group}.yaml").weights
    assert dict(make_cfg(f"reward={group}").reward.weights) == dict(own)
