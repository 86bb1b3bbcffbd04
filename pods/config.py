"""Typed schema of every config group; each group checks its own fields (`check()`), once, where it is defined.

Hydra composes conf/train.yaml on top of `TrainConfig` (registered below as `pods_schema`), so a key
that is not in the schema or a value of the wrong type fails at compose time. `validate(cfg)` then turns
the composed config into these dataclasses (`settings(cfg)`), runs the top-level checks and each group's
`check()` (`TrainConfig.check`), and raises `ConfigError` with one line naming the key,
the bad value and what is allowed. Stages get their group's dataclass, not the whole config. Every group is
frozen: what is settled after the checks (hardware=auto, pods.memory.settle_hardware; a component's typed
settings, pods.components.resolve) makes a new TrainConfig with dataclasses.replace.

Each default is stated once, here, beside its comment; the YAML options set only what differs.
The training loop's stages, in order, and their groups:
    prefilter (before rollout) -> rollout -> reward -> dynamic_sampling (refill) -> selector (m of n)
    -> advantage -> update (loss, algo, optim, update: its layout) -> eval; sampling is read by rollout and eval
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import II, MISSING, OmegaConf
from omegaconf.errors import ConfigAttributeError, ConfigKeyError, OmegaConfBaseException

from pods.errors import ConfigError, at_least, choice, interval, number, positive, rows_or_auto

__all__ = ["CONF_DIR", "ConfigError", "TrainConfig", "register_schema", "settings", "validate"]
CONF_DIR = str(Path(__file__).resolve().parent.parent / "conf")  # conf/train.yaml and its groups


@dataclass(frozen=True)
class LoraConfig:
    r: int = 64  # LoRA rank (the paper: 64)
    alpha: int = 64  # LoRA alpha (the paper: 64)
    dropout: float = 0.0
    targets: list[str] = field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    )

    def check(self) -> None:
        at_least("model.lora.r", self.r, 1)
        positive("model.lora.alpha", self.alpha)
        interval("model.lora.dropout", self.dropout, 0, 1, "[)")
        if not self.targets:
            raise ConfigError("model.lora.targets is empty; name the modules to adapt (q_proj, ...)")


@dataclass(frozen=True)
class RecipeConfig:
    """Settings that depend on the model; the stages read them by interpolation (optim.lr: ${model.recipe.lr},
    ...). A model preset sets its recipe; an experiment, a scale or key=value sets the stage's own key and wins.
    The defaults are the paper's single-GPU 3B values (PODS, arXiv 2504.13818)."""

    lr: float = 5e-6  # -> optim.lr
    weight_decay: float = 0.1  # -> optim.weight_decay
    grad_clip: float = 0.1  # -> optim.grad_clip (max grad norm, 0 = off)
    temperature: float = 0.9  # -> sampling.temperature
    prompts_per_step: int = 1  # -> algo.prompts_per_step (the paper's single GPU: 1)

    def check(self) -> None:
        positive("model.recipe.lr", self.lr)
        positive("model.recipe.weight_decay", self.weight_decay, allow_zero=True)
        positive("model.recipe.grad_clip", self.grad_clip, allow_zero=True, note=" (0 = off)")
        positive("model.recipe.temperature", self.temperature)
        at_least("model.recipe.prompts_per_step", self.prompts_per_step, 1)


@dataclass(frozen=True)
class ModelConfig:
    name: str = MISSING  # short name used in run names
    path: str = MISSING  # hub id (Qwen/Qwen2.5-3B-Instruct) or a local directory
    use_chat_template: bool = True  # wrap prompts with the tokenizer's chat template
    dtype: str = "auto"  # auto (the hardware profile decides) | float32 | bfloat16 | float16
    max_prompt_len: int = 512  # prompts longer than this are bad data (see dataset.on_bad_rows)
    max_completion_len: int = 512  # max new tokens per rollout
    lora: LoraConfig = field(default_factory=LoraConfig)  # used when hardware.lora is true
    trust_remote_code: bool = False
    recipe: RecipeConfig = field(default_factory=RecipeConfig)  # what this model trains well with

    def check(self) -> None:
        choice("model.dtype", self.dtype, ["auto", "float32", "bfloat16", "float16"])
        at_least("model.max_completion_len", self.max_completion_len, 1)
        at_least("model.max_prompt_len", self.max_prompt_len, 1)
        self.lora.check()
        self.recipe.check()


