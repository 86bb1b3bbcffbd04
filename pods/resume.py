"""Checkpointing a run and resuming it: what goes into a checkpoint, and which checkpoint a resume uses.

The files themselves (atomic writes, the `latest` pointer, pruning) are pods/checkpoint.py; this module
decides what a checkpoint holds (weights, optimizer, the loop's own state, every rank's random streams),
gathers it under FSDP, and picks the checkpoint to resume from so that metrics.jsonl keeps every record
exactly once.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import torch

from pods import checkpoint as ckpt
from pods.errors import ConfigError
from pods.tracking import MetricsGapError, check_metrics

log = logging.getLogger("pods")


class Checkpointer:
    def __init__(self, run_dir: Path, dist, keep_last: int, lora: bool):
        self.root, self.metrics = Path(run_dir) / "checkpoints", Path(run_dir) / "metrics.jsonl"
        self.dist, self.keep_last, self.lora = dist, keep_last, lora

    # --- saving ---------------------------------------------------------------------------------

    def save(self, step: int, model, optimizer, state: dict, select_rng, logger, last_eval_step: int) -> None:
        """Only rank 0 writes. Under DDP every rank holds the same weights and optimizer state; under FSDP
        all ranks first gather the full state (a collective). Each rank's random streams are gathered too:
        generation consumes them differently on every rank."""
        model_state, optim_state = self.dist.full_state(model, optimizer)  # FSDP: all ranks
        per_rank = self.dist.all_gather_object(
            {"rng": ckpt.rng_state(), "select_gen": select_rng.get_state()}
        )
        if self.dist.is_main:
            logger.sync()
            ckpt.save_checkpoint(
                self.root,
                step,
                model,
                {"optimizer": optim_state, **state, "per_rank": per_rank},
                self.keep_last,
                model_state=model_state,
                meta={"metrics_lines": logger.lines, "last_eval_step": last_eval_step},
            )
        self.dist.barrier()

    # --- resuming -------------------------------------------------------------------------------

    def plan(self) -> dict:
        """Which checkpoint to resume from: rank 0 decides (other ranks could read metrics.jsonl while rank 0
        rewrites it) and every rank gets its answer. The newest checkpoint whose metrics.jsonl records are
        complete; if a record it covers is lost (a corrupt line, a missing step), the newest older checkpoint
        that precedes the loss, so the lost records are recomputed; if none does, refuse. {} = none."""
        plan, error = {}, None
        if self.dist.is_main:
            try:
                plan = self._choose()
            except (MetricsGapError, ConfigError) as e:
                error = f"{type(e).__name__}: {e}"
        plan, error = self.dist.all_gather_object((plan, error))[0]
        if error:
            kind, msg = error.split(": ", 1)
            raise (MetricsGapError(msg, 0) if kind == "MetricsGapError" else ConfigError(msg))
        return plan

    def _choose(self) -> dict:
        found = ckpt.checkpoints(self.root)
        pointer = ckpt.latest_checkpoint(self.root)
        if pointer in found:  # the `latest` pointer first (it is the newest unless a step was re-saved)
            found.remove(pointer)
            found.insert(0, pointer)
        gap: MetricsGapError | None = None
        for path in found:
            try:
                meta = ckpt.read_meta(path)
            except Exception as e:  # noqa: BLE001 - an unreadable checkpoint: try an older one
                log.warning(
                    "checkpoint %s unreadable (%s: %s); trying an older one", path, type(e).__name__, e
                )
                continue
            step = int(meta["step"])
            if gap is not None and step >= gap.step:
                continue  # covers the lost records too
            try:
                keep = check_metrics(self.metrics, step, meta.get("metrics_lines"))
            except MetricsGapError as e:
                log.warning("resume from %s refused: %s", path.name, e)
                gap = e if gap is None or e.step < gap.step else gap
                continue
            if gap is not None:
                log.warning(
                    "resuming from the older %s (step %d) instead, to recompute the lost records",
                    path.name,
                    step,
                )
            evals = [json.loads(x) for x in keep if '"eval"' in x]
            last_eval = max((r["step"] for r in evals if r.get("kind") == "eval"), default=-1)
            return {
                "path": str(path),
                "step": step,
                "metrics_lines": meta.get("metrics_lines"),
                "last_eval_step": last_eval,
            }
        if gap is not None:
            raise MetricsGapError(
                f"{gap} No checkpoint older than step {gap.step} is left to recompute it from.", 0
            )
        if found:
            raise ConfigError(f"resume=true: no checkpoint in {self.root} can be read")
        return {}

    def restore(self, plan: dict, model, optimizer, select_rng: torch.Generator) -> dict:
        """Load the planned checkpoint into model and optimizer, restore this rank's random streams, and
        return the loop's own saved state (scheduler, sampler, counters, clock, ...)."""
        path = Path(plan["path"])
        st = ckpt.load_trainer_state(path)
        if self.dist.fsdp:
            self.dist.load_full_state(model, optimizer, ckpt.read_weights(path), st["optimizer"])
        else:
            ckpt.load_weights(model, path, self.lora)
            optimizer.load_state_dict(st["optimizer"])
        select_rng.set_state(st["select_gen"])
        mine = st.get("per_rank", [])
        if len(mine) == self.dist.world:  # same number of ranks: every rank continues its own streams
            ckpt.set_rng_state(mine[self.dist.rank]["rng"])
            select_rng.set_state(mine[self.dist.rank]["select_gen"])
        else:
            if self.dist.world > 1:
                log.warning(
                    "checkpoint from %d rank(s), resuming on %d: random streams restart",
                    len(mine),
                    self.dist.world,
                )
            ckpt.set_rng_state(st["rng"])
        log.info("resumed from %s (step %d, training clock %.1fs)", path, st["step"], st["train_clock"])
        return st
