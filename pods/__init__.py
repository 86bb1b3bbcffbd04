"""pods: GRPO with rollout down-sampling (PODS) and pre-rollout filtering (GRESO), driven by Hydra configs."""

from pathlib import Path

from omegaconf import OmegaConf

ASSETS = Path(__file__).parent / "assets"

# `${pods_asset:tiny}` in a YAML resolves to the directory of a model shipped with the package.
if not OmegaConf.has_resolver("pods_asset"):
    OmegaConf.register_new_resolver("pods_asset", lambda name: str(ASSETS / name))

__version__ = "0.1.0"
