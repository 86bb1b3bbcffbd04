"""What a run logs, saves and restores, as the Trainer's (pods/trainer.py) mixin: its metrics records, the
components a checkpoint holds, the save, the resume (the same experiment, the newest intact checkpoint) and the
generation copy's weights after it. The loop itself stays in pods/trainer.py."""

from __future__ import annotations

import logging
import time
from pathlib import Path

from omegaconf import OmegaConf

from pods import history
from pods.config import as_container
from pods.errors import ConfigError
from pods.spelling import current_config
from pods.update.optim import check_schedule_kept

log = logging.getLogger("pods")


class RunState:
    """Methods of the Trainer that touch its records and checkpoints (its attributes: pods/trainer.py)."""

    def _log(self, kind: str, rec: dict) -> None:
        self.changes += 1  # on every rank, so all agree whether the final save is needed
        if self.logger is None:  # only rank 0 logs
            return
        self.logger.log(
            {
                "kind": kind,
                "step": self.step,
                "train_time": self.timer.train_clock,
                "rollouts": self.counters["rollouts"],
                "wall_time": time.time(),
                **{f"counters/{k}": float(v) for k, v in self.counters.items()},
                **rec,
            }
        )

    def components(self) -> dict:
        """Every stateful part a checkpoint restores, by name (weights, optimizer and the per-rank random
        streams go beside them: FSDP gathers the first two, each rank has its own streams)."""
        return {
            "scheduler": self.scheduler,
            "sampler": self.sampler,
            "prefilter": self.stages.prefilter,  # its filter's state (GRESO's), as before
            "dynamic_sampling": self.stages.dynamic_sampling,  # its zero-variance estimate (older checkpoints:
            # `collector`, read as this by pods.spelling.current_components)
            "timer": self.timer,  # the training clock
            "eval_every": self.eval_every,
            "ckpt_every": self.ckpt_every,
            "trainer": self,  # counters
        }

    def state_dict(self) -> dict:
        return {"counters": dict(self.counters)}

    def load_state_dict(self, state: dict) -> None:
        self.counters.update(state["counters"])

    def save(self) -> None:
        self.guard.before_save(self.step)  # never a checkpoint of non-finite weights
        with self.timer.phase("checkpoint"):
            # the config it is saved under: a resume refuses another experiment (pods/history.py)
            meta = {"last_eval_step": self.last_eval_step, "config": as_container(self.settings)}
            meta["train_data"] = self.train_digest  # the rows it trains on: a resume compares them
            meta.update({"eval_pending": True} if self.eval_pending else {})
            if self.logger:  # rank 0: the records the checkpoint covers, on disk first
                self.logger.sync()
                meta.update(self.logger.state_dict())
            self.ckpt.save(self.step, self.model, self.optimizer, self.components(), {"rng": self.rng}, meta)
            self.saved_changes = self.changes

    def history_event(self, event: str, **fields) -> None:
        """A line of the run's history.jsonl (pods/history.py): starts, resumes, stops by a signal."""
        if self.dist.is_main:
            history.append(self.run_dir, event, **fields)

    def _same_experiment(self, plan: dict) -> dict:
        """Refuse (ConfigError) a resume whose config differs from the checkpoint's in a key that defines the
        experiment; returns the free keys that changed, {key: (old, new)}. A checkpoint of an older pods
        holds no config: then config.yaml, the config the run was last started with."""
        saved, where = plan.get("config"), Path(plan["path"]).name
        if saved is None and (self.run_dir / "config.yaml").is_file():
            try:
                saved = OmegaConf.to_container(OmegaConf.load(self.run_dir / "config.yaml"))
            except Exception as e:  # noqa: BLE001 - a damaged config.yaml: YAML and OmegaConf raise many types
                log.warning(
                    "config.yaml unreadable (%s): the resumed config is not compared", type(e).__name__
                )
        if saved is None:
            log.warning("checkpoint %s holds no config and there is no config.yaml: not compared", where)
            return {}
        saved, now = current_config(saved), as_container(self.settings)
        changed = history.check_same_experiment(saved, now, where)
        changed.update(check_schedule_kept(saved, now, where))  # max_steps under cosine, say: refused
        for key, (old, new) in changed.items():
            log.info("resume: %s changed from %s to %s (history.jsonl)", key, old, new)
        return changed

    def _same_data(self, plan: dict | None) -> dict:
        """The digest of the train prompts and answers (`train_digest`, saved in every checkpoint's meta.json
        as train_data). Refuse (ConfigError) a resume whose digest differs from its checkpoint's (the file was
        edited, regenerated or replaced), unless resume_allow_dataset_change; returns {"train_data": (old,
        new)} for history.jsonl when allowed. A checkpoint of an older pods holds none: a warning."""
        self.train_digest = now = self.train_set.digest()
        if not plan:
            return {}
        saved, where = plan.get("train_data"), Path(plan["path"]).name
        if saved is None:
            log.warning(
                "checkpoint %s records no digest of its training data (written before pods saved one): the "
                "data this resume trains on (%d rows) is not compared with it",
                where,
                now["rows"],
            )
            return {}
        if saved == now:
            return {}
        show = lambda d: f"{d['rows']} rows, sha256 {d['sha256'][:12]}"  # noqa: E731
        if not self.settings.resume_allow_dataset_change:
            raise ConfigError(
                f"resume=true: the training data ({show(now)}) differs from the data checkpoint {where} "
                f"trained on ({show(saved)}): a prompt or answer of dataset.task={self.settings.dataset.task} "
                "was edited, added or removed since. Resume with the data it trained on, or set "
                "resume_allow_dataset_change=true to go on with this data (history.jsonl records it)"
            )
        log.warning("resume: the training data changed (%s -> %s), as allowed", show(saved), show(now))
        return {"train_data": (show(saved), show(now))}

    def _resume(self, plan: dict) -> int:
        """Restore everything from the planned checkpoint; returns its step (-1: none, start afresh)."""
        if not plan:  # Checkpointer.plan refuses when records would be lost: there are none
            log.info("resume=true: no checkpoint and no records in %s yet: starting the run", self.run_dir)
            return -1  # drop what a run killed before its first record left (a torn line)
        # a checkpoint that fails to load: the newest intact one instead (`plan` updated in place)
        self.step = self.ckpt.restore_intact(
            plan, self.model, self.optimizer, self.components(), {"rng": self.rng}
        )
        self.guard.after_restore(plan["path"])  # written by a pods that did not check: refused here
        self.last_eval_step, self.eval_pending = plan["last_eval_step"], plan.get("eval_pending", False)
        log.info("training clock %.1fs at step %d", self.timer.train_clock, self.step)
        self._sync_generation_weights()  # a generation copy still holds the weights from before
        return self.step

    def _sync_generation_weights(self) -> None:
        """Push the policy's weights to the backend's own copy (none when it decodes the policy itself).
        FSDP: gathered once per unit in the compute dtype, the copy's own (one all-gather per tensor in
        float32 cost 0.15 s per step on 2 H200s at 0.5B; results/scaling/h200x2/), a unit at a time where the
        backend takes names (at most two units whole at once), else all at once."""
        if self.backend.reads_policy is not None:  # no copy of its own: nothing to push
            self.backend.sync_weights(self.model)
        elif self.dist.fsdp and getattr(self.backend, "syncs_by_name", False):
            for names in self.dist.gathered_units(self.model):
                self.backend.sync_weights(self.model, only=names)
        else:
            with self.dist.full_weights(self.model):
                self.backend.sync_weights(self.model)
