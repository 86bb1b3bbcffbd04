"""Checkpointing a run and resuming it: what goes into a checkpoint, and which checkpoint a resume uses.

The files themselves (atomic writes, the `latest` pointer, pruning) are pods/checkpoint.py; this module
decides what a checkpoint holds, gathers it under FSDP, and picks the checkpoint to resume from so that
metrics.jsonl keeps every record exactly once. trainer_state.pt (FORMAT 2):

    {"format": 2, "step": int,
     "optimizer":  the full optimizer state (FSDP gathers it with the weights, so it is not a component),
     "components": {name: component.state_dict()}   the trainer's components, the same on every rank,
     "per_rank":   [{name: state}, ...]              one per rank: its random streams (RngStreams)}

meta.json holds the step and the metrics logger's state (how many metrics.jsonl lines it covers), so a
resume picks a checkpoint without loading the rest. A checkpoint of the earlier layout (no "format": nine
keys at the top, the selection generator saved twice) is read by converting it (`from_v1`).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from pods import checkpoint as ckpt
from pods.errors import CheckpointError, ConfigError
from pods.spelling import current_components
from pods.tracking import MetricsGapError, check_metrics, pods_record

log = logging.getLogger("pods")


class Checkpointer:
    def __init__(self, run_dir: Path, dist, keep_last: int, lora: bool):
        self.root, self.metrics = Path(run_dir) / "checkpoints", Path(run_dir) / "metrics.jsonl"
        self.dist, self.keep_last, self.lora = dist, keep_last, lora
        self.unloadable: set[str] = set()  # checkpoints that failed to load: a plan passes them over

    # --- saving ---------------------------------------------------------------------------------

    def save(self, step: int, model, optimizer, components: dict, rank_components: dict, meta: dict) -> None:
        """Only rank 0 writes. Under DDP every rank holds the same weights and optimizer state; under FSDP
        all ranks first gather the full state (a collective). `components` are the same on every rank;
        `rank_components` (the random streams) differ per rank and are gathered. `meta` goes to meta.json."""
        model_state, optim_state = self.dist.full_state(model, optimizer)  # FSDP: all ranks
        per_rank = self.dist.all_gather_object({k: c.state_dict() for k, c in rank_components.items()})
        if self.dist.is_main:
            state = {
                "format": FORMAT,
                "optimizer": optim_state,
                "components": {k: c.state_dict() for k, c in components.items()},
                "per_rank": per_rank,
            }
            readable(state, step, self.root)  # a checkpoint no resume could load is not written
            ckpt.save_checkpoint(
                self.root, step, model, state, self.keep_last, model_state=model_state, meta=meta
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
            if str(path) in self.unloadable:
                continue
            damage = ckpt.verify(path)  # a truncated or half-written file: never loaded
            if damage:
                log.warning("checkpoint %s is damaged (%s); falling back to an older one", path.name, damage)
                continue
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
                "eval_pending": meta.get("eval_pending") is True,  # a stop cut its step's eval short
                "config": meta.get("config"),  # the config it was saved under (None: an older pods)
                "train_data": meta.get("train_data"),  # the digest of the rows it trained on (None: older)
            }
        if gap is not None:
            raise MetricsGapError(
                f"{gap} No checkpoint older than step {gap.step} is left to recompute it from.", 0
            )
        run_dir = self.root.parent
        records, last = count_records(self.metrics)
        if found or records:  # a resume from nothing would start over and overwrite what is there: refuse
            why = (
                f"none of its {len(found)} checkpoints can be read (the lines above say why)"
                if found
                else f"there is no checkpoint (checkpoints/ is {'empty' if self.root.is_dir() else 'missing'})"
            )
            held = f"metrics.jsonl holds {records} records (up to step {last}), but " if records else ""
            raise ConfigError(
                f"resume=true: {run_dir}: {held}{why}; resuming would start the run over and overwrite "
                f"{'them' if records else 'it'}. To start over on purpose, move {run_dir} aside (or delete its "
                "metrics.jsonl and checkpoints/) and run without resume=true, or choose another hydra.run.dir"
            )
        return {}

    def restore_intact(self, plan: dict, model, optimizer, components: dict, rank_components: dict) -> int:
        """restore() the planned checkpoint; one that fails to load for any reason (a truncated weights file
        of a checkpoint too old to hold checksums, a partial copy) counts as damaged: the newest intact older
        one is planned and restored instead, with a warning naming both. `plan` is updated in place."""
        while True:
            try:
                return self.restore(plan, model, optimizer, components, rank_components)
            except Exception as e:  # noqa: BLE001 - torch, safetensors and peft raise many types
                first = (str(e).strip().splitlines() or [""])[0][:200]
                self.unloadable.add(plan["path"])
                new = self.plan()  # refuses (one line) when no older checkpoint can stand in
                if not new:
                    why = f"{type(e).__name__}: {first}"
                    raise ConfigError(f"checkpoint {plan['path']} cannot be loaded ({why})") from None
                log.warning(
                    "checkpoint %s cannot be loaded (%s: %s): treated as damaged; resuming from %s instead",
                    plan["path"],
                    type(e).__name__,
                    first,
                    new["path"],
                )
                plan.clear()
                plan.update(new)

    def restore(self, plan: dict, model, optimizer, components: dict, rank_components: dict) -> int:
        """Load the planned checkpoint into model, optimizer and every component; returns its step."""
        path = Path(plan["path"])
        st = read_state(path)
        if self.dist.fsdp:
            self.dist.load_full_state(model, optimizer, ckpt.read_weights(path), st["optimizer"])
        else:
            ckpt.load_weights(model, path, self.lora)
            optimizer.load_state_dict(st["optimizer"])
        states = current_components(st["components"])  # keys an older pods saved under: today's
        for name, c in components.items():
            c.load_state_dict(_part(states, name, path))
        ranks = st["per_rank"]
        if len(ranks) == self.dist.world:  # same number of ranks: every rank continues its own streams
            mine = ranks[self.dist.rank]
        else:
            log.warning(
                "checkpoint from %d rank(s), resuming on %d: every rank continues rank 0's random streams",
                len(ranks),
                self.dist.world,
            )
            mine = ranks[0]
        for name, c in rank_components.items():
            c.load_state_dict(_part(mine, name, path))
        log.info("resumed from %s (step %d)", path, st["step"])
        return int(st["step"])


FORMAT = 2


def readable(state: dict, step: int, root: Path) -> None:
    """CheckpointError (one line) naming the first component whose state a resume could not read back
    (weights_only: pods/checkpoint.py), before anything is written; the optimizer's is torch's own."""
    parts = {
        **state["components"],
        **{f"{k} (rank {r})": v for r, p in enumerate(state["per_rank"]) for k, v in p.items()},
    }
    for name, part in parts.items():
        why = ckpt.unreadable(part)
        if why is not None:
            prev = ckpt.latest_checkpoint(root)
            kept = f"{prev.name} and `latest` are intact" if prev else "there is no earlier checkpoint"
            raise CheckpointError(
                f"checkpoint of step {step} not saved: a resume could not read back the state of {name!r} "
                f"({why}); {kept}. Keep plain data in its state_dict(): dicts, lists, numbers, strings, tensors, "
                "numpy numbers and arrays (pods.testing.check_state)"
            )


def count_records(path: Path) -> tuple[int, int]:
    """(records, last step) of a metrics.jsonl: lines that parse as JSON objects (a line torn by a kill,
    or blank, is none); (0, -1) when there is no file."""
    n, last = 0, -1
    try:
        lines = Path(path).read_text(errors="replace").splitlines()
    except FileNotFoundError:
        return 0, -1
    for line in lines:
        rec = pods_record(line)
        if rec is not None:
            n += 1
            last = max(last, rec["step"])
    return n, last


def _part(states: dict, name: str, path: Path) -> dict:
    if name not in states:
        raise ConfigError(
            f"checkpoint {path} holds no state for {name!r} (it has: {', '.join(sorted(states))}); "
            "it was written by another version of pods: resume with that version or start a new run"
        )
    return states[name]


def read_state(path: Path) -> dict:
    """trainer_state.pt of a checkpoint in FORMAT 2, converting the earlier layout; refuses any other."""
    try:
        st = ckpt.load_trainer_state(path)
    except Exception as e:  # noqa: BLE001 - weights_only refuses code; torch's message is many lines
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise ConfigError(
            f"checkpoint {path}: trainer_state.pt cannot be loaded as tensors and containers only "
            f"({type(e).__name__}: {first}); pods loads no code from a checkpoint"
        ) from None
    if st.get("format") == FORMAT:
        return st
    if "format" not in st and {"select_gen", "sampler", "train_clock"} <= set(st):
        return from_v1(st)
    raise ConfigError(
        f"checkpoint {path}: trainer_state.pt has format {st.get('format')!r}, this pods reads {FORMAT} and "
        "the earlier layout; resume with the pods that wrote it, or start a new run"
    )


def from_v1(st: dict) -> dict:
    """The earlier layout (the loop's state as top-level keys, rank 0's streams saved beside per_rank)."""
    ranks = st.get("per_rank") or [{"rng": st["rng"], "select_gen": st["select_gen"]}]
    return {
        "format": FORMAT,
        "step": st["step"],
        "optimizer": st["optimizer"],
        "components": {
            "scheduler": st["scheduler"],
            "sampler": st["sampler"],
            "prefilter": st["prefilter"],
            "dynamic_sampling": {"zero_var_ratio": st.get("zero_var_ratio", 0.0)},
            "timer": {"train_clock": st["train_clock"]},
            "eval_every": {"next_time": st["next_eval"]},
            "ckpt_every": {"next_time": st["next_ckpt"]},
            "trainer": {"counters": st["counters"]},
        },
        "per_rank": [{"rng": {"global": r["rng"], "select": r["select_gen"]}} for r in ranks],
    }
