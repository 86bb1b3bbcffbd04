"""What a run keeps on the GPU, and `hardware=auto`'s choice between a full fine-tune and LoRA.

The choice is made in preflight, before any weights load, from the model's architecture config (its
config.json: a local directory's, the shipped copy for a hub preset in pods/assets/hub_configs/, or the
hub's) and the card's total memory. It counts the weight-sized state pods keeps, as pods/models.py and
pods/update/optim.py build it:

    full fine-tune: float32 master weights 4 + float32 gradients 4 + AdamW's two float32 moments 8
                    = 16 bytes a parameter, + a float32 reference copy 4 when algo.beta > 0
    LoRA:           the frozen base in the compute dtype (2 bytes in bf16; 0.5 in 4 bits)
                    + 16 bytes per adapter parameter (the reference is the base: no copy)
    both:           the compiled rollout's generation copy in the compute dtype (2 bytes a parameter), except
                    under LoRA with rollout.hf.share_weights and no 4-bit base: it decodes from the policy's base

That state may take at most STATE_SHARE of the card: activations, logits, the KV cache and CUDA's own
memory need the rest. (Measured: the 0.5B full fine-tune step, n=16, 512 tokens, peaked at 27.4 GiB on an
H200, results/bench_trl_cuda.md; the state counted here is 8.3 GiB of that.)
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from pods import ASSETS
from pods.config import AlgoConfig, TrainConfig, UpdateConfig
from pods.errors import ConfigError

if TYPE_CHECKING:
    from pods.rollout import RolloutSettings

log = logging.getLogger("pods")

GIB = 2**30
STATE_SHARE = 0.6  # of the card's memory, for weight-sized state; the rest is activations and the KV cache
HUB_CONFIGS = ASSETS / "hub_configs"  # architecture fields of the hub presets' config.json, by hub id
BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


def card_memory(device: torch.device) -> int | None:
    """Total memory of the device's GPU in bytes; None for a CPU."""
    if device.type != "cuda":
        return None
    return torch.cuda.get_device_properties(device).total_memory


def architecture_config(model_path: str):
    """The model's transformers config, without weights: a local directory's config.json, the shipped copy
    for a hub preset, else the hub's (cache or network). None when none can be read."""
    from transformers import AutoConfig

    local = Path(model_path) / "config.json"
    shipped = HUB_CONFIGS / f"{model_path}.json"
    for path in (local, shipped):
        if path.is_file():
            fields = json.loads(path.read_text())
            return AutoConfig.for_model(fields.pop("model_type"), **fields)
    try:
        return AutoConfig.from_pretrained(model_path)
    except Exception as e:  # noqa: BLE001 - unknown size is a warning, not a failed run
        log.warning("hardware=auto cannot read %s's config (%s): it is not sized", model_path, e)
        return None


@dataclass(frozen=True)
class ModelSize:
    params: int  # every parameter of the model (tied embeddings once)
    lora_params: int  # the LoRA adapter's parameters at model.lora (r x (in + out) per adapted linear)


def model_size(hf_config, lora_r: int, lora_targets) -> ModelSize:
    """Count parameters by building the model on the meta device: no memory, exact for any architecture."""
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(hf_config)
    params = sum(p.numel() for p in model.parameters())
    targets = set(lora_targets)
    lora = sum(
        lora_r * (m.in_features + m.out_features)
        for name, m in model.named_modules()
        if isinstance(m, torch.nn.Linear) and name.rsplit(".", 1)[-1] in targets
    )
    return ModelSize(params, lora)


def state_bytes(size: ModelSize, gen: RolloutSettings, beta: float, lora: bool, compiled: bool) -> int:
    """Bytes of weight-sized state a run keeps on the GPU (see the module docstring): the model and hardware
    it trains with (gen.model, gen.hardware), the rollout's generation copy (gen.rollout) and the reference
    copy that algo.beta > 0 asks for."""
    hw = gen.hardware
    compute = BYTES[gen.model.dtype if gen.model.dtype != "auto" else hw.dtype]
    copy = size.params * compute if compiled else 0
    if not lora:
        ref = size.params * 4 if beta > 0 else 0
        return size.params * 16 + ref + copy
    base = size.params * (0.5 if hw.load_in_4bit else compute)
    from pods.rollout.hf import hf_settings  # only the HF backend's compiled copy can share the base

    if hf_settings(gen).share_weights and not hw.load_in_4bit:
        copy = 0  # the generation copy decodes from the policy's own base (pods/rollout/gen_copy.py)
    return int(base + size.lora_params * 16 + copy)


