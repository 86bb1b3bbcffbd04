"""Policy update: advantages on the kept rollouts (registered estimators), the policy-gradient loss (registered
losses), the optimizer step."""

from pods.update.advantages import (
    ADVANTAGES,
    estimate_advantages,
    group_advantages,
    kept_advantages,
    register_advantage,
)
from pods.update.loss import LOSSES, PolicyLoss, policy_loss, register_loss

__all__ = [
    "ADVANTAGES",
    "LOSSES",
    "PolicyLoss",
    "estimate_advantages",
    "group_advantages",
    "kept_advantages",
    "policy_loss",
    "register_advantage",
    "register_loss",
]
