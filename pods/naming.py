"""Run and variant names, defined once: used by the run directory (conf/train.yaml, through the
`pods.run_name` resolver), run_info.json and W&B, and read back by pods.compare (any `-s<seed>` token).

A variant is what is compared: the sampling stages that are on, joined by `+` in the loop's order (the
pre-rollout filter unless none, `dynamic_sampling` if on, the down-sampler always), then n and m.
`none-n16-m16` (GRPO 16/16, nothing down-sampled), `max_variance-n64-m16` (PODS 64/16),
`greso+dynamic_sampling+max_variance-n64-m16` (GRESO, then PODS). The presets in conf/arm/ are named by the
variant they produce. A run is one seed of one experiment: its name is the variant, what else of its config
differs from the defaults (pods/identity.py), then `-s<seed>`."""

from __future__ import annotations

from datetime import datetime

from omegaconf import OmegaConf


def variant_name(
    selector: str, n: int, m: int, prefilter: str = "none", dynamic_sampling: bool = False
) -> str:
    """The variant: the sampling stages that are on, in the loop's order, then n and m.

    >>> variant_name("max_variance", 64, 16)
    'max_variance-n64-m16'
    >>> variant_name("none", 16, 16, prefilter="greso", dynamic_sampling=True)
    'greso+dynamic_sampling+none-n16-m16'
    """
    stages = [prefilter] * (prefilter != "none") + ["dynamic_sampling"] * bool(dynamic_sampling) + [selector]
    return f"{'+'.join(stages)}-n{n}-m{m}"


def run_name(variant: str, seed: int) -> str:
    """One seed of a variant.

    >>> run_name("none-n16-m16", 3)
    'none-n16-m16-s3'
    """
    return f"{variant}-s{seed}"


def sweep_stamp(launcher: str) -> str:
    """The sweep directory's time prefix: none under Slurm, where a requeued job (or the same command again
    with resume=true) must find the directory it started in; else the time the sweep started."""
    return "" if launcher.endswith("SlurmLauncher") else datetime.now().strftime("%Y-%m-%d_%H-%M-%S_")


def kept(selector: str, n: int, m: int) -> int:
    """m, or n for a selector that keeps every rollout (its registry trait `keeps_all`): `${pods.kept:...}`
    lets one preset (debug=smoke) down-sample with any down-sampler and still run selector=none. A name not
    registered yet (a plugin's: plugins load after Hydra composes) counts as a down-sampler."""
    from pods.selector import SELECTORS

    return int(n) if SELECTORS.trait(str(selector), "keeps_all") else int(m)


def register_resolver() -> None:
    """The resolvers a composed config uses (`${pods.run_name:}`, the run directory's, is pods.identity's)."""
    OmegaConf.register_new_resolver("pods.kept", kept, replace=True)  # `${pods.kept:<selector>,<n>,<m>}`
    # `${pods.sweep_stamp:${hydra.launcher._target_}}`; cached like Hydra's `now`: one stamp per sweep
    OmegaConf.register_new_resolver("pods.sweep_stamp", sweep_stamp, use_cache=True, replace=True)