def add_special_tokens(model: ModelConfig) -> bool:
    """Whether tokenizing a prompt adds the tokenizer's special tokens (BOS etc.): only without a chat
    template, which writes its own. One rule for the prompt-length check, rollout and eval."""
    return not model.use_chat_template


@dataclass(frozen=True)
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

    def check(self) -> None:
        choice("dataset.source", self.source, ["reasoning_gym", "hf", "local"])
        choice("dataset.on_bad_rows", self.on_bad_rows, ["skip", "error"])
        choice("dataset.answer_format", self.answer_format, ["plain", "gsm8k", "boxed"])
        if "{question}" not in self.template:
            raise ConfigError(f"dataset.template={self.template!r} must contain '{{question}}'")
        generated = self.source == "reasoning_gym"
        note = " (procedural data: how many to generate)" if generated else " (0 = all rows)"
        at_least("dataset.train_size", self.train_size, 1 if generated else 0, note)
        at_least("dataset.eval_size", self.eval_size, 1 if generated else 0, note)
        at_least("dataset.data_seed", self.data_seed, 0)


@dataclass(frozen=True)
class RewardConfig:
    name: str = MISSING
    # fn name -> weight, from the reward group's YAML alone: a default here would be merged key by key into
    # every group's weights (reward=format weighed accuracy 1.0 too)
    weights: dict[str, float] = field(default_factory=dict)
    # the term whose value 1.0 means "answered right": what eval/accuracy, reward/accuracy, the prefilter and
    # GRESO read; computed even when not weighted (a code task's verifier: its own registered name)
    correctness: str = "accuracy"
    timeout_s: float = 1.0  # per-completion grading time limit
    max_chars: int = 4096  # completions are cut to their last max_chars characters before grading
    max_answer_chars: int = 256  # longer extracted answers score 0 without parsing
    boxed: bool = True  # with no <answer> tag, grade the last \boxed{...}
    rel_tol: float = 0.0  # extra relative tolerance when a side is a decimal; ints/fractions stay exact
    round_to_reference: bool = True  # a decimal gold answer (3.14) is matched at the places it states
    workers: int = 0  # math-verify worker processes per rank; 0: min(4, CPUs per local rank), at least 2
    batch_timeout_s: float = 30.0  # bound on grading one batch; what is left counts as timeouts; 0: none
    # bound on one call of a reward function from a plugin (run in this process): past it the run stops, naming
    # the reward; 0: none. pods's own rewards are bounded by timeout_s and batch_timeout_s
    plugin_timeout_s: float = 300.0

    sections: dict[str, Any] = field(
        default_factory=dict
    )  # a reward function's own settings (pods.components)

    def check(self) -> None:
        # the names are checked against the reward registry in pods.components.resolve
        weights = dict(self.weights)
        if not weights:
            raise ConfigError(
                "reward.weights is empty; give at least one reward name and its weight (accuracy: 1.0)"
            )
        for name, w in weights.items():
            number(f"reward.weights.{name}", w)
            if w < 0:
                raise ConfigError(
                    f"reward.weights.{name}={w!r} must be >= 0 (reward terms are scores: higher is better)"
                )
        if sum(weights.values()) <= 0:
            raise ConfigError(
                f"reward.weights={weights} sum to 0: every reward would be 0 and every update skipped; "
                "give at least one weight > 0"
            )
        positive("reward.timeout_s", self.timeout_s)
        positive("reward.plugin_timeout_s", self.plugin_timeout_s, allow_zero=True, note=" (0 = none)")
        at_least("reward.max_chars", self.max_chars, 1)
        at_least("reward.max_answer_chars", self.max_answer_chars, 1)
        interval("reward.rel_tol", self.rel_tol, 0, 1, "[)")
        at_least("reward.workers", self.workers, 0, " (0 = automatic)")
        positive("reward.batch_timeout_s", self.batch_timeout_s, allow_zero=True)


