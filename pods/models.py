"""Load the policy (and tokenizer) from a local directory or the hub; LoRA through peft when asked."""

from __future__ import annotations

import contextlib
import copy
import importlib.util
import json
import os
import zipfile
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from pods.config import HardwareConfig, ModelConfig
from pods.errors import ConfigError
from pods.hub import OfflineError, offline_message, prepare_hub_access

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def resolve_device(hardware: HardwareConfig) -> torch.device:
    want = hardware.device
    if want == "cuda" or (want == "auto" and torch.cuda.is_available()):
        if not torch.cuda.is_available():
            raise ConfigError(
                f"hardware={hardware.name} needs a CUDA GPU but none is visible; "
                "use hardware=cpu (or hardware=auto)"
            )
        local_rank = int(os.environ.get("LOCAL_RANK", 0))
        return torch.device("cuda", local_rank)
    return torch.device("cpu")


def canonical_device(device) -> torch.device:
    """`device` with its index: "cuda" is the current CUDA device (torch.device("cuda") != "cuda:0", so a
    tensor's device would never equal it)."""
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        return torch.device("cuda", torch.cuda.current_device())
    return device


def set_cuda_allocator(hardware: HardwareConfig, device: torch.device) -> None:
    """hardware.expandable_segments on a GPU: the caching allocator maps more memory into a segment instead of
    adding segments (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True), torch's remedy for churn and
    fragmentation when tensor shapes vary. Called before the weights load, so every segment is expandable
    (torch allows it at any time: later it applies to new segments only)."""
    if device.type != "cuda" or not hardware.expandable_segments:
        return
    # torch 2.13 moved the setter to torch._C and deprecated torch.cuda.memory's
    setter = getattr(torch._C, "_accelerator_setAllocatorSettings", None)
    (setter or torch.cuda.memory._set_allocator_settings)("expandable_segments:True")


def resolve_dtype(model: ModelConfig, hardware: HardwareConfig, device: torch.device) -> torch.dtype:
    """The compute dtype: model.dtype, or the hardware profile's when it is auto; float32 on a CPU."""
    name = model.dtype if model.dtype != "auto" else hardware.dtype
    if device.type == "cpu" and name != "float32":
        name = "float32"  # half precision on CPU is slow and numerically poor for training
    return DTYPES[name]


def _is_local(path: str) -> bool:
    """A directory, not a hub id: hub ids are `name` or `org/name`, so a deeper path is a (missing) folder."""
    return Path(path).exists() or path.startswith(("/", "./", "../", "~")) or path.count("/") > 1


def check_model_source(model: ModelConfig, hardware: HardwareConfig) -> None:
    """Fail before anything heavy if the model can be neither found locally nor fetched."""
    path = model.path
    if _is_local(path):
        if not (Path(path) / "config.json").exists():
            raise ConfigError(
                f"model.path={path!r}: no config.json there (a saved transformers model directory)"
            )
        problem = local_model_problem(Path(path), model.trust_remote_code)
        if problem:
            raise ConfigError(
                f"model.path={path!r}: {problem}; save the model again (save_pretrained) or fix the path"
            )
        return
    prepare_hub_access()
    from huggingface_hub import try_to_load_from_cache

    cached = try_to_load_from_cache(path, "config.json")
    if os.environ.get("HF_HUB_OFFLINE") == "1" and not isinstance(cached, str):
        raise OfflineError(
            offline_message(
                "model",
                path,
                "model.path",
                "Download it on a machine with network (huggingface-cli download), "
                "or point model.path at a local directory.",
            )
        )
    if hardware.load_in_4bit and importlib.util.find_spec("bitsandbytes") is None:
        raise ConfigError("hardware.load_in_4bit=true needs bitsandbytes: pip install bitsandbytes")


WEIGHTS = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)


def local_model_problem(path: Path, trust_remote_code: bool = False) -> str | None:
    """What makes a local model directory unloadable, found without loading it, or None: a JSON file that
    does not parse (config, tokenizer, index), a config transformers cannot read, no weights file, a
    weights file (or a shard an index names) that is missing or truncated."""
    from transformers import AutoConfig

    for f in sorted(path.glob("*.json")):
        try:
            json.loads(f.read_bytes())
        except (OSError, ValueError, RecursionError) as e:
            return f"{f.name} is not valid JSON ({type(e).__name__}: {str(e)[:80]}; truncated?)"
    try:
        AutoConfig.from_pretrained(path, trust_remote_code=trust_remote_code)
    except Exception as e:  # noqa: BLE001 - transformers raises several types for a config it cannot read
        first = str(e).strip().splitlines()[0][:200] if str(e).strip() else ""
        return f"config.json cannot be read by transformers ({type(e).__name__}: {first})"
    found = [w for w in WEIGHTS if (path / w).exists()]
    if not found:
        return f"no weights file ({', '.join(WEIGHTS)})"
    name = found[0]
    if name.endswith(".index.json"):
        index = json.loads((path / name).read_text())
        shards = sorted(set((index.get("weight_map") or {}).values())) if isinstance(index, dict) else []
        if not shards:
            return f"{name} names no weight shards"
    else:
        shards = [name]
    for shard in shards:
        problem = weights_file_problem(path / shard)
        if problem:
            return problem
    return None


