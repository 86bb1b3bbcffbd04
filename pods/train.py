"""Entry point: `python -m pods.train [group=option ...] [key=value ...]` (Hydra; `-m` for sweeps).

Order of work: compose the config -> validate every field -> check the model/data sources -> load
tokenizer and data (bad rows reported) -> load the model -> train. Anything wrong with the config or
the inputs fails before the model loads, with a message naming the key.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf

from pods.config import ConfigError, register_schema, validate

log = logging.getLogger("pods")
register_schema()

CONF_DIR = str(Path(__file__).resolve().parent.parent / "conf")


def check_run_dir(cfg) -> None:
    """Refuse to write into a directory that already holds a run, unless asked to resume it: nothing
    already saved is overwritten or mixed with a new run's metrics."""
    if int(os.environ.get("RANK", "0")) != 0:
        return  # under torchrun rank 0 checks; the others would race with the files rank 0 starts writing
    run_dir = Path(cfg.run_dir)
    ckpts = run_dir / "checkpoints"
    used = (ckpts.exists() and any(ckpts.glob("step_*"))) or (run_dir / "metrics.jsonl").exists()
    if not cfg.resume and used:
        raise ConfigError(
            f"run_dir={cfg.run_dir} already holds a run (metrics or checkpoints); pass resume=true to "
            "continue it, or choose another hydra.run.dir"
        )


def preflight(cfg) -> None:
    """Every check that needs no model weights."""
    from pods.models import check_model_source, resolve_device

    validate(cfg)
    resolve_device(cfg)  # a GPU profile on a machine without a GPU fails here
    check_run_dir(cfg)
    check_model_source(cfg)
    if cfg.rollout.backend == "vllm":
        from pods.rollout.vllm import require_vllm

        require_vllm()


def run(cfg) -> dict:
    from pods.trainer import Trainer

    preflight(cfg)
    trainer = Trainer(cfg, Path(cfg.run_dir))
    if trainer.dist.is_main:
        OmegaConf.save(cfg, Path(cfg.run_dir) / "config.yaml", resolve=True)
    return trainer.train()


@hydra.main(config_path=CONF_DIR, config_name="train", version_base="1.3")
def _hydra_main(cfg: DictConfig) -> float | None:
    from pods.data.tasks import DataError
    from pods.hub import OfflineError

    try:
        final = run(cfg)
    except (ConfigError, DataError, OfflineError, KeyError) as e:
        msg = e.args[0] if isinstance(e, KeyError) and e.args else str(e)
        log.error("%s: %s", type(e).__name__, msg)
        print(f"pods: error: {msg}", file=sys.stderr)
        sys.exit(2)
    return final.get("eval/accuracy") if final else None  # lets sweepers optimise the final accuracy


def main() -> None:
    _hydra_main()


if __name__ == "__main__":
    main()
