"""Spellings that issue 20's config-by-stage layout (then components owning their settings, then settings split
by the stage that reads them) retired, each refused with a one-line hint naming the new one (never silently
accepted: one word per stage, no aliases). Checked on the command line before Hydra runs, so a command copied
from an old note fails at once and says what to write instead. A retired key set in a YAML file gets the same
line: from pods.cli.compose_error where Hydra stops on it (a closed group: `hardware:`), from
pods.components.resolve where it composes (an open group: `rollout:`). Metric names retired by one word per
stage are not refused but read under today's names (RETIRED_METRICS): committed runs logged them."""

from __future__ import annotations

from pods.errors import ConfigError, choice

GRESO_KNOBS = ("p_init", "p_step", "p_min", "p_max", "min_keep", "target_zero_var", "easy_share")
UPDATE_LAYOUT = ("gradient_checkpointing", "micro_batch_size", "micro_batch_tokens", "width_bucket", "row_bucket",
                 "fused_logprobs")  # fmt: skip
HF_KNOBS = ("compile", "prompt_bucket", "share_weights", "size_cache_to_prompt", "loop", "release_cache",
            "fuse_projections")  # fmt: skip

# old key (or key prefix, ending in '.') -> what to write now
RETIRED_KEYS = {
    "selector.downsample": "selector.name (or selector=NAME)",
    "selector.prefilter": "prefilter.name (or prefilter=NAME)",
    "selector.dynamic_sampling": "dynamic_sampling.enabled",
    "selector.adv_stats": "advantage.grpo.stats",
    "algo.scale_adv_by_std": "advantage.grpo.scale_by_std",
    "selector.greso.oversample": "dynamic_sampling.oversample",
    "selector.greso.max_rounds": "dynamic_sampling.max_rounds",
    "selector.greso.": "prefilter.greso.<knob> (p_init, p_step, p_min, p_max, min_keep, target_zero_var, easy_share)",
    # components own their settings (issue: "extension contracts"): a section named after the component
    **{f"prefilter.{k}": f"prefilter.greso.{k}" for k in GRESO_KNOBS},
    "rollout.vllm_sleep_mode": "rollout.vllm.sleep_mode",
    "hardware.vllm_gpu_memory_utilization": "rollout.vllm.gpu_memory_utilization",
    # each stage's group is what that stage reads (issue 30, item 1)
    **{f"hardware.{k}": f"update.{k}" for k in UPDATE_LAYOUT},
    "hardware.update_sdpa": "update.sdpa",
    **{f"rollout.{k}": f"sampling.{k}" for k in ("temperature", "top_p", "top_k")},
    **{f"rollout.{k}": f"rollout.hf.{k}" for k in HF_KNOBS},
    # one key shape: every group names its component in `<group>.name` (issue 41)
    "rollout.backend": "rollout.name (or rollout=NAME)",
}

# retired group options -> the stage groups (or arm) that run the same thing
RETIRED_OPTIONS = {
    "selector=greso": "prefilter=greso dynamic_sampling.enabled=true selector=none",
    "selector=greso_max_variance": "prefilter=greso dynamic_sampling.enabled=true selector=max_variance",
    "selector=dynamic_sampling": "dynamic_sampling.enabled=true selector=none",
    "variant=grpo": "selector=none (or arm=none-n16-m16)",
    "variant=pods": "selector=max_variance (or arm=max_variance-n64-m16)",
    "variant=pods_random": "arm=random-n64-m16",
    "variant=pods_max_reward": "arm=max_reward-n64-m16",
    "variant=grpo_all64": "arm=none-n64-m64",
    "variant=greso": "arm=greso+dynamic_sampling+none-n16-m16",
    "variant=greso_pods": "arm=greso+dynamic_sampling+max_variance-n64-m16",
    "variant=dynamic_sampling": "arm=dynamic_sampling+none-n16-m16",
}


def retired_key(key: str) -> str | None:
    """One line for a retired key (`hardware.micro_batch_size`), else None."""
    for old, new in RETIRED_KEYS.items():
        if key == old or (old.endswith(".") and key.startswith(old)):
            return f"{old.rstrip('.')} is retired; write {new}"
    return None


def retired_hint(args: list[str]) -> str | None:
    """One line for the first command-line argument in a retired spelling, else None."""
    for a in args:
        arg = a.lstrip("+~")
        key, _, value = arg.partition("=")
        for old, new in RETIRED_OPTIONS.items():
            group, opt = old.split("=")
            if key == group and opt in value.split(","):
                return f"{a}: retired by the config-by-stage layout; write {new}"
        if key == "variant":
            return f"{a}: the variant group is retired; arms are named by their run names: arm=<name> (conf/arm/)"
        if retired_key(key):
            return f"{a}: {retired_key(key)}"
    return None


