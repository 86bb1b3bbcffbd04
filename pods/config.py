"""Typed schema of every config group, and the cross-field checks run before any model loads.

Hydra composes conf/train.yaml on top of `TrainConfig` (registered below as `pods_schema`), so a key
that is not in the schema or a value of the wrong type fails at compose time. `validate(cfg)` then
checks choices and relations between fields (m <= n, lr > 0, ...) and raises `ConfigError` with the
key, the bad value and what is allowed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING


class ConfigError(ValueError):
    """A config value is invalid; the message names the key and the allowed values."""


@dataclass
class LoraConfig:
    r: int = 64  # LoRA rank (the paper: 64)
    alpha: int = 64  # LoRA alpha (the paper: 64)
    dropout: float = 0.0
    targets: list[str] = field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    )


@dataclass
class ModelConfig:
    name: str = MISSING  # short name used in run names
    path: str = MISSING  # hub id (Qwen/Qwen2.5-3B-Instruct) or a local directory
    use_chat_template: bool = True  # wrap prompts with the tokenizer's chat template
    dtype: str = "auto"  # auto (the hardware profile decides) | float32 | bfloat16 | float16
    max_prompt_len: int = 512  # prompts longer than this are bad data (see dataset.on_bad_rows)
    max_completion_len: int = 512  # max new tokens per rollout
    lora: LoraConfig = field(default_factory=LoraConfig)  # used when hardware.lora is true
    trust_remote_code: bool = False


@dataclass
class DatasetConfig:
    name: str = MISSING
    source: str = MISSING  # reasoning_gym | hf | local
    task: str = MISSING  # reasoning-gym task name, hub dataset id, or local .jsonl/.parquet path
    task_kwargs: dict[str, Any] = field(default_factory=dict)  # reasoning-gym task config
    hf_config: str | None = None  # hub dataset config name (gsm8k: "main")
    train_split: str = "train"
    eval_split: str = "test"
    eval_task: str | None = None  # a different hub id / path for eval (MATH-500)
    question_field: str = "question"
    answer_field: str = "answer"
    answer_format: str = "plain"  # plain | gsm8k (gold after '####') | boxed (last \boxed{} of a solution)
    train_size: int = 2000  # procedural: how many to generate; hub/local: cap (0 = all)
    eval_size: int = 200
    system_prompt: str | None = None  # used only with a chat template
    template: str = "{question}"  # user message; {question} is replaced
    on_bad_rows: str = "skip"  # skip (count, report, drop) | error (refuse to start)
    data_seed: int = 1234  # procedural generation seed (fixed across training seeds)


@dataclass
class RewardConfig:
    name: str = MISSING
    weights: dict[str, float] = field(default_factory=lambda: {"accuracy": 1.0})  # fn name -> weight
    timeout_s: float = 1.0  # per-completion grading time limit
    max_chars: int = 4096  # completions are cut to their last max_chars characters before grading
    max_answer_chars: int = 256  # longer extracted answers score 0 without parsing
    boxed: bool = True  # with no <answer> tag, grade the last \boxed{...}
    rel_tol: float = 0.0  # extra relative tolerance when a side is a decimal; ints/fractions stay exact
    round_to_reference: bool = True  # a decimal gold answer (3.14) is matched at the places it states
    workers: int = 0  # math-verify worker processes per rank; 0: min(4, CPUs per local rank), at least 2
    batch_timeout_s: float = 30.0  # bound on grading one batch; what is left counts as timeouts; 0: none


@dataclass
class GresoConfig:
    p_init: float = 0.5  # initial base keep-probability for zero-variance prompts
    p_step: float = 0.01  # adaptation step per training step
    p_min: float = 0.05
    p_max: float = 0.95
    min_keep: float = 0.01  # a prompt is always kept with at least this probability
    target_zero_var: float = 0.25  # target fraction of zero-variance groups among rollouts
    easy_share: float = 0.3333333333333333  # share of the target that is all-correct (rest: all-wrong)
    oversample: float = 1.25  # extra prompts drawn per round (dynamic sampling)
    max_rounds: int = 8  # generation rounds per step before training on a short batch


@dataclass
class SelectorConfig:
    name: str = MISSING
    n: int = 16  # rollouts generated per prompt
    m: int = 16  # rollouts trained on per prompt (m <= n)
    downsample: str = "none"  # post-rollout down-sampler: a name in pods.selection.SELECTORS
    prefilter: str = "none"  # pre-rollout filter: none | greso
    dynamic_sampling: bool = False  # drop zero-variance groups and refill (GRESO/DAPO style)
    adv_stats: str = "kept"  # advantages normalised over the kept m (paper) | full (all n, ablation)
    greso: GresoConfig = field(default_factory=GresoConfig)


@dataclass
class HardwareConfig:
    name: str = MISSING
    device: str = "auto"  # auto | cpu | cuda
    dtype: str = "float32"  # compute dtype when model.dtype is auto
    lora: bool = False  # train a LoRA adapter through peft instead of all weights
    load_in_4bit: bool = False  # 4-bit base weights (bitsandbytes), the paper's single-GPU setting
    gradient_checkpointing: bool = False
    micro_batch_size: int = 16  # max sequences per forward/backward in the update
    micro_batch_tokens: int = 0  # max padded tokens (rows x width) per micro-batch (0 = rows only)
    width_bucket: int = 0  # update micro-batch prompt and completion widths padded up to a multiple of
    # this (0 = off): a run then meets a few shapes, each allocated and tuned once
    fused_logprobs: bool = False  # update: head + log-prob a chunk of positions at a time, never the
    # whole (rows, completion, vocab) logits (falls back to the logits with an adapted head or FSDP)
    attn_implementation: str = "sdpa"  # sdpa | eager | flash_attention_2
    distributed: str = (
        "none"  # none | ddp (accelerate) | fsdp (torch FSDP2: sharded weights, grads, optimizer)
    )
    num_threads: int = 0  # torch intra-op CPU threads (0 = automatic: the free cores, see pods/threads.py)
    vllm_gpu_memory_utilization: float = 0.35  # share of the GPU the colocated vLLM engine may take


@dataclass
class RolloutConfig:
    backend: str = "hf"  # a name in pods.rollout.BACKENDS: hf (transformers generate) | vllm
    temperature: float = 0.9
    top_p: float = 1.0
    top_k: int = 0  # 0 = off
    batch_size: int = 256  # sequences per generate call (prompts x n are chunked)
    compile: str = "auto"  # hf: static KV cache + compiled decoding; auto = on CUDA only | true | false
    prompt_bucket: int = 64  # hf compiled: prompts are left-padded to a multiple of this (fewer shapes)
    share_weights: bool = True  # hf compiled + LoRA: decode on the policy's own base with the adapter
    # merged in place (restored from a host copy after), instead of a second bf16 copy of the model
    size_cache_to_prompt: bool = False  # hf compiled: static cache of this prompt width + new tokens, not
    # the widest: less KV read per decode step, one more compile per prompt width (20-35 s each)
    vllm_sleep_mode: bool = False  # vllm: free the engine's GPU memory during the update


@dataclass
class LoggerConfig:
    backend: str = "none"  # wandb | none (metrics.jsonl is always written)
    project: str = "pods"
    entity: str | None = None
    group: str | None = None  # W&B group; sweeps set it to the sweep name
    mode: str = "auto"  # auto (online if logged in and reachable, else offline) | online | offline
    log_completions: int = 2  # completions printed to the log per eval (0 = none)


@dataclass
class AlgoConfig:
    prompts_per_step: int = 1  # prompts per optimizer step (the paper's single GPU: 1)
    epsilon: float = 0.2  # PPO clip range (low)
    epsilon_high: float | None = None  # upper clip range (None = epsilon)
    beta: float = 0.0  # KL weight to the reference policy (paper: 0)
    mu: int = 1  # policy-gradient iterations per batch of rollouts
    loss_agg: str = "token"  # token (mean over all kept tokens) | sequence (mean of per-sequence means)
    scale_adv_by_std: bool = True  # divide advantages by the group std (Dr. GRPO turns this off)


@dataclass
class OptimConfig:
    lr: float = 5e-6
    betas: list[float] = field(default_factory=lambda: [0.9, 0.99])
    weight_decay: float = 0.1
    grad_clip: float = 0.1  # max grad norm (0 = off)
    warmup_ratio: float = 0.0
    schedule: str = "constant"  # constant | cosine


@dataclass
class EvalConfig:
    every_steps: int = 0  # 0 = off
    every_seconds: float = 0.0  # training-clock seconds between evals (0 = off)
    at_start: bool = True
    at_end: bool = True
    num_samples: int = 1  # samples per question; accuracy is their mean
    temperature: float = 0.0  # 0 = greedy
    batch_size: int = 256


@dataclass
class CheckpointConfig:
    every_steps: int = 0  # 0 = off
    every_seconds: float = 0.0  # training-clock seconds between checkpoints (paper: 1800)
    keep_last: int = 2
    save_final: bool = True


@dataclass
class TrainConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    dataset: DatasetConfig = field(default_factory=DatasetConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    selector: SelectorConfig = field(default_factory=SelectorConfig)
    hardware: HardwareConfig = field(default_factory=HardwareConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    logger: LoggerConfig = field(default_factory=LoggerConfig)
    algo: AlgoConfig = field(default_factory=AlgoConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    seed: int = 0
    max_steps: int = 100
    max_train_time: float = 0.0  # training-clock budget in seconds (0 = none)
    resume: bool = False  # continue from the newest checkpoint in run_dir
    run_dir: str = "outputs/run"  # set by Hydra to its output dir
    name: str | None = None  # run name; default: <selector>-n<n>-m<m>-s<seed>
    experiment: str | None = None  # name of the experiment preset, if any
    plugins: list[str] = field(default_factory=list)  # modules imported before the config is checked, so
    # the selectors, rewards, prefilters and backends they register are valid names (README: "Plugins")


def register_schema() -> None:
    from pods.naming import register_resolver
    from pods.presets import install

    ConfigStore.instance().store(name="pods_schema", node=TrainConfig)
    register_resolver()  # ${pods.run_name:...}: the run-name format, defined once in pods/naming.py
    install()  # +experiment/+scale/+variant/+debug apply in the defaults list's order, not the CLI's


# --- cross-field checks -------------------------------------------------------------------------


def _choice(key: str, value: Any, allowed: list[str]) -> None:
    if value not in allowed:
        raise ConfigError(f"{key}={value!r} is not valid; allowed values: {', '.join(map(str, allowed))}")


def _number(key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(f"{key}={value!r} must be a finite number")
    return value


def _positive(key: str, value: float, allow_zero: bool = False, note: str = "") -> None:
    ok = math.isfinite(_number(key, value)) and (value >= 0 if allow_zero else value > 0)
    if not ok:
        raise ConfigError(f"{key}={value!r} must be {'>= 0' if allow_zero else '> 0'} and finite{note}")


def _at_least(key: str, value: int, low: int, note: str = "") -> None:
    if _number(key, value) < low:
        raise ConfigError(f"{key}={value!r} must be >= {low}{note}")


def _interval(key: str, value: float, lo: float, hi: float, closed: str = "[]", note: str = "") -> None:
    """value in the interval; `closed` says which ends are included: "[]", "[)", "(]" or "()"."""
    _number(key, value)
    ok = (value >= lo if closed[0] == "[" else value > lo) and (
        value <= hi if closed[1] == "]" else value < hi
    )
    if not ok:
        raise ConfigError(f"{key}={value!r} must be in {closed[0]}{lo:g}, {hi:g}{closed[1]}{note}")


def validate(cfg: Any) -> None:
    """Check every field's range and choices and the relations between fields; raise ConfigError with one
    line naming the key, the bad value and what is allowed. Runs before anything heavy loads."""
    from pods.filter import PREFILTERS
    from pods.selection import SELECTORS

    _at_least("seed", cfg.seed, 0, " (numpy seeds are non-negative)")
    _at_least("max_steps", cfg.max_steps, 1)
    _positive("max_train_time", cfg.max_train_time, allow_zero=True, note=" (0 = no time limit)")

    s = cfg.selector
    if s.n < 2:
        raise ConfigError(f"selector.n={s.n} must be >= 2: GRPO advantages need at least two rollouts")
    if not 1 <= s.m <= s.n:
        raise ConfigError(f"selector.m={s.m} must be between 1 and selector.n={s.n} (m <= n)")
    _choice("selector.downsample", s.downsample, sorted(SELECTORS))
    _choice("selector.prefilter", s.prefilter, sorted(PREFILTERS))
    _choice("selector.adv_stats", s.adv_stats, ["kept", "full"])
    if s.m < 2 and s.downsample != "none":
        raise ConfigError(f"selector.m={s.m} must be >= 2 with selector.downsample={s.downsample}")
    if s.downsample == "none" and s.m != s.n:
        raise ConfigError(
            f"selector.m={s.m} != selector.n={s.n} needs a down-sampler; set selector.downsample"
        )
    g = s.greso
    for k in ("p_init", "p_min", "p_max"):
        _interval(f"selector.greso.{k}", g[k], 0, 1, "(]")
    if not g.p_min <= g.p_init <= g.p_max:
        raise ConfigError(
            f"selector.greso needs p_min <= p_init <= p_max; got p_min={g.p_min}, p_init={g.p_init}, "
            f"p_max={g.p_max}"
        )
    _interval("selector.greso.p_step", g.p_step, 0, 1, "[]", " (the adaptation step per training step)")
    _interval(
        "selector.greso.min_keep", g.min_keep, 0, 1, "[)", " (min_keep >= 1 keeps every prompt: no filter)"
    )
    _interval("selector.greso.target_zero_var", g.target_zero_var, 0, 1, "[]", " (a fraction of groups)")
    _interval("selector.greso.easy_share", g.easy_share, 0, 1, "[]", " (a fraction of the target)")
    _number("selector.greso.oversample", g.oversample)
    if g.oversample < 1:
        raise ConfigError(
            f"selector.greso.oversample={g.oversample!r} must be >= 1 (a factor on the prompts drawn per round)"
        )
    _at_least("selector.greso.max_rounds", g.max_rounds, 1, " (generation rounds per step)")

    h = cfg.hardware
    _choice("hardware.device", h.device, ["auto", "cpu", "cuda"])
    _choice("hardware.dtype", h.dtype, ["float32", "bfloat16", "float16"])
    _choice("model.dtype", cfg.model.dtype, ["auto", "float32", "bfloat16", "float16"])
    _choice("hardware.distributed", h.distributed, ["none", "ddp", "fsdp"])
    if h.distributed == "fsdp":
        for key, bad in (
            ("hardware.lora", h.lora),
            ("hardware.load_in_4bit", h.load_in_4bit),
        ):
            if bad:
                raise ConfigError(
                    f"hardware.distributed=fsdp does not support {key} yet; use hardware.distributed=ddp"
                )
    _choice("hardware.attn_implementation", h.attn_implementation, ["sdpa", "eager", "flash_attention_2"])
    _at_least("hardware.micro_batch_size", h.micro_batch_size, 1)
    if h.num_threads < 0:
        raise ConfigError(f"hardware.num_threads={h.num_threads}: must be >= 0 (0 = automatic)")
    _interval("hardware.vllm_gpu_memory_utilization", h.vllm_gpu_memory_utilization, 0, 1, "(]")
    _at_least("hardware.micro_batch_tokens", h.micro_batch_tokens, 0, " (0 = rows only)")
    _at_least("hardware.width_bucket", h.width_bucket, 0, " (0 = off)")

    r = cfg.rollout
    _positive("rollout.temperature", r.temperature, note=" (0 = greedy: all n rollouts would be equal)")
    _interval("rollout.top_p", r.top_p, 0, 1, "(]")
    _at_least("rollout.top_k", r.top_k, 0, " (0 = off)")
    _at_least("rollout.batch_size", r.batch_size, 1)
    _choice("rollout.compile", str(r.compile).lower(), ["auto", "true", "false"])
    if str(r.compile).lower() == "true" and h.load_in_4bit:
        raise ConfigError(
            "rollout.compile=true needs a bf16 copy of the weights, which a 4-bit base "
            "(hardware.load_in_4bit=true) cannot give; use rollout.compile=auto or false"
        )
    _at_least("rollout.prompt_bucket", r.prompt_bucket, 1)

    m = cfg.model
    _at_least("model.max_completion_len", m.max_completion_len, 1)
    _at_least("model.max_prompt_len", m.max_prompt_len, 1)
    if h.lora:
        _at_least("model.lora.r", m.lora.r, 1)
        _positive("model.lora.alpha", m.lora.alpha)
        _interval("model.lora.dropout", m.lora.dropout, 0, 1, "[)")
        if not m.lora.targets:
            raise ConfigError("model.lora.targets is empty; name the modules to adapt (q_proj, ...)")

    d = cfg.dataset
    _choice("dataset.source", d.source, ["reasoning_gym", "hf", "local"])
    _choice("dataset.on_bad_rows", d.on_bad_rows, ["skip", "error"])
    _choice("dataset.answer_format", d.answer_format, ["plain", "gsm8k", "boxed"])
    if "{question}" not in d.template:
        raise ConfigError(f"dataset.template={d.template!r} must contain '{{question}}'")
    generated = d.source == "reasoning_gym"
    for key in ("train_size", "eval_size"):
        note = " (procedural data: how many to generate)" if generated else " (0 = all rows)"
        _at_least(f"dataset.{key}", d[key], 1 if generated else 0, note)
    _at_least("dataset.data_seed", d.data_seed, 0)

    _validate_reward(cfg.reward)

    lg = cfg.logger
    _choice("logger.backend", lg.backend, ["wandb", "none"])
    _choice("logger.mode", lg.mode, ["auto", "online", "offline", "disabled"])
    _at_least("logger.log_completions", lg.log_completions, 0)

    a, o = cfg.algo, cfg.optim
    _at_least("algo.prompts_per_step", a.prompts_per_step, 1)
    _interval("algo.epsilon", a.epsilon, 0, 1, "()", " (the PPO clip range: ratios in [1-eps, 1+eps_high])")
    if a.epsilon_high is not None:
        _positive("algo.epsilon_high", a.epsilon_high, note=" (upper clip range; null = algo.epsilon)")
    _positive("algo.beta", a.beta, allow_zero=True)
    _at_least("algo.mu", a.mu, 1)
    _choice("algo.loss_agg", a.loss_agg, ["token", "sequence"])
    _positive("optim.lr", o.lr)
    _positive("optim.weight_decay", o.weight_decay, allow_zero=True)
    _positive("optim.grad_clip", o.grad_clip, allow_zero=True, note=" (0 = off)")
    _choice("optim.schedule", o.schedule, ["constant", "cosine"])
    if len(o.betas) != 2 or not all(isinstance(b, (int, float)) and 0 <= b < 1 for b in o.betas):
        raise ConfigError(f"optim.betas={list(o.betas)} must be two numbers in [0, 1)")
    _interval("optim.warmup_ratio", o.warmup_ratio, 0, 1, "[)")

    e = cfg.eval
    _at_least("eval.every_steps", e.every_steps, 0, " (0 = off)")
    _positive("eval.every_seconds", e.every_seconds, allow_zero=True, note=" (0 = off)")
    _at_least("eval.num_samples", e.num_samples, 1)
    _positive("eval.temperature", e.temperature, allow_zero=True, note=" (0 = greedy)")
    _at_least("eval.batch_size", e.batch_size, 1)

    c = cfg.checkpoint
    _at_least("checkpoint.every_steps", c.every_steps, 0, " (0 = off)")
    _positive("checkpoint.every_seconds", c.every_seconds, allow_zero=True, note=" (0 = off)")
    _at_least("checkpoint.keep_last", c.keep_last, 1, " (the newest checkpoint is always kept)")


def _validate_reward(r: Any) -> None:
    """The checks build_reward makes, here so that they fail before the tokenizer or model loads."""
    from pods.reward import REWARDS

    weights = dict(r.weights)
    if not weights:
        raise ConfigError(f"reward.weights is empty; give at least one of: {', '.join(sorted(REWARDS))}")
    for name, w in weights.items():
        if name not in REWARDS:
            raise ConfigError(
                f"reward.weights.{name}: {name!r} is not a registered reward; registered: "
                f"{', '.join(sorted(REWARDS))}"
            )
        _number(f"reward.weights.{name}", w)
        if w < 0:
            raise ConfigError(
                f"reward.weights.{name}={w!r} must be >= 0 (reward terms are scores: higher is better)"
            )
    if sum(weights.values()) <= 0:
        raise ConfigError(
            f"reward.weights={weights} sum to 0: every reward would be 0 and every update skipped; "
            "give at least one weight > 0"
        )
    _positive("reward.timeout_s", r.timeout_s)
    _at_least("reward.max_chars", r.max_chars, 1)
    _at_least("reward.max_answer_chars", r.max_answer_chars, 1)
    _interval("reward.rel_tol", r.rel_tol, 0, 1, "[)")
    _at_least("reward.workers", r.workers, 0, " (0 = automatic)")
    _positive("reward.batch_timeout_s", r.batch_timeout_s, allow_zero=True)