def choose_lora(gen: RolloutSettings, algo: AlgoConfig, device: torch.device) -> bool:
    """hardware=auto on a GPU: a full fine-tune (False) if its state fits STATE_SHARE of the card, else LoRA
    (True; settle_hardware adds gradient checkpointing, as hardware=gpu_lora sets), else refuse with a hint.
    An explicit profile, a CPU or several GPUs keep what their profile says (gen.hardware.lora); a warning
    says when an explicit GPU profile will not fit. Logs the choice."""
    h, m = gen.hardware, gen.model
    card = card_memory(device)
    if card is None or h.distributed != "none":
        return h.lora  # CPU; several GPUs shard or replicate as their profile says
    from pods.rollout import backend_class

    hf_config = architecture_config(m.path)
    if hf_config is None:
        return h.lora
    size = model_size(hf_config, m.lora.r, m.lora.targets)
    backend = backend_class(gen.rollout.name)  # vllm: the engine holds its own copy, in its share of the card
    budget = card * STATE_SHARE * (1 - backend.card_share(gen))
    compiled = backend.keeps_generation_copy(gen, device)
    full, lora = (state_bytes(size, gen, algo.beta, x, compiled) for x in (False, True))
    about = (
        f"{m.name} ({size.params / 1e6:,.0f}M parameters): a full fine-tune keeps {full / GIB:.3g} GiB "
        f"(weights, gradients, AdamW state, generation copy), LoRA r={m.lora.r} {lora / GIB:.3g} GiB; "
        f"{budget / GIB:.3g} GiB of this {card / GIB:.3g} GiB card is for them"
    )
    if h.name != "auto":
        if (lora if h.lora else full) > budget:
            log.warning("hardware=%s may not fit: %s", h.name, about)
        return h.lora
    if h.lora or full <= budget:
        log.info("hardware=auto: %s: %s", "LoRA" if h.lora else "full fine-tune", about)
        return h.lora
    if lora <= budget:
        log.info("hardware=auto: LoRA with gradient checkpointing (as hardware=gpu_lora): %s", about)
        return True
    raise ConfigError(
        f"hardware=auto: neither fits: {about}. Use hardware=gpu_lora hardware.load_in_4bit=true, "
        "or hardware=fsdp over several GPUs"
    )


def settle_update_layout(update: UpdateConfig, lora: bool, device: torch.device) -> UpdateConfig:
    """The update's layout fields left null (hardware=auto) set for `device`: on a GPU what the GPU profiles
    set (width grid 16 and fused log-probs; rows padded to 8 for a full fine-tune as hardware=gpu, not for
    LoRA as hardware=gpu_lora, whose update is bound by FLOPs), on a CPU all off. Set fields are kept."""
    gpu = torch.device(device).type == "cuda"
    chosen = {
        "width_bucket": 16 if gpu else 0,
        "row_bucket": 8 if gpu and not lora else 0,
        "fused_logprobs": gpu,
    }
    unset = {k: v for k, v in chosen.items() if getattr(update, k) is None}
    return replace(update, **unset) if unset else update


def settle_hardware(c: TrainConfig, device: torch.device) -> TrainConfig:
    """hardware=auto, settled in this one place, before anything is built: a full fine-tune or LoRA, from the
    model's config and the card (choose_lora; LoRA chosen here brings gradient checkpointing), then the
    update's layout for the device (settle_update_layout). Returns the run's settings with those hardware
    and update groups."""
    from pods.rollout import RolloutSettings

    lora = choose_lora(RolloutSettings.from_config(c), c.algo, device)
    hardware, update = c.hardware, c.update
    if lora and not hardware.lora:
        hardware, update = replace(hardware, lora=True), replace(update, gradient_checkpointing=True)
    return replace(c, hardware=hardware, update=settle_update_layout(update, lora, device))


def settle_rollout(c, device):
    """The run's settings with rollout.hf's `auto` knobs decided for `device` (before the model loads; the
    model's architecture from its config.json), with one log line saying which and why."""
    from pods.rollout import RolloutSettings
    from pods.rollout.hf import HFSettings, graph_loop
    from pods.rollout.sizing import fast_decode

    hf = c.rollout.sections.get("hf")
    if not isinstance(hf, HFSettings) or "auto" not in (hf.decode_attention, hf.share_prefill):
        return c
    settings = RolloutSettings.from_config(c)
    loop = graph_loop(settings, device)
    arch = (
        architecture_config(c.model.path)
        if loop and hf.decode_attention == "auto" and device.type == "cuda"
        else None
    )
    attn, share, why = fast_decode(hf, loop, c.hardware.attn_implementation, arch, device.type)
    if c.rollout.name == "hf":
        log.info("rollout.hf: %s", why)
    sections = {**c.rollout.sections, "hf": replace(hf, decode_attention=attn, share_prefill=share)}
    return replace(c, rollout=replace(c.rollout, sections=sections))
