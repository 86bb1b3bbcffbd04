"""Retired spellings are refused with a hint that names a spelling which works today."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from pods.config import TrainConfig
from pods.spelling import RETIRED_KEYS, RETIRED_OPTIONS, retired_hint

CONF = Path(__file__).resolve().parent.parent / "conf"


def has_key(dotted: str) -> bool:
    """A schema key, or a component's own setting (`prefilter.greso.p_init`: a field of the settings
    dataclass that the registry entry `greso` of the prefilter group declares)."""
    from pods.components import registries

    group, _, rest = dotted.partition(".")
    name, _, field = rest.partition(".")
    own = registries().get(group, None)
    if own is not None and name in own.settings:
        return not field or field == "<knob>" or field in own.settings[name].__dataclass_fields__
    node = OmegaConf.structured(TrainConfig)
    for part in dotted.split("."):
        # keys(), not `in node`: OmegaConf answers False for a key whose value is MISSING (selector.name)
        if not OmegaConf.is_dict(node) or part not in node.keys():  # noqa: SIM118
            return False
        node = node._get_node(part)
    return True


@pytest.mark.parametrize("old", sorted(RETIRED_OPTIONS))
def test_every_hinted_option_exists_today(old):
    for key, option in re.findall(r"([\w.]+)=([\w+.-]+)", RETIRED_OPTIONS[old]):
        if "." not in key and (CONF / key).is_dir():
            assert (CONF / key / f"{option}.yaml").is_file(), f"{old} hints {key}={option}, which is missing"
        else:  # a field: it must be in the schema
            assert has_key(key), f"{old} hints {key}, which is not a config key"


def test_retired_keys_are_not_in_the_schema_and_their_new_names_are():
    for old, new in RETIRED_KEYS.items():
        assert not has_key(old.rstrip(".")), old
        first = new.split(" ")[0]
        assert has_key(first.split(".<")[0]), f"{old} hints {first}, which is not a config key"


@pytest.mark.parametrize(
    "arg, expect",
    [
        ("selector=greso", "prefilter=greso dynamic_sampling.enabled=true selector=none"),
        ("+variant=pods", "selector=max_variance"),
        ("variant=grpo_mgpu", "arm=<name>"),
        ("selector.greso.p_init=0.3", "prefilter.greso.<knob>"),
        ("prefilter.p_init=0.3", "write prefilter.greso.p_init"),
        ("rollout.vllm_sleep_mode=true", "write rollout.vllm.sleep_mode"),
        ("hardware.vllm_gpu_memory_utilization=0.5", "write rollout.vllm.gpu_memory_utilization"),
        ("selector.greso.max_rounds=4", "dynamic_sampling.max_rounds"),
        ("algo.scale_adv_by_std=false", "advantage.grpo.scale_by_std"),
        ("hardware.micro_batch_size=8", "write update.micro_batch_size"),
        ("hardware.update_sdpa=flash", "write update.sdpa"),
        ("rollout.temperature=1.0", "write sampling.temperature"),
        ("rollout.compile=false", "write rollout.hf.compile"),
        ("rollout.backend=vllm", "write rollout.name"),
    ],
)
def test_hint_names_the_new_spelling(arg, expect):
    assert expect in retired_hint(["seed=1", arg])


def test_current_spellings_pass():
    assert (
        retired_hint(["selector=max_variance", "prefilter=greso", "dynamic_sampling.enabled=true", "seed=3"])
        is None
    )


def _train_cli(*args: str) -> subprocess.CompletedProcess:
    """`python -m pods.train <args>` from the repository root, its output captured."""
    cmd = [sys.executable, "-m", "pods.train", *args]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=CONF.parent, timeout=120)


def test_the_cli_refuses_in_one_line_before_hydra():
    r = _train_cli("selector=greso_max_variance")
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0 and "prefilter=greso" in r.stderr


def test_a_retired_key_in_an_open_groups_yaml_gets_the_same_line(make_cfg):
    """`rollout:` takes a backend's section, so an old key there composes; the check names the new key."""
    from pods.components import checked
    from pods.config import ConfigError

    with pytest.raises(ConfigError, match=r"^rollout.compile is retired; write rollout.hf.compile$"):
        checked(make_cfg("rollout.compile=false"))


def test_rollout_backend_in_a_yaml_names_rollout_name(make_cfg):
    """A rollout option file of one's own written the old way (`backend: my_engine`): one line naming the key."""
    from pods.components import checked
    from pods.config import ConfigError

    with pytest.raises(
        ConfigError, match=r"^rollout.backend is retired; write rollout.name \(or rollout=NAME\)$"
    ):
        checked(make_cfg("+rollout.backend=hf"))


