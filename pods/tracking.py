"""Logging: metrics.jsonl in the run directory always; W&B when configured (offline when unreachable)."""

from __future__ import annotations

import json
import logging
import math
import os
from pathlib import Path

log = logging.getLogger("pods")


def _clean(v):
    if isinstance(v, float) and not math.isfinite(v):
        return None  # JSON has no NaN; a null says "not finite" honestly
    return v


def wandb_mode(requested: str) -> str:
    """auto -> online when logged in and the W&B host answers, else offline; never raises."""
    if requested != "auto":
        return requested
    try:
        import wandb

        if not (os.environ.get("WANDB_API_KEY") or wandb.api.api_key):
            return "offline"
        from pods.hub import hub_reachable

        return "online" if hub_reachable("api.wandb.ai") else "offline"
    except Exception:  # noqa: BLE001 - any trouble with W&B means offline, not a crash
        return "offline"


STEP_METRIC = "train/clock"  # the training clock in seconds: metrics.jsonl's train_time


def bind_metrics(run) -> None:
    """Plot every logged metric against the training clock, as metrics.jsonl has it.

    A glob per namespace would miss new ones (reward/*, timing/*, selector/*, filter/*, ...)
    and leave them on W&B's _step, which counts log calls; "*" binds them all.
    """
    run.define_metric(STEP_METRIC)
    run.define_metric("*", step_metric=STEP_METRIC)


class MetricsLogger:
    """Append-only metrics.jsonl plus optional W&B. On resume the file is truncated to the checkpoint's
    step first, so a resumed run continues it without duplicates or gaps."""

    def __init__(self, cfg, run_dir: Path, run_info: dict, resume_step: int | None = None):
        self.path = run_dir / "metrics.jsonl"
        if resume_step is not None:
            truncate_metrics(self.path, resume_step)
        self.wandb = None
        if cfg.logger.backend == "wandb":
            self.wandb = self._init_wandb(cfg, run_dir, run_info)

    def _init_wandb(self, cfg, run_dir: Path, run_info: dict):
        try:
            import wandb
            from omegaconf import OmegaConf

            mode = wandb_mode(cfg.logger.mode)
            run = wandb.init(
                project=cfg.logger.project,
                entity=cfg.logger.entity,
                group=cfg.logger.group or run_info.get("group"),
                name=run_info["name"],
                id=run_info["wandb_id"],
                resume="allow",
                dir=str(run_dir),
                mode=mode,
                config=OmegaConf.to_container(cfg, resolve=True),
                settings=wandb.Settings(init_timeout=60),
            )
            bind_metrics(run)
            log.info("W&B run %s (%s)", run.name, mode)
            return run
        except Exception as e:  # noqa: BLE001 - logging must never kill a training run
            log.warning("W&B unavailable (%s: %s); metrics go to %s only", type(e).__name__, e, self.path)
            return None

    def log(self, record: dict) -> None:
        rec = {k: _clean(v) for k, v in record.items()}
        with open(self.path, "a") as f:  # closed per line: a killed process loses nothing it logged
            f.write(json.dumps(rec) + "\n")
        if self.wandb is not None:
            try:
                data = {k: v for k, v in rec.items() if isinstance(v, (int, float)) and k != "kind"}
                data[STEP_METRIC], data["train/step"] = rec["train_time"], rec["step"]
                self.wandb.log(data)
            except Exception as e:  # noqa: BLE001
                log.warning("W&B log failed: %s", e)

    def sync(self) -> None:
        """fsync before a checkpoint, so the metrics it covers survive even a machine crash."""
        if self.path.exists():
            with open(self.path, "a") as f:
                os.fsync(f.fileno())

    def finish(self) -> None:
        if self.wandb is not None:
            self.wandb.finish()


def truncate_metrics(path: Path, step: int) -> None:
    """Drop records after `step` (they were written after the checkpoint a resume starts from).
    Written to a temp file and renamed, so a crash here loses nothing."""
    if not path.exists():
        return
    keep = []
    for line in path.read_text().splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line torn by a crash mid-write
        if rec.get("step", 0) <= step:
            keep.append(line)
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(x + "\n" for x in keep))
    os.replace(tmp, path)


def read_metrics(path: Path) -> list[dict]:
    return [json.loads(x) for x in Path(path).read_text().splitlines() if x.strip()]
