"""The update stage of the loop, built once: the policy (its DDP/FSDP wrapper), optimizer, scheduler and
reference model with the groups that shape the update (algo, loss, update, optim), called with each step's
kept batch. pods/update/step.py holds the update itself."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pods.batch import Rollouts
from pods.config import AlgoConfig, OptimConfig, TrainConfig, UpdateConfig
from pods.update.loss import PolicyLoss
from pods.update.optim import build_optimizer, warn_long_warmup
from pods.update.step import policy_update


@dataclass
class UpdateStage:
    model: Any  # the policy as the update runs it: its DDP wrapper, or itself
    optimizer: Any
    scheduler: Any
    algo: AlgoConfig
    layout: UpdateConfig
    optim: OptimConfig
    device: Any
    dist: Any
    ref_model: Any = None
    loss: PolicyLoss | None = None  # None: the token mean

    @classmethod
    def build(cls, c: TrainConfig, model, ref_model, device, dist) -> UpdateStage:
        """From its groups (algo, loss, update, optim): AdamW and its schedule over max_steps x algo.mu optimizer
        steps (one scheduler step each), then the policy and optimizer as the distributed setup runs them."""
        optimizer, scheduler = build_optimizer(model, c.optim, c.max_steps * c.algo.mu, device)
        if dist.is_main:
            warn_long_warmup(c.optim, c.max_steps, c.algo.mu, c.max_train_time)  # once, with the numbers
        model, optimizer = dist.prepare(model, optimizer)  # DDP wrapper or itself
        loss = PolicyLoss.build(c.loss.name, c.loss.own(), c.algo, c.model.max_completion_len)
        return cls(model, optimizer, scheduler, c.algo, c.update, c.optim, device, dist, ref_model, loss)

    def __call__(self, kept: Rollouts | None) -> dict[str, float]:
        """algo.mu optimizer steps on this rank's kept rollouts (None: it has none, and joins the collectives);
        returns update/*."""
        s = self
        return policy_update(
            s.model, kept, s.optimizer, s.scheduler, s.algo, s.layout, s.optim, s.device, s.dist, s.ref_model,
            s.loss,
        )  # fmt: skip
