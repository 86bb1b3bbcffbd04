"""Rollout: generate n completions per prompt. Backends: hf (transformers generate) and vllm."""

from __future__ import annotations

from pods.rollout.hf import HFGenerator


def build_generator(cfg, model, tokenizer, device):
    """Pick the rollout backend named by rollout.backend."""
    if cfg.rollout.backend == "hf":
        return HFGenerator(model, tokenizer, device, cfg.rollout.batch_size, cfg.model.max_completion_len)
    if cfg.rollout.backend == "vllm":
        from pods.rollout.vllm import VLLMGenerator

        return VLLMGenerator(cfg, model, tokenizer, device)
    raise ValueError(f"rollout.backend={cfg.rollout.backend!r}; allowed: hf, vllm")


__all__ = ["HFGenerator", "build_generator"]
