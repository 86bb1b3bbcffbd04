"""Run and variant names, defined once: used by the run directory (conf/train.yaml, through the
`pods.run_name` resolver), run_info.json and W&B, and read back by pods.compare (any `-s<seed>` token).

A variant is what is compared (the down-sampling rule and n/m); a run is one seed of it:
`max_variance-n64-m16` (PODS 64/16), `none-n16-m16` (GRPO 16/16, nothing down-sampled), `...-s3`.
"""

from __future__ import annotations

from omegaconf import OmegaConf


def variant_name(selector: str, n: int, m: int) -> str:
    """>>> variant_name("max_variance", 64, 16)
    'max_variance-n64-m16'
    """
    return f"{selector}-n{n}-m{m}"


def run_name(variant: str, seed: int) -> str:
    """>>> run_name("none-n16-m16", 3)
    'none-n16-m16-s3'
    """
    return f"{variant}-s{seed}"


def register_resolver() -> None:
    """`${pods.run_name:<selector>,<n>,<m>,<seed>}` in configs."""
    OmegaConf.register_new_resolver(
        "pods.run_name",
        lambda sel, n, m, seed: run_name(variant_name(sel, int(n), int(m)), int(seed)),
        replace=True,
    )
