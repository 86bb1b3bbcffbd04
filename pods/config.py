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
    micro_batch_size: int = 16  # sequences per forward/backward in the update
    attn_implementation: str = "sdpa"  # sdpa | eager | flash_attention_2
    distributed: str = (
        "none"  # none | ddp (accelerate) | fsdp (torch FSDP2: sharded weights, grads, optimizer)
    )
    num_threads: int = 0  # torch intra-op CPU threads (0 = torch's default)
    vllm_gpu_memory_utilization: float = 0.35  # share of the GPU the colocated vLLM engine may take


@dataclass
class RolloutConfig:
    backend: str = "hf"  # hf (transformers generate) | vllm
    temperature: float = 0.9
    top_p: float = 1.0
    top_k: int = 0  # 0 = off
    batch_size: int = 256  # sequences per generate call (prompts x n are chunked)
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


def register_schema() -> None:
    from pods.presets import install

    ConfigStore.instance().store(name="pods_schema", node=TrainConfig)
    install()  # +experiment/+scale/+variant/+debug apply in the defaults list's order, not the CLI's


# --- cross-field checks -------------------------------------------------------------------------


def _choice(key: str, value: Any, allowed: list[str]) -> None:
    if value not in allowed:
        raise ConfigError(f"{key}={value!r} is not valid; allowed values: {', '.join(map(str, allowed))}")


def _positive(key: str, value: float, allow_zero: bool = False) -> None:
    ok = math.isfinite(value) and (value >= 0 if allow_zero else value > 0)
    if not ok:
        raise ConfigError(f"{key}={value!r} must be {'>= 0' if allow_zero else '> 0'} and finite")


def validate(cfg: Any) -> None:
    """Check choices and relations between fields; raise ConfigError naming the key and the fix."""
    from pods.filter import PREFILTERS
    from pods.selection import SELECTORS

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
    if not 0 < g.p_min <= g.p_init <= g.p_max <= 1:
        raise ConfigError("selector.greso needs 0 < p_min <= p_init <= p_max <= 1")
    _positive("selector.greso.oversample", g.oversample)

    _choice("hardware.device", cfg.hardware.device, ["auto", "cpu", "cuda"])
    _choice("hardware.dtype", cfg.hardware.dtype, ["float32", "bfloat16", "float16"])
    _choice("model.dtype", cfg.model.dtype, ["auto", "float32", "bfloat16", "float16"])
    _choice("hardware.distributed", cfg.hardware.distributed, ["none", "ddp", "fsdp"])
    if cfg.hardware.distributed == "fsdp":
        for key, bad in (
            ("hardware.lora", cfg.hardware.lora),
            ("hardware.load_in_4bit", cfg.hardware.load_in_4bit),
            ("rollout.backend=vllm", cfg.rollout.backend == "vllm"),
        ):
            if bad:
                raise ConfigError(
                    f"hardware.distributed=fsdp does not support {key} yet; use hardware.distributed=ddp"
                )
    _choice(
        "hardware.attn_implementation",
        cfg.hardware.attn_implementation,
        ["sdpa", "eager", "flash_attention_2"],
    )
    _positive("hardware.micro_batch_size", cfg.hardware.micro_batch_size)
    if cfg.hardware.num_threads < 0:
        raise ConfigError(
            f"hardware.num_threads={cfg.hardware.num_threads}: must be >= 0 (0 = torch's default)"
        )
    _choice("rollout.backend", cfg.rollout.backend, ["hf", "vllm"])
    _positive("rollout.temperature", cfg.rollout.temperature)
    _positive("rollout.batch_size", cfg.rollout.batch_size)
    if not 0 < cfg.rollout.top_p <= 1:
        raise ConfigError(f"rollout.top_p={cfg.rollout.top_p} must be in (0, 1]")
    _choice("dataset.source", cfg.dataset.source, ["reasoning_gym", "hf", "local"])
    _choice("dataset.on_bad_rows", cfg.dataset.on_bad_rows, ["skip", "error"])
    _choice("dataset.answer_format", cfg.dataset.answer_format, ["plain", "gsm8k", "boxed"])
    if "{question}" not in cfg.dataset.template:
        raise ConfigError(f"dataset.template={cfg.dataset.template!r} must contain '{{question}}'")
    _choice("logger.backend", cfg.logger.backend, ["wandb", "none"])
    _choice("logger.mode", cfg.logger.mode, ["auto", "online", "offline", "disabled"])

    a, o = cfg.algo, cfg.optim
    _positive("algo.prompts_per_step", a.prompts_per_step)
    _positive("algo.epsilon", a.epsilon)
    _positive("algo.beta", a.beta, allow_zero=True)
    _positive("algo.mu", a.mu)
    _choice("algo.loss_agg", a.loss_agg, ["token", "sequence"])
    _positive("optim.lr", o.lr)
    _positive("optim.weight_decay", o.weight_decay, allow_zero=True)
    _positive("optim.grad_clip", o.grad_clip, allow_zero=True)
    _choice("optim.schedule", o.schedule, ["constant", "cosine"])
    if len(o.betas) != 2 or not all(0 <= b < 1 for b in o.betas):
        raise ConfigError(f"optim.betas={list(o.betas)} must be two numbers in [0, 1)")
    if not 0 <= o.warmup_ratio < 1:
        raise ConfigError(f"optim.warmup_ratio={o.warmup_ratio} must be in [0, 1)")
    _positive("max_steps", cfg.max_steps)
    _positive("max_train_time", cfg.max_train_time, allow_zero=True)
    _positive("eval.num_samples", cfg.eval.num_samples)
    _positive("eval.temperature", cfg.eval.temperature, allow_zero=True)
    _positive("model.max_completion_len", cfg.model.max_completion_len)
    _positive("model.max_prompt_len", cfg.model.max_prompt_len)
