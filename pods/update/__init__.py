"""Policy update: group advantages on the kept rollouts, the clipped policy-gradient loss, the optimizer step."""

from pods.update.advantages import group_advantages, kept_advantages
from pods.update.loss import policy_loss

__all__ = ["group_advantages", "kept_advantages", "policy_loss"]