# --- the sampling stages: prefilter -> (rollout) -> dynamic_sampling -> selector -> advantage ------------


@dataclass(frozen=True)
class PrefilterConfig:
    """The pre-rollout filter (conf/prefilter/): which drawn prompts get rollouts at all. A filter's own knobs
    sit in its section, `prefilter.<name>.*` (GRESO's: pods/prefilter/greso.py, GresoConfig)."""

    name: str = "none"  # none | greso: a name in pods.prefilter.PREFILTERS (checked in pods.components)
    sections: dict[str, Any] = field(default_factory=dict)  # filter name -> its own settings

    def own(self) -> Any:
        """The chosen filter's settings (its registry entry's dataclass), or None."""
        return self.sections.get(self.name)

    def check(self) -> None:
        pass


@dataclass(frozen=True)
class DynamicSamplingConfig:
    """DAPO-style dynamic sampling (GRESO's base): after reward, drop zero-variance groups and draw more
    prompts until the step holds algo.prompts_per_step informative groups (pods/rollout/dynamic_sampling.py)."""

    enabled: bool = False
    oversample: float = 1.25  # extra prompts drawn per round, as a factor
    max_rounds: int = 8  # generation rounds per step before training on a short batch

    def check(self) -> None:
        number("dynamic_sampling.oversample", self.oversample)
        if self.oversample < 1:
            raise ConfigError(
                f"dynamic_sampling.oversample={self.oversample!r} must be >= 1 (a factor on the prompts "
                "drawn per round)"
            )
        at_least("dynamic_sampling.max_rounds", self.max_rounds, 1, " (generation rounds per step)")


@dataclass(frozen=True)
class SelectorConfig:
    """The down-sampler (conf/selector/, PODS's selection rule): generate n rollouts per prompt, train on m."""

    name: str = MISSING  # none | max_variance | random | max_reward: a name in pods.selector.SELECTORS
    n: int = 16  # rollouts generated per prompt
    m: int = 16  # rollouts trained on per prompt (m <= n)
    sections: dict[str, Any] = field(default_factory=dict)  # selector name -> its own settings

    def own(self) -> Any:
        """The chosen selector's settings (its registry entry's dataclass), or None."""
        return self.sections.get(self.name)

    def check(self) -> None:
        # selector.name is checked against the registry in pods.components.resolve
        if self.n < 2:
            raise ConfigError(f"selector.n={self.n} must be >= 2: GRPO advantages need at least two rollouts")
        if not 1 <= self.m <= self.n:
            raise ConfigError(f"selector.m={self.m} must be between 1 and selector.n={self.n} (m <= n)")
        # m >= 2, or m = n for a selector that keeps all: its registry entry's trait (pods.components)


@dataclass(frozen=True)
class AdvantageConfig:
    """The advantage estimator (conf/advantage/, pods/update/advantages.py); its knobs sit in its section
    (`advantage.grpo.stats`). `advantage.stats` and `advantage.scale_by_std` are read as advantage.grpo's."""

    name: str = "grpo"  # grpo | dr_grpo | rloo: a name in pods.update.ADVANTAGES (checked in pods.components)
    sections: dict[str, Any] = field(default_factory=dict)  # estimator name -> its own settings

    def own(self) -> Any:
        """The chosen estimator's settings (its registry entry's dataclass), or None."""
        return self.sections.get(self.name)

    def check(self) -> None:
        pass


@dataclass(frozen=True)
class LossConfig:
    """The policy-gradient loss (conf/loss/, pods/update/loss.py); its knobs sit in its section
    (`loss.dapo.clip_high`). `algo.loss_agg` is read as loss.name."""

    name: str = "token"  # token | sequence | dapo | dr_grpo: a name in pods.update.LOSSES (pods.components)
    sections: dict[str, Any] = field(default_factory=dict)  # loss name -> its own settings

    def own(self) -> Any:
        """The chosen loss's settings (its registry entry's dataclass), or None."""
        return self.sections.get(self.name)

    def check(self) -> None:
        pass


