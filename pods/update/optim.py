"""AdamW and its learning-rate schedule (warm-up, then constant or cosine), and what a resume may change of it."""

from __future__ import annotations

import logging

import torch
from transformers import get_constant_schedule_with_warmup, get_cosine_schedule_with_warmup

from pods.errors import ConfigError
from pods.history import flatten

log = logging.getLogger("pods")
# the keys the schedule is computed from (pods/history.py refuses a change of all but max_steps already)
SCHEDULE_KEYS = ("max_steps", "algo.mu", "optim.schedule", "optim.warmup_steps", "optim.warmup_ratio")


def schedule_shape(schedule: str, warmup_steps: int, warmup_ratio: float, total: int) -> dict:
    """What the schedule is computed from, in optimizer steps: its kind, its warm-up, and its length (cosine
    only: a constant schedule does not depend on it). `total`: max_steps x algo.mu.

    >>> schedule_shape("cosine", 0, 0.1, 40)
    {'schedule': 'cosine', 'warmup': 4, 'length': 40}
    """
    warmup = warmup_steps or int(warmup_ratio * total)
    return {"schedule": schedule, "warmup": warmup, "length": total if schedule == "cosine" else None}


def build_optimizer(
    model, o, total: int, device
) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler]:
    """AdamW over the trainable parameters from `o` (pods.config.OptimConfig); `total` optimizer steps (the
    cosine schedule's length, the base of `o.warmup_ratio`; `o.warmup_steps` counts optimizer steps itself)."""
    params = [p for p in model.parameters() if p.requires_grad]
    fused = device.type == "cuda"
    opt = torch.optim.AdamW(params, lr=o.lr, betas=tuple(o.betas), weight_decay=o.weight_decay, fused=fused)
    warmup = schedule_shape(o.schedule, o.warmup_steps, o.warmup_ratio, total)["warmup"]
    if o.schedule == "cosine":
        sched = get_cosine_schedule_with_warmup(opt, warmup, total)
    else:
        sched = get_constant_schedule_with_warmup(opt, warmup)
    return opt, sched


def warn_long_warmup(o, max_steps: int, mu: int, max_train_time: float) -> str | None:
    """One warning line (logged, and returned) when optim.warmup_steps outlasts a run that max_steps bounds
    (max_train_time=0): the lr would never reach optim.lr. `o`: pods.config.OptimConfig."""
    total = max_steps * mu
    if max_train_time > 0 or o.warmup_steps <= total:
        return None
    reached = max(total - 1, 0) / o.warmup_steps  # the linear warm-up's factor at the last optimizer step
    msg = (
        f"optim.warmup_steps={o.warmup_steps} is longer than the run's {total} optimizer steps (max_steps="
        f"{max_steps} x algo.mu={mu}): the lr reaches only {reached:.0%} of optim.lr={o.lr:g} by the last "
        "step; lower optim.warmup_steps, or use optim.warmup_ratio (a share of the run)"
    )
    log.warning(msg)
    return msg


def _shape_of(config: dict, max_steps: int) -> dict:
    """schedule_shape of a config as saved (a checkpoint of an older pods may lack a key: its default)."""
    o, mu = config.get("optim", {}), config.get("algo", {}).get("mu", 1)
    total = config.get("max_steps", max_steps) * mu
    return schedule_shape(
        o.get("schedule", "constant"), o.get("warmup_steps", 0), o.get("warmup_ratio", 0.0), total
    )


def _show(shape: dict) -> str:
    length = f" over {shape['length']} optimizer steps" if shape["length"] is not None else ""
    return f"{shape['schedule']}{length}, warm-up {shape['warmup']}"


def check_schedule_kept(saved: dict, now: dict, checkpoint: str) -> dict[str, tuple]:
    """Refuse (ConfigError, one line) a resume whose config computes the lr schedule differently from the
    checkpoint's (max_steps under cosine or warmup_ratio: the restored step would land on another curve, e.g.
    back up a cosine that had decayed to 0), unless now's resume_allow_schedule_change; returns
    {"lr_schedule": (old, new)} for history.jsonl when it changed, else {}. (max_train_time does not enter the
    schedule: a run bounded by it has the schedule of its max_steps.)"""
    old, new = _shape_of(saved, now["max_steps"]), _shape_of(now, now["max_steps"])
    if old == new:
        return {}
    if not now.get("resume_allow_schedule_change", False):
        a, b = flatten(saved), flatten(now)
        keys = [k for k in SCHEDULE_KEYS if k in b and a.get(k, b[k]) != b[k]]
        shown = ", ".join(f"{k}={b[k]} (checkpoint {checkpoint}: {a[k]})" for k in keys)
        back = " ".join(f"{k}={a[k]}" for k in keys)
        raise ConfigError(
            f"resume=true: {shown} changes the learning-rate schedule it resumes ({_show(old)} -> {_show(new)}): "
            f"the lr would follow neither run's schedule. Resume with {back}, or set "
            "resume_allow_schedule_change=true to go on under the new one (history.jsonl records it)"
        )
    return {"lr_schedule": (_show(old), _show(new))}