def test_a_config_saved_with_rollout_backend_reads_as_rollout_name():
    """What a checkpoint or config.yaml of an older pods holds, in today's keys; today's configs pass as they are."""
    from pods.spelling import current_config

    old = {"seed": 0, "rollout": {"backend": "vllm", "batch_size": 1024, "vllm": {"sleep_mode": True}}}
    assert current_config(old) == {
        "seed": 0,
        "rollout": {"name": "vllm", "batch_size": 1024, "vllm": {"sleep_mode": True}},
    }
    assert old["rollout"]["backend"] == "vllm"  # the saved one is not changed
    today = {"seed": 0, "rollout": {"name": "hf", "batch_size": 256}}
    assert current_config(today) is today


def test_a_retired_key_in_a_users_yaml_gets_the_same_line_from_the_cli(tmp_path):
    """An old-layout hardware profile of one's own: Hydra stops composing it; the CLI names the new key."""
    (tmp_path / "hardware").mkdir()
    (tmp_path / "hardware" / "mine.yaml").write_text("name: mine\ndevice: cpu\nmicro_batch_size: 32\n")
    r = _train_cli("--config-dir", str(tmp_path), "hardware=mine")
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0 and "write update.micro_batch_size" in r.stderr


def test_metrics_logged_under_retired_names_read_under_todays(tmp_path):
    """Committed runs logged filter/*, timing/{filter,selection} and dynamic sampling's counts and the prompts
    drawn as rollout/*; both readers of metrics.jsonl map them (the rollout's own rollout/* stay)."""
    from pods.analysis.load import read_jsonl
    from pods.tracking import read_metrics

    old = {
        "kind": "train",
        "step": 1,
        "filter/skip_rate": 0.25,
        "timing/filter": 0.1,
        "timing/selection": 0.2,
        "rollout/rounds": 2.0,
        "rollout/groups": 9.0,
        "rollout/dropped_zero_var": 1.0,
        "rollout/prompts_drawn": 9.0,
        "rollout/rollouts": 144.0,
    }
    (tmp_path / "metrics.jsonl").write_text(json.dumps(old) + "\n")
    want = {
        "kind": "train",
        "step": 1,
        "prefilter/skip_rate": 0.25,
        "timing/prefilter": 0.1,
        "timing/selector": 0.2,
        "dynamic_sampling/rounds": 2.0,
        "dynamic_sampling/groups": 9.0,
        "dynamic_sampling/dropped_zero_var": 1.0,
        "prefilter/prompts_drawn": 9.0,
        "rollout/rollouts": 144.0,
    }
    assert read_metrics(tmp_path / "metrics.jsonl") == [want] == read_jsonl(tmp_path / "metrics.jsonl")


def test_compare_reads_a_retired_metric_name_from_old_and_new_runs(tmp_path):
    from pods.analysis.load import load_runs

    for seed, key in ((1, "filter/skip_rate"), (2, "prefilter/skip_rate")):
        d = tmp_path / f"greso-n16-m16-s{seed}"
        d.mkdir()
        rec = {"kind": "train", "step": 1, "train_time": 1.0, "rollouts": 16, key: 0.25}
        (d / "metrics.jsonl").write_text(json.dumps(rec) + "\n")
    for asked in ("filter/skip_rate", "prefilter/skip_rate"):
        df = load_runs(tmp_path, asked)
        assert sorted(df.seed.astype(str)) == ["1", "2"] and set(df.value) == {0.25}


def test_a_config_saved_before_advantages_and_losses_had_names_is_the_same_experiment(make_cfg):
    """A checkpoint's config from before `advantage.name` and `loss.name` (`advantage: {stats, scale_by_std}`,
    `algo.loss_agg`) reads as today's default: a resume finds no changed key."""
    from pods.components import checked
    from pods.config import ConfigError, as_container
    from pods.history import check_same_experiment
    from pods.spelling import current_config

    today = as_container(checked(make_cfg("advantage.stats=full")))
    old = {k: v for k, v in today.items() if k != "loss"}
    old["advantage"] = {"stats": "full", "scale_by_std": True}
    old["algo"] = {**{k: v for k, v in today["algo"].items() if k != "loss_agg"}, "loss_agg": "token"}
    assert check_same_experiment(current_config(old), today, "step_2") == {}
    old["algo"]["loss_agg"] = "sequence"
    with pytest.raises(ConfigError, match=r"loss.name=token \(checkpoint: sequence\)"):
        check_same_experiment(current_config(old), today, "step_2")