@dataclass(frozen=True)
class HardwareConfig:
    """Where the run computes and how the model is held there (the update's own layout: UpdateConfig)."""

    name: str = MISSING
    device: str = "auto"  # auto | cpu | cuda
    dtype: str = "float32"  # compute dtype when model.dtype is auto
    lora: bool = False  # train a LoRA adapter through peft instead of all weights
    load_in_4bit: bool = False  # 4-bit base weights (bitsandbytes), the paper's single-GPU setting
    expandable_segments: bool = False  # CUDA allocator segments that grow in place
    # (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True), torch's remedy for churn when shapes vary; off
    # until a run shows allocator work in a slow step (update/cuda_mallocs, update/alloc_retries)
    attn_implementation: str = "sdpa"  # sdpa | eager | flash_attention_2
    distributed: str = (
        "none"  # none | ddp (accelerate) | fsdp (torch FSDP2: sharded weights, grads, optimizer)
    )
    num_threads: int = 0  # torch intra-op CPU threads (0 = automatic: the free cores, see pods/threads.py)

    def check(self) -> None:
        choice("hardware.device", self.device, ["auto", "cpu", "cuda"])
        choice("hardware.dtype", self.dtype, ["float32", "bfloat16", "float16"])
        choice("hardware.distributed", self.distributed, ["none", "ddp", "fsdp"])
        if self.distributed == "fsdp":
            for key, bad in (("hardware.lora", self.lora), ("hardware.load_in_4bit", self.load_in_4bit)):
                if bad:
                    raise ConfigError(
                        f"hardware.distributed=fsdp does not support {key} yet; use hardware.distributed=ddp"
                    )
        choice(
            "hardware.attn_implementation", self.attn_implementation, ["sdpa", "eager", "flash_attention_2"]
        )
        if self.num_threads < 0:
            raise ConfigError(f"hardware.num_threads={self.num_threads}: must be >= 0 (0 = automatic)")
        if self.expandable_segments and self.device == "cpu":
            raise ConfigError(
                "hardware.expandable_segments=true sets the CUDA allocator, and hardware.device=cpu has none; "
                "drop it or use a GPU profile"
            )


@dataclass(frozen=True)
class UpdateConfig:
    """The update's layout (pods/update/step.py): how its forward/backward passes are cut and shaped. The
    hardware profiles set it (conf/hardware/); the loss itself is algo.*, the optimizer optim.*. On a composed
    DictConfig read it as cfg["update"] (cfg.update is the mapping's update method)."""

    gradient_checkpointing: bool = False  # recompute activations in the backward instead of keeping them
    micro_batch_size: int = 16  # max sequences per forward/backward
    micro_batch_tokens: int = 0  # max padded tokens (rows x width) per micro-batch (0 = rows only)
    # width_bucket, row_bucket, fused_logprobs: null = the device decides when the run starts
    # (pods.memory.settle_hardware; hardware=auto): a GPU gets what hardware=gpu / gpu_lora set, a CPU off
    width_bucket: int | None = 0  # micro-batch widths padded up to a multiple of this (0 = off): a run
    # then meets a few shapes, each allocated and tuned once
    row_bucket: int | None = 0  # micro-batch rows padded up to a multiple of this with rows that count
    # for nothing (0 = off): fewer shapes again, for at most row_bucket - 1 extra rows per micro-batch
    fused_logprobs: bool | None = False  # head + log-prob a chunk of positions at a time, never the
    # whole (rows, completion, vocab) logits (falls back to the logits with an adapted head or FSDP)
    sdpa: str = "auto"  # the SDPA kernel tried first: auto (torch's order; on Hopper torch 2.11 puts
    # cuDNN first) | flash | cudnn | efficient | math (the others stay as fallbacks)
    # FSDP only: false keeps each layer's weights, all-gathered at its first forward of an optimizer step,
    # until that step's last backward (one all-gather per layer per step instead of one per forward and one
    # per backward of every micro-batch), at the memory of the full weights in the compute dtype
    fsdp_reshard_after_forward: bool = True
    # FSDP only: each layer's forward starts the all-gathers of the next this many layers before its own
    # compute (its backward those of the previous as many), so they overlap that compute even when the host
    # does not run ahead of the GPU; 0 leaves FSDP2's defaults (implicit in forward, one layer in backward)
    fsdp_prefetch: int = 0
    # FSDP only: about this many parameters per FSDP unit: the decoder layers are cut into floor(their
    # parameters / this) contiguous units (pods.distributed.unit_plan); 0 = each layer its own unit. Every unit
    # costs host time per forward and backward whatever its size, so small layers in many units leave the GPU
    # waiting; larger units hold more gathered weights at once. 1e8: 3 units at 0.5B (0.96 weak efficiency
    # from 1 to 4 H200s, against 0.86 with a unit per layer: results/scaling/h200x4/), one per layer at 7B
    fsdp_unit_params: int = 100_000_000

    def check(self) -> None:
        at_least("update.micro_batch_size", self.micro_batch_size, 1)
        at_least("update.fsdp_prefetch", self.fsdp_prefetch, 0, " (0 = FSDP2's implicit prefetching)")
        at_least(
            "update.fsdp_unit_params", self.fsdp_unit_params, 0, " (0 = each decoder layer its own unit)"
        )
        at_least("update.micro_batch_tokens", self.micro_batch_tokens, 0, " (0 = rows only)")
        for key in ("width_bucket", "row_bucket"):  # null: settled by the device at start
            if getattr(self, key) is not None:
                at_least(f"update.{key}", getattr(self, key), 0, " (0 = off, null = the device decides)")
        choice("update.sdpa", self.sdpa, ["auto", "flash", "cudnn", "efficient", "math"])

    def settled(self) -> bool:
        """Whether the layout fields hardware=auto leaves null have been set for a device."""
        return None not in (self.width_bucket, self.row_bucket, self.fused_logprobs)


