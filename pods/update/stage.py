"""The update stage of the loop, built once: the policy (its DDP/FSDP wrapper), optimizer, scheduler and
reference model with the groups that shape the update (algo, update, optim), called with each step's kept
batch. pods/update/step.py holds the update itself."""

from __future__ import annotations

from pods.batch import Rollouts
from pods.config import AlgoConfig, OptimConfig, UpdateConfig
from pods.update.step import policy_update


class UpdateStage:
    def __init__(self, model, optimizer, scheduler, algo: AlgoConfig, layout: UpdateConfig, optim: OptimConfig,
                 device, dist, ref_model=None):  # fmt: skip
        self.model, self.optimizer, self.scheduler, self.ref_model = model, optimizer, scheduler, ref_model
        self.algo, self.layout, self.optim, self.device, self.dist = algo, layout, optim, device, dist

    def __call__(self, kept: Rollouts | None) -> dict[str, float]:
        """algo.mu optimizer steps on this rank's kept rollouts (None: it has none, and joins the collectives);
        returns update/*."""
        return policy_update(
            self.model, kept, self.optimizer, self.scheduler, self.algo, self.layout, self.optim, self.device,
            self.dist, self.ref_model,
        )  # fmt: skip
