"""Rollout: generate n completions per prompt. Backends: hf (transformers generate) and vllm."""

from __future__ import annotations

from pods.rollout.hf import HFGenerator


def use_compiled(cfg, device) -> bool:
    """rollout.compile: auto = on for CUDA (decoding small batches is launch-bound there), off on CPU
    (compiling costs tens of seconds; not measured faster there) and with a 4-bit base (its packed weights
    cannot be copied into the bf16 generation copy)."""
    choice = str(cfg.rollout.compile).lower()
    if choice == "auto":
        return device.type == "cuda" and not cfg.hardware.load_in_4bit
    return choice == "true"


def build_generator(cfg, model, tokenizer, device, timer=None):
    """Pick the rollout backend named by rollout.backend."""
    if cfg.rollout.backend == "hf":
        from pods.models import resolve_dtype

        return HFGenerator(
            model,
            tokenizer,
            device,
            cfg.rollout.batch_size,
            cfg.model.max_completion_len,
            compiled=use_compiled(cfg, device),
            dtype=resolve_dtype(cfg, device),
            prompt_bucket=cfg.rollout.prompt_bucket,
            max_prompt_len=cfg.model.max_prompt_len,
            timer=timer,
            share_weights=cfg.rollout.share_weights,
            size_cache_to_prompt=cfg.rollout.size_cache_to_prompt,
        )
    if cfg.rollout.backend == "vllm":
        from pods.rollout.vllm import VLLMGenerator

        return VLLMGenerator(cfg, model, tokenizer, device)
    raise ValueError(f"rollout.backend={cfg.rollout.backend!r}; allowed: hf, vllm")


__all__ = ["HFGenerator", "build_generator", "use_compiled"]