@dataclass(frozen=True)
class SamplingConfig:
    """How rollouts are sampled, read by the rollout stage and by eval (which samples at eval.temperature,
    greedy by default, with the same top_p and top_k)."""

    temperature: float = II("model.recipe.temperature")  # the model's own (model.recipe) unless set here
    top_p: float = 1.0
    top_k: int = 0  # 0 = off

    def check(self) -> None:
        positive(
            "sampling.temperature", self.temperature, note=" (0 = greedy: all n rollouts would be equal)"
        )
        interval("sampling.top_p", self.top_p, 0, 1, "(]")
        at_least("sampling.top_k", self.top_k, 0, " (0 = off)")


@dataclass(frozen=True)
class RolloutConfig:
    """The rollout backend; its own knobs sit in its section (`rollout.hf.*`: pods/rollout/hf.py, HFSettings;
    `rollout.vllm.*`: pods/rollout/vllm.py, VLLMSettings)."""

    name: str = "hf"  # a name in pods.rollout.BACKENDS: hf (transformers generate) | vllm
    # sequences per generate call (prompts x n are chunked to it): auto = on a GPU as many as fit its memory
    # (pods/rollout/sizing.py: prompts x n in one call whenever they fit), on a CPU 256 | a number
    batch_size: Any = "auto"
    memory_fraction: float = 0.9  # auto: share of the card this run's weights, state and rollout may take (as
    # vLLM's gpu_memory_utilization; several runs on one GPU: about 0.9 / runs)
    sections: dict[str, Any] = field(default_factory=dict)  # backend name -> its own settings

    def own(self) -> Any:
        """The chosen backend's settings (its registry entry's dataclass), or None."""
        return self.sections.get(self.name)

    def check(self) -> None:
        # rollout.name is checked against the backend registry in pods.components.resolve
        rows_or_auto("rollout.batch_size", self.batch_size)
        interval("rollout.memory_fraction", self.memory_fraction, 0, 1, "(]")