def weights_file_problem(f: Path) -> str | None:
    """A missing or truncated weights file: safetensors by its header (8-byte length, JSON, the tensors'
    offsets: the file must be exactly as long as they say), a torch zip by its central directory."""
    if not f.is_file():
        return f"{f.name} is missing"
    size = f.stat().st_size
    if f.suffix == ".safetensors":
        with open(f, "rb") as fh:
            head = fh.read(8)
            n = int.from_bytes(head, "little") if len(head) == 8 else -1
            if n < 2 or 8 + n > size:
                return f"{f.name} is truncated or not safetensors ({size} bytes)"
            try:
                header = json.loads(fh.read(n))
                end = max(
                    (int(v["data_offsets"][1]) for k, v in header.items() if k != "__metadata__"), default=0
                )
            except (ValueError, KeyError, TypeError, IndexError, AttributeError):
                return f"{f.name} has an unreadable header (truncated or not safetensors)"
        if size != 8 + n + end:
            return f"{f.name} is {size} bytes, its header says {8 + n + end} (truncated or damaged)"
        return None
    with open(f, "rb") as fh:
        zipped = fh.read(2) == b"PK"
    if size == 0 or (zipped and not zipfile.is_zipfile(f)):
        return f"{f.name} is truncated ({size} bytes)"
    return None


def load_tokenizer(model: ModelConfig):
    try:
        tok = AutoTokenizer.from_pretrained(model.path, trust_remote_code=model.trust_remote_code)
    except (OfflineError, ConfigError):
        raise
    except Exception as e:  # noqa: BLE001 - missing or broken tokenizer files: one line, before the model loads
        first = str(e).strip().splitlines()[0][:200] if str(e).strip() else ""
        raise ConfigError(
            f"model.path={model.path!r}: its tokenizer cannot be loaded ({type(e).__name__}: {first})"
        ) from None
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    tok.padding_side = "left"
    return tok


def autocast(dtype: torch.dtype, device: torch.device):
    """Mixed precision for every forward pass: weights that train stay in float32 (an AdamW step of
    lr 5e-6 is far below bf16's resolution), matmuls run in the compute dtype (resolve_dtype)."""
    if device.type != "cuda" or dtype == torch.float32:
        return contextlib.nullcontext()
    return torch.autocast("cuda", dtype=dtype)


def load_policy(
    model_cfg: ModelConfig,
    hardware: HardwareConfig,
    device: torch.device,
    reference: bool = False,
    gradient_checkpointing: bool = False,
):
    """Returns (model, reference model or None). A float32 copy for the reference is built only when
    `reference` (algo.beta > 0) and without LoRA (there the reference is the base: reference_policy).
    `gradient_checkpointing`: the update's (update.gradient_checkpointing).

    Full fine-tuning keeps float32 master weights (computing in the profile's dtype under autocast);
    with LoRA the frozen base is stored in the compute dtype and only the adapter is float32.
    """
    dtype = resolve_dtype(model_cfg, hardware, device)
    kwargs = dict(
        dtype=dtype if hardware.lora else torch.float32,
        attn_implementation=hardware.attn_implementation,
        trust_remote_code=model_cfg.trust_remote_code,
    )
    if hardware.load_in_4bit:
        from transformers import BitsAndBytesConfig

        kwargs["quantization_config"] = BitsAndBytesConfig(
            load_in_4bit=True, bnb_4bit_compute_dtype=dtype, bnb_4bit_quant_type="nf4"
        )
    model = AutoModelForCausalLM.from_pretrained(model_cfg.path, **kwargs).to(device)
    ref = None
    if reference and not hardware.lora:
        ref = copy.deepcopy(model).eval().requires_grad_(False)
    if hardware.lora:
        from peft import LoraConfig, get_peft_model

        lc = model_cfg.lora
        model = get_peft_model(
            model,
            LoraConfig(
                r=lc.r,
                lora_alpha=lc.alpha,
                lora_dropout=lc.dropout,
                target_modules=list(lc.targets),
                task_type="CAUSAL_LM",
            ),
        )
        if device.type == "cuda" and dtype != torch.float32:  # every forward runs under autocast()
            skip_adapter_input_cast(model)
    if gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if hardware.lora:
            model.enable_input_require_grads()
    model.train()
    return model, ref


def skip_adapter_input_cast(model) -> int:
    """Switch off peft's cast of each adapted layer's input to the adapter's float32 (returns how many layers).

    Only for a model that always runs under autocast() (LoRA on a GPU in bf16): there the adapter's matmuls
    run in bf16 whatever the input, so the cast only makes a float32 copy of every adapted layer's input and
    keeps it for the backward (0.42 GiB at the 3B shape's peak, issue 18). Autocast rounds that copy back to
    the very same bf16 values, so outputs and gradients are unchanged (tests/test_models.py)."""
    layers = [m for m in model.modules() if hasattr(m, "_cast_input_dtype")]  # peft's tuner layers
    for m in layers:
        m.cast_input_dtype_enabled = False  # read by peft >= 0.15; older versions keep casting
    return len(layers)


class AdapterDisabledRef:
    """With LoRA, the reference policy is the base model: the same module with the adapter switched off."""

    def __init__(self, model):
        self.model = model

    def __call__(self, *args, **kwargs):
        with self.model.disable_adapter():
            return self.model(*args, **kwargs)


def reference_policy(model, ref, beta: float, lora: bool):
    """What the KL term (algo.beta > 0) compares with: the base under LoRA, else load_policy's copy."""
    if beta <= 0:
        return None
    return AdapterDisabledRef(model) if lora else ref
