"""optim.warmup_steps: a linear warm-up over a fixed number of optimizer steps, for runs bounded by
max_train_time (whose max_steps is only a cap, so warmup_ratio of it means nothing)."""

import pytest
import torch

from pods.config import OptimConfig
from pods.update.optim import build_optimizer


def lrs(o: OptimConfig, total: int, steps: int) -> list[float]:
    model = torch.nn.Linear(2, 1)
    opt, sched = build_optimizer(model, o, total, torch.device("cpu"))
    out = []
    for _ in range(steps):
        out.append(sched.get_last_lr()[0])
        opt.step()
        sched.step()
    return out


def test_warmup_steps_ramp_linearly_then_hold():
    o = OptimConfig(lr=1e-3, weight_decay=0.0, grad_clip=1.0, warmup_steps=4)
    assert lrs(o, total=100_000, steps=7) == pytest.approx([0, 2.5e-4, 5e-4, 7.5e-4, 1e-3, 1e-3, 1e-3])


def test_warmup_steps_do_not_depend_on_max_steps():
    o = OptimConfig(lr=1e-3, weight_decay=0.0, grad_clip=1.0, warmup_steps=4)
    assert lrs(o, total=10, steps=6) == lrs(o, total=100_000, steps=6)


def test_warmup_ratio_still_takes_its_share_of_total():
    o = OptimConfig(lr=1e-3, weight_decay=0.0, grad_clip=1.0, warmup_ratio=0.1)
    assert lrs(o, total=40, steps=5) == pytest.approx([0, 2.5e-4, 5e-4, 7.5e-4, 1e-3])


def test_no_warmup_is_constant():
    o = OptimConfig(lr=1e-3, weight_decay=0.0, grad_clip=1.0)
    assert lrs(o, total=100, steps=3) == pytest.approx([1e-3] * 3)


def test_hydra_override_reaches_the_config(make_cfg):
    cfg = make_cfg("optim.warmup_steps=100", "optim.lr=4e-5")
    assert cfg.optim.warmup_steps == 100