@dataclass(frozen=True)
class LoggerConfig:
    backend: str = "none"  # wandb | none (metrics.jsonl is always written)
    project: str = "pods"
    entity: str | None = None
    group: str | None = None  # W&B group; sweeps set it to the sweep name
    mode: str = "auto"  # auto (online if logged in and reachable, else offline) | online | offline
    log_completions: int = 2  # completions printed to the log per eval (0 = none)

    def check(self) -> None:
        choice("logger.backend", self.backend, ["wandb", "none"])
        choice("logger.mode", self.mode, ["auto", "online", "offline", "disabled"])
        at_least("logger.log_completions", self.log_completions, 0)


@dataclass(frozen=True)
class AlgoConfig:
    prompts_per_step: int = II("model.recipe.prompts_per_step")  # prompts per optimizer step
    epsilon: float = 0.2  # PPO clip range (low)
    epsilon_high: float | None = None  # upper clip range (None = epsilon)
    beta: float = 0.0  # KL weight to the reference policy (paper: 0)
    mu: int = 1  # policy-gradient iterations per batch of rollouts
    loss_agg: str | None = None  # the old spelling of loss.name (token | sequence), read as it

    def check(self) -> None:
        at_least("algo.prompts_per_step", self.prompts_per_step, 1)
        interval(
            "algo.epsilon", self.epsilon, 0, 1, "()", " (the PPO clip range: ratios in [1-eps, 1+eps_high])"
        )
        if self.epsilon_high is not None:
            positive("algo.epsilon_high", self.epsilon_high, note=" (upper clip range; null = algo.epsilon)")
        positive("algo.beta", self.beta, allow_zero=True)
        at_least("algo.mu", self.mu, 1)


@dataclass(frozen=True)
class OptimConfig:
    lr: float = II("model.recipe.lr")  # the model's own (model.recipe) unless set here
    betas: list[float] = field(default_factory=lambda: [0.9, 0.99])
    weight_decay: float = II("model.recipe.weight_decay")
    grad_clip: float = II("model.recipe.grad_clip")  # max grad norm (0 = off)
    warmup_ratio: float = 0.0  # share of max_steps (x algo.mu) warmed up linearly from 0
    # Optimizer steps of linear warm-up, instead of warmup_ratio: a run bounded by max_train_time has no
    # meaningful max_steps to take a share of.
    warmup_steps: int = 0
    schedule: str = "constant"  # constant | cosine

    def check(self) -> None:
        positive("optim.lr", self.lr)
        positive("optim.weight_decay", self.weight_decay, allow_zero=True)
        positive("optim.grad_clip", self.grad_clip, allow_zero=True, note=" (0 = off)")
        choice("optim.schedule", self.schedule, ["constant", "cosine"])
        if len(self.betas) != 2 or not all(isinstance(b, (int, float)) and 0 <= b < 1 for b in self.betas):
            raise ConfigError(f"optim.betas={list(self.betas)} must be two numbers in [0, 1)")
        interval("optim.warmup_ratio", self.warmup_ratio, 0, 1, "[)")
        at_least("optim.warmup_steps", self.warmup_steps, 0)
        if self.warmup_steps and self.warmup_ratio:
            raise ConfigError("set optim.warmup_steps or optim.warmup_ratio, not both")


@dataclass(frozen=True)
class EvalConfig:
    every_steps: int = 0  # 0 = off
    every_seconds: float = 0.0  # training-clock seconds between evals (0 = off)
    at_start: bool = True
    at_end: bool = True
    num_samples: int = 1  # samples per question; accuracy is their mean
    temperature: float = 0.0  # 0 = greedy
    # sequences per generate call: auto = the rollout's rows per call (rollout.batch_size) | a number
    batch_size: Any = "auto"

    def check(self) -> None:
        at_least("eval.every_steps", self.every_steps, 0, " (0 = off)")
        positive("eval.every_seconds", self.every_seconds, allow_zero=True, note=" (0 = off)")
        at_least("eval.num_samples", self.num_samples, 1)
        positive("eval.temperature", self.temperature, allow_zero=True, note=" (0 = greedy)")
        rows_or_auto("eval.batch_size", self.batch_size)


