"""AdamW and its learning-rate schedule (warm-up, then constant or cosine)."""

from __future__ import annotations

import torch
from transformers import get_constant_schedule_with_warmup, get_cosine_schedule_with_warmup


def build_optimizer(
    model, o, total: int, device
) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler]:
    """AdamW over the trainable parameters from `o` (pods.config.OptimConfig); `total` optimizer steps (the
    cosine schedule's length, the base of `o.warmup_ratio`; `o.warmup_steps` counts optimizer steps itself)."""
    params = [p for p in model.parameters() if p.requires_grad]
    fused = device.type == "cuda"
    opt = torch.optim.AdamW(params, lr=o.lr, betas=tuple(o.betas), weight_decay=o.weight_decay, fused=fused)
    warmup = o.warmup_steps or int(o.warmup_ratio * total)
    if o.schedule == "cosine":
        sched = get_cosine_schedule_with_warmup(opt, warmup, total)
    else:
        sched = get_constant_schedule_with_warmup(opt, warmup)
    return opt, sched