def current_config(saved: dict) -> dict:
    """A config in an older layout (a checkpoint's, a run's config.yaml, or a command or YAML that still spells
    it so) in today's keys, so that it runs and a run saved before a rename resumes: `rollout.backend` is
    `rollout.name` (issue 41); the estimator's knobs `advantage.stats` and `advantage.scale_by_std` are
    `advantage.grpo.*` and `algo.loss_agg` is `loss.name` (issue 54: advantages and losses by name). A copy;
    the saved file is not rewritten.

    >>> current_config({"rollout": {"backend": "hf", "batch_size": 256}, "seed": 0})
    {'rollout': {'name': 'hf', 'batch_size': 256}, 'seed': 0}
    >>> current_config({"advantage": {"stats": "full"}, "algo": {"loss_agg": "sequence", "mu": 1}})
    {'advantage': {'grpo': {'stats': 'full'}}, 'algo': {'mu': 1}, 'loss': {'name': 'sequence'}}
    """
    out = saved
    rollout = saved.get("rollout")
    if isinstance(rollout, dict) and "backend" in rollout and "name" not in rollout:
        out = {**out, "rollout": {("name" if k == "backend" else k): v for k, v in rollout.items()}}
    advantage = saved.get("advantage")
    if isinstance(advantage, dict) and {"stats", "scale_by_std"} & set(advantage):
        out = {
            **out,
            "advantage": _knobs_to_section(advantage, "advantage", "grpo", ("stats", "scale_by_std")),
        }
    algo = saved.get("algo")
    if isinstance(algo, dict) and algo.get("loss_agg") is not None:
        out = {**out, **_loss_agg_to_name(algo, saved.get("loss"))}
    return out


def _knobs_to_section(node: dict, group: str, entry: str, keys: tuple) -> dict:
    """`node` with its `keys` moved into the section of `entry` (they are its knobs); one line when the
    section sets one of them to another value."""
    own = {k: v for k, v in node.items() if k not in keys}
    section = dict(own.get(entry) or {})
    for k in keys:
        if k in node and section.setdefault(k, node[k]) != node[k]:
            raise ConfigError(
                f"{group}.{k}={node[k]!r} and {group}.{entry}.{k}={section[k]!r}: the first is the old spelling "
                "of the second; set one"
            )
    return {**own, entry: section}


def _loss_agg_to_name(algo: dict, loss: dict | None) -> dict:
    """`algo.loss_agg` (token | sequence, the aggregations it named) as `loss.name`."""
    agg = algo["loss_agg"]
    choice("algo.loss_agg", agg, ["token", "sequence"])  # the old key's values; other losses: loss.name
    loss = dict(loss or {})
    if loss.get("name", "token") not in ("token", agg):
        raise ConfigError(
            f"algo.loss_agg={agg} is the old spelling of loss.name, which says {loss['name']!r}; set one"
        )
    return {"algo": {k: v for k, v in algo.items() if k != "loss_agg"}, "loss": {**loss, "name": agg}}


# metric names that one word per stage retired (issue 30, item 5): the prefilter's `filter/*` metrics and the
# `filter` and `selection` phases' timers and GPU peaks. Records already written under the old names
# (results/**, its archives) are read under today's by the readers of metrics.jsonl
# (pods.tracking.read_metrics, pods.analysis.load.read_jsonl).
# Issue 54, item 5: dynamic sampling's counts, logged as rollout/*, are dynamic_sampling/*, and the prompts the
# prefilter stage draws are prefilter/prompts_drawn (rollout/rollouts and rollout/tokens stay the rollout's).
PHASES_RENAMED = (("filter", "prefilter"), ("selection", "selector"))
RETIRED_METRICS = {
    "filter/": "prefilter/",
    **{f"timing/{old}": f"timing/{new}" for old, new in PHASES_RENAMED},
    **{f"memory/peak_{old}_gib": f"memory/peak_{new}_gib" for old, new in PHASES_RENAMED},
    **{f"rollout/{k}": f"dynamic_sampling/{k}" for k in ("rounds", "groups", "dropped_zero_var")},
    "rollout/prompts_drawn": "prefilter/prompts_drawn",
}


def current_metric(name: str) -> str:
    """Today's name of a logged metric (`filter/skipped` -> `prefilter/skipped`); other names as they are.

    >>> current_metric("timing/selection"), current_metric("filter/p_easy"), current_metric("selector/kept_reward_std")
    ('timing/selector', 'prefilter/p_easy', 'selector/kept_reward_std')
    >>> current_metric("rollout/dropped_zero_var"), current_metric("rollout/rollouts")
    ('dynamic_sampling/dropped_zero_var', 'rollout/rollouts')
    """
    for old, new in RETIRED_METRICS.items():
        if name == old or (old.endswith("/") and name.startswith(old)):
            return new + name[len(old) :]
    return name


def current_metrics(record: dict) -> dict:
    """A metrics.jsonl record with every metric under today's name."""
    return {current_metric(k): v for k, v in record.items()}


# checkpoint component keys that one word per stage retired (issue 54, item 5): dynamic sampling's state was
# saved as the loop's `collector` (RolloutCollector, which held it, was split into stages by issue 41)
RETIRED_COMPONENTS = {"collector": "dynamic_sampling"}


def current_components(states: dict) -> dict:
    """A checkpoint's component states under today's keys (the states themselves untouched), so that a
    checkpoint written before a rename resumes bitwise.

    >>> current_components({"collector": {"zero_var_ratio": 0.25}, "sampler": {}})
    {'dynamic_sampling': {'zero_var_ratio': 0.25}, 'sampler': {}}
    """
    return {RETIRED_COMPONENTS.get(k, k): v for k, v in states.items()}