@dataclass(frozen=True)
class CheckpointConfig:
    """When a run saves (pods/signals.py, README "What a run writes"): every 30 minutes of training clock (the
    paper's runs: a crash loses at most that), at the end, and at the step boundary after Ctrl-C or SIGTERM
    (or Slurm's time-limit signal). checkpoint.every_steps adds a step period; 0 turns a period off."""

    every_steps: int = 0  # 0 = off
    every_seconds: float = 1800.0  # training-clock seconds between checkpoints (0 = off; the paper: 1800)
    keep_last: int = 2
    save_final: bool = True
    # seconds from a stop signal to exit (pods/stopping.py): inside Slurm's and Kubernetes' 30 s grace
    stop_deadline_s: float = 20.0

    def check(self) -> None:
        at_least("checkpoint.every_steps", self.every_steps, 0, " (0 = off)")
        positive(
            "checkpoint.stop_deadline_s", self.stop_deadline_s, note=" (keep it below the scheduler's grace)"
        )
        positive("checkpoint.every_seconds", self.every_seconds, allow_zero=True, note=" (0 = off)")
        at_least("checkpoint.keep_last", self.keep_last, 1, " (the newest checkpoint is always kept)")


@dataclass(frozen=True)
class TrainConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    dataset: DatasetConfig = field(default_factory=DatasetConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    prefilter: PrefilterConfig = field(default_factory=PrefilterConfig)
    dynamic_sampling: DynamicSamplingConfig = field(default_factory=DynamicSamplingConfig)
    selector: SelectorConfig = field(default_factory=SelectorConfig)
    advantage: AdvantageConfig = field(default_factory=AdvantageConfig)
    loss: LossConfig = field(default_factory=LossConfig)
    hardware: HardwareConfig = field(default_factory=HardwareConfig)
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    logger: LoggerConfig = field(default_factory=LoggerConfig)
    algo: AlgoConfig = field(default_factory=AlgoConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    update: UpdateConfig = field(default_factory=UpdateConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    seed: int = 0
    max_steps: int = 100
    max_train_time: float = 0.0  # training-clock budget in seconds (0 = none)
    resume: bool = False  # continue from the newest checkpoint in run_dir
    # let a resume change how the lr schedule is computed (max_steps under optim.schedule=cosine or
    # optim.warmup_ratio); refused otherwise, as the lr would follow neither run's schedule (history.jsonl
    # records the change)
    resume_allow_schedule_change: bool = False
    # let a resume train on other data than its checkpoint's (a digest of the train prompts and answers, saved
    # in every checkpoint: an edited or regenerated file); refused otherwise (history.jsonl records the change)
    resume_allow_dataset_change: bool = False
    max_empty_steps: int = 3  # steps in a row that roll out nothing (no prompt kept) that stop the run
    run_dir: str = "outputs/run"  # set by Hydra to its output dir
    name: str | None = None  # run name; default: pods.naming.run_name (the stages, n, m and seed)
    experiment: str | None = None  # name of the experiment preset, if any
    plugins: list[str] = field(default_factory=list)  # modules imported before the config is checked, so
    # the selectors, rewards, prefilters and backends they register are valid names (README: "Plugins")

    def groups(self) -> list:
        return [getattr(self, f) for f in self.__dataclass_fields__ if hasattr(getattr(self, f), "check")]

    def check(self) -> None:
        """The top-level fields and every group's own checks (each group holds what one stage reads, so no check
        here relates two groups; a component's relation to the other groups is its own: Backend.check)."""
        at_least("seed", self.seed, 0, " (numpy seeds are non-negative)")
        at_least("max_steps", self.max_steps, 1)
        positive("max_train_time", self.max_train_time, allow_zero=True, note=" (0 = no time limit)")
        at_least("max_empty_steps", self.max_empty_steps, 1)
        for group in self.groups():
            group.check()
        # the registered names, the components' own settings and a backend's limits (FSDP support, a
        # compiled rollout with a 4-bit base) are checked by pods.components.resolve, where the registries
        # (and any plugin's entries) are loaded


# Groups whose components may bring settings of their own, each in a section named after the component
# (`prefilter.greso.p_init`, `rollout.vllm.sleep_mode`): keys beyond the group's fields pass composition and
# are typed and checked, with the registries loaded, by pods.components.resolve.
OPEN_GROUPS = ("selector", "prefilter", "reward", "rollout", "advantage", "loss")


def schema() -> Any:
    """TrainConfig as Hydra composes on it: typed, closed (an unknown key fails), but for OPEN_GROUPS, and
    writable while it is composed (the dataclasses are frozen; the typed settings made from it are)."""
    node = OmegaConf.structured(TrainConfig)
    _writable(node)
    for g in OPEN_GROUPS:
        OmegaConf.set_struct(node[g], False)
    return node


def _writable(node: Any) -> None:
    """Clear the read-only flag OmegaConf puts on the nodes of a frozen dataclass, the whole tree down."""
    OmegaConf.set_readonly(node, False)
    for key in node.keys() if OmegaConf.is_dict(node) else range(len(node)):
        child = node._get_node(key)
        if OmegaConf.is_config(child):
            _writable(child)


def register_schema() -> None:
    from pods.naming import register_resolver

    ConfigStore.instance().store(name="pods_schema", node=schema())
    register_resolver()  # ${pods.kept:...}, ${pods.sweep_stamp:...} (pods/naming.py)


def settings(cfg: Any) -> TrainConfig:
    """The composed config as typed dataclasses, interpolations resolved (each stage takes its group); a
    component section (`prefilter.greso: {...}`) goes to its group's `sections`, still untyped (typed by
    pods.components.resolve). Typed settings are returned as they are."""
    if isinstance(cfg, TrainConfig):
        return cfg
    try:
        if not (OmegaConf.is_config(cfg) and OmegaConf.get_type(cfg) is TrainConfig):
            cfg = OmegaConf.merge(schema(), cfg)  # a plain container (an old spelling mapped) is typed here
    except OmegaConfBaseException as e:  # a key added with + (`+optim.lrr=1`) that the schema lacks
        raise ConfigError(schema_error(e)) from None
    data = OmegaConf.to_container(cfg, resolve=True)
    for g in OPEN_GROUPS:
        own = TrainConfig.__dataclass_fields__[g].default_factory.__dataclass_fields__
        node = data[g]
        node["sections"] = {
            **node.get("sections", {}),
            **{k: node.pop(k) for k in list(node) if k not in own},
        }
    try:
        return OmegaConf.to_object(OmegaConf.merge(schema(), data))
    except OmegaConfBaseException as e:  # a key added with + (`+optim.lrr=1`) that the schema lacks
        raise ConfigError(schema_error(e)) from None


def schema_error(e: Exception) -> str:
    """One line for a key or value the schema refuses: the key, what is wrong, the keys that are there
    (the closest first)."""
    import difflib

    key = str(getattr(e, "full_key", "") or "")
    msg = str(getattr(e, "msg", "") or e).strip().splitlines()[0]
    parent, _, leaf = key.rpartition(".")
    node = OmegaConf.select(schema(), parent) if parent else schema()
    if isinstance(e, (ConfigKeyError, ConfigAttributeError)) and OmegaConf.is_dict(node):
        keys = [str(k) for k in node]
        close = difflib.get_close_matches(leaf, keys, n=1)
        hint = f"; did you mean {parent + '.' if parent else ''}{close[0]}?" if close else ""
        return f"{key} is not a key of {parent or 'the config'}{hint} (its keys: {', '.join(keys)})"
    return f"{key}: {msg}" if key else msg


def as_container(c: TrainConfig) -> dict:
    """The typed settings as plain containers in the layout a config is written in (sections back under
    their group): what a run saves as config.yaml."""
    data = OmegaConf.to_container(OmegaConf.structured(c))
    for g in OPEN_GROUPS:
        data[g].update(data[g].pop("sections"))
    return data


def validate(cfg: Any) -> TrainConfig:
    """Check every field's range and choices and the relations between groups; raise ConfigError with one
    line naming the key, the bad value and what is allowed. Runs before anything heavy loads. The names of
    components and their own settings are checked next, by pods.components.resolve (preflight)."""
    typed = settings(cfg)
    typed.check()
    return typed
