"""The GRPO loop with PODS down-sampling and GRESO pre-rollout filtering.

    for each step:
        prompts -> pre-rollout filter -> n rollouts each -> rewards      (RolloutCollector)
        keep m of n per prompt (selector)  -> advantages on the kept m
        clipped policy-gradient update (mu iterations, micro-batched)
        eval / checkpoint on the training clock

Every stage runs under a named timer; the training clock excludes eval and checkpointing.
"""

from __future__ import annotations

import json
import logging
import math
import time
import uuid
from pathlib import Path

import torch
import transformers
from tqdm.auto import tqdm

from pods import checkpoint as ckpt
from pods.config import ConfigError
from pods.data import PromptSampler, format_prompt, load_examples
from pods.data.tasks import DataError
from pods.distributed import Dist
from pods.filter import build_prefilter
from pods.models import (
    autocast,
    load_policy,
    load_tokenizer,
    reference_policy,
    resolve_device,
    resolve_dtype,
)
from pods.reward import build_reward
from pods.rollout import build_generator
from pods.rollout.collect import RolloutCollector
from pods.selection import downsample
from pods.selection.diagnostics import selection_metrics
from pods.threads import set_threads
from pods.timing import PhaseTimer
from pods.tracking import MetricsGapError, MetricsLogger, check_metrics
from pods.update import group_advantages
from pods.update.optim import build_optimizer
from pods.update.step import policy_update

log = logging.getLogger("pods")


def run_info_for(cfg) -> dict:
    s = cfg.selector
    variant = f"{s.name}-n{s.n}-m{s.m}"
    return {
        "name": cfg.name or f"{variant}-s{cfg.seed}",
        "variant": variant,
        "seed": cfg.seed,
        "selector": s.name,
        "n": s.n,
        "m": s.m,
        "model": cfg.model.name,
        "dataset": cfg.dataset.name,
        "group": cfg.logger.group or cfg.experiment,
        "experiment": cfg.experiment,
    }


class Trainer:
    def __init__(self, cfg, run_dir: Path):
        self.cfg, self.run_dir = cfg, Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        transformers.set_seed(cfg.seed)
        self.device = resolve_device(cfg)
        self.threads = set_threads(
            cfg.hardware.num_threads, self.device.type
        )  # 0: the free cores (threads.py)
        self.dist = Dist(cfg, self.device)
        self.resume_plan = self._plan_resume() if cfg.resume else None  # fails here, before the model loads
        self.tok = load_tokenizer(cfg)
        self.reward_fn = build_reward(cfg.reward)
        self._load_data()
        self.model, ref = load_policy(cfg, self.device)  # the heavy part comes after every check
        self.ref = reference_policy(self.model, ref, cfg)
        # FSDP shards in place (all-gathers in the compute dtype); otherwise unchanged
        self.model = self.dist.shard_model(self.model, resolve_dtype(cfg, self.device))
        self.timer = PhaseTimer(sync_cuda=self.device.type == "cuda")
        self.generator = build_generator(cfg, self.model, self.tok, self.device, self.timer)
        optimizer, self.scheduler = build_optimizer(self.model, cfg, self.device)
        self.train_model, self.optimizer = self.dist.prepare(self.model, optimizer)  # DDP wrapper or itself
        self.sampler = PromptSampler(len(self.train_prompts), cfg.seed)  # same draws on every rank
        self.prefilter = build_prefilter(cfg.selector.prefilter, cfg.selector.greso, cfg.seed)
        self.select_gen = torch.Generator().manual_seed(cfg.seed * 1000 + self.dist.rank)
        self.collector = RolloutCollector(
            cfg,
            self.sampler,
            self.prefilter,
            self.generator,
            self.reward_fn,
            self.train_prompts,
            self.train_answers,
            self.timer,
            self.dist,
        )
        self.step = 0
        self.last_eval_step = -1  # the step of the newest eval record (each step is evaluated at most once)
        self.changes = self.saved_changes = 0  # records logged in all / up to the newest checkpoint
        self.counters = {"rollouts": 0, "tokens_generated": 0, "tokens_trained": 0, "prompts_skipped": 0}
        self.next_eval = self._first_due(cfg.eval.every_seconds)
        self.next_ckpt = self._first_due(cfg.checkpoint.every_seconds)
        self.run_info = self._run_info()
        resume_step = self._maybe_resume()
        covered = self.resume_plan.get("metrics_lines") if self.resume_plan else None
        self.logger = (
            MetricsLogger(cfg, self.run_dir, self.run_info, resume_step, covered)
            if self.dist.is_main
            else None
        )

    # --- setup ----------------------------------------------------------------------------------

    def _load_data(self) -> None:
        d, m = self.cfg.dataset, self.cfg.model
        train, self.train_report = load_examples(d, "train")
        evals, self.eval_report = load_examples(d, "eval", exclude={e.question for e in train})
        fmt = lambda ex: format_prompt(ex, d.template, d.system_prompt, self.tok, m.use_chat_template)  # noqa: E731
        self.train_prompts, self.train_answers = self._length_checked(train, fmt, self.train_report)
        self.eval_prompts, self.eval_answers = self._length_checked(evals, fmt, self.eval_report)
        for r in (self.train_report, self.eval_report):
            log.info(
                "data %s: %d rows, %d kept, bad: %s",
                r.split,
                r.rows,
                len(self.train_prompts if r.split == "train" else self.eval_prompts),
                r.bad or "none",
            )

    def _length_checked(self, examples, fmt, report) -> tuple[list[str], list[str]]:
        prompts, answers = [], []
        limit = self.cfg.model.max_prompt_len
        for ex in examples:
            p = fmt(ex)
            if len(self.tok(p, add_special_tokens=False)["input_ids"]) > limit:
                report.add_bad(f"prompt longer than model.max_prompt_len={limit}")
                continue
            prompts.append(p)
            answers.append(ex.answer)
        report.kept = len(prompts)  # run_info.json's data.kept counts what is left after this filter too
        too_long = {k: v for k, v in report.bad.items() if k.startswith("prompt longer")}
        if too_long and self.cfg.dataset.on_bad_rows == "error":
            raise DataError(
                f"{report.split}: {too_long}; raise model.max_prompt_len or set dataset.on_bad_rows=skip"
            )
        if not prompts:
            raise DataError(f"{report.split} split has no prompt within model.max_prompt_len={limit}")
        return prompts, answers

    def _first_due(self, every: float) -> float:
        return every if every > 0 else math.inf

    def _run_info(self) -> dict:
        path = self.run_dir / "run_info.json"
        info = run_info_for(self.cfg)
        # Only rank 0 touches the file: another rank reading it while rank 0 writes it would see half a file.
        old = json.loads(path.read_text()) if self.dist.is_main and path.exists() else {}
        info["wandb_id"] = old.get("wandb_id") or uuid.uuid4().hex[:12]  # resume continues the same W&B run
        info["data"] = {"train": self.train_report.__dict__, "eval": self.eval_report.__dict__}
        info["world_size"] = self.dist.world
        info["torch_threads"] = self.threads
        if self.dist.is_main:
            path.write_text(json.dumps(info, indent=2))
        return info

    # --- checkpoints ----------------------------------------------------------------------------

    def _trainer_state(self, optimizer_state: dict) -> dict:
        return {
            "optimizer": optimizer_state,
            "scheduler": self.scheduler.state_dict(),
            "sampler": self.sampler.state_dict(),
            "prefilter": self.prefilter.state_dict(),
            "select_gen": self.select_gen.get_state(),
            "counters": dict(self.counters),
            "train_clock": self.timer.train_clock,
            "next_eval": self.next_eval,
            "next_ckpt": self.next_ckpt,
            "zero_var_ratio": self.collector.zero_var_ratio,
        }

    def save(self) -> None:
        """Only rank 0 writes. Under DDP every rank holds the same weights and optimizer state; under FSDP
        all ranks first gather the full state (a collective). Each rank's random streams are gathered too."""
        with self.timer.phase("checkpoint"):
            model_state, optim_state = self.dist.full_state(self.model, self.optimizer)  # FSDP: all ranks
            # each rank's own random streams (generation consumes them differently on every rank)
            per_rank = self.dist.all_gather_object(
                {"rng": ckpt.rng_state(), "select_gen": self.select_gen.get_state()}
            )
            if self.dist.is_main:
                self.logger.sync()
                ckpt.save_checkpoint(
                    self.run_dir / "checkpoints",
                    self.step,
                    self.model,
                    {**self._trainer_state(optim_state), "per_rank": per_rank},
                    self.cfg.checkpoint.keep_last,
                    model_state=model_state,
                    meta={"metrics_lines": self.logger.lines, "last_eval_step": self.last_eval_step},
                )
            self.dist.barrier()
            self.saved_changes = self.changes

    def _plan_resume(self) -> dict:
        """Which checkpoint to resume from: rank 0 decides (other ranks could read metrics.jsonl while rank 0
        rewrites it) and every rank gets its answer. The newest checkpoint whose metrics.jsonl records are
        complete; if a record it covers is lost (a corrupt line, a missing step), the newest older checkpoint
        that precedes the loss, so the lost records are recomputed; if none does, refuse."""
        plan, error = {}, None
        if self.dist.is_main:
            try:
                plan = self._choose_checkpoint()
            except (MetricsGapError, ConfigError) as e:
                error = f"{type(e).__name__}: {e}"
        plan, error = self.dist.all_gather_object((plan, error))[0]
        if error:
            kind, msg = error.split(": ", 1)
            raise (MetricsGapError(msg, 0) if kind == "MetricsGapError" else ConfigError(msg))
        return plan

    def _choose_checkpoint(self) -> dict:
        root, metrics = self.run_dir / "checkpoints", self.run_dir / "metrics.jsonl"
        found = ckpt.checkpoints(root)
        pointer = ckpt.latest_checkpoint(root)
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
                keep = check_metrics(metrics, step, meta.get("metrics_lines"))
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
            raise ConfigError(f"resume=true: no checkpoint in {root} can be read")
        return {}

    def _maybe_resume(self) -> int | None:
        if not self.cfg.resume:
            return None
        if not self.resume_plan:
            log.warning("resume=true but no checkpoint in %s: starting from scratch", self.run_dir)
            return -1  # drop any metrics a run killed before its first checkpoint wrote
        path = Path(self.resume_plan["path"])
        st = ckpt.load_trainer_state(path)
        if self.dist.fsdp:
            self.dist.load_full_state(self.model, self.optimizer, ckpt.read_weights(path), st["optimizer"])
        else:
            ckpt.load_weights(self.model, path, self.cfg.hardware.lora)
            self.optimizer.load_state_dict(st["optimizer"])
        self.scheduler.load_state_dict(st["scheduler"])
        self.sampler.load_state_dict(st["sampler"])
        self.prefilter.load_state_dict(st["prefilter"])
        self.select_gen.set_state(st["select_gen"])
        self.counters.update(st["counters"])
        self.timer.train_clock = st["train_clock"]
        self.next_eval, self.next_ckpt = st["next_eval"], st["next_ckpt"]
        self.collector.zero_var_ratio = st["zero_var_ratio"]
        mine = st.get("per_rank", [])
        if len(mine) == self.dist.world:  # same number of ranks: every rank continues its own streams
            ckpt.set_rng_state(mine[self.dist.rank]["rng"])
            self.select_gen.set_state(mine[self.dist.rank]["select_gen"])
        else:
            if self.dist.world > 1:
                log.warning(
                    "checkpoint from %d rank(s), resuming on %d: random streams restart",
                    len(mine),
                    self.dist.world,
                )
            ckpt.set_rng_state(st["rng"])
        self.step = st["step"]
        self.last_eval_step = self.resume_plan["last_eval_step"]
        log.info("resumed from %s (step %d, training clock %.1fs)", path, self.step, self.timer.train_clock)
        return self.step

    # --- the loop -------------------------------------------------------------------------------

    def done(self) -> bool:
        c = self.cfg
        return self.step >= c.max_steps or (
            c.max_train_time > 0 and self.timer.train_clock >= c.max_train_time
        )

    def train(self) -> dict:
        c = self.cfg
        if self.step == 0 and c.eval.at_start and self.last_eval_step != 0:
            self.evaluate()
        # a run bounded by its training clock shows clock seconds, one bounded by steps shows steps
        by_time = c.max_train_time > 0
        bar = tqdm(
            total=round(c.max_train_time) if by_time else c.max_steps,
            initial=round(self.timer.train_clock) if by_time else self.step,
            unit="s" if by_time else "step",
            desc=self.run_info["name"],
            dynamic_ncols=True,
            disable=not self.dist.is_main,
        )
        while not self.done():
            rec = self.train_step()
            bar.update(min(round(self.timer.train_clock), bar.total) - bar.n if by_time else 1)
            bar.set_postfix(
                step=self.step,
                reward=f"{rec.get('reward/mean', float('nan')):.3f}",
                clock=f"{self.timer.train_clock:.0f}s",
            )
            if self._due(c.eval.every_steps, "next_eval", c.eval.every_seconds):
                self.evaluate()
            if self._due(c.checkpoint.every_steps, "next_ckpt", c.checkpoint.every_seconds):
                self.save()
        bar.close()
        final = {}
        if c.eval.at_end and self.last_eval_step != self.step:  # a resumed finished run: already evaluated
            final = self.evaluate()
        if c.checkpoint.save_final and self.changes != self.saved_changes:
            self.save()  # not again when nothing happened since the checkpoint this run resumed from
        if self.logger:
            self.logger.finish()
        return final

    def _due(self, every_steps: int, attr: str, every_seconds: float) -> bool:
        due = every_steps > 0 and self.step % every_steps == 0
        if self.timer.train_clock >= getattr(self, attr):
            due = True
            while getattr(self, attr) <= self.timer.train_clock:  # next point on the fixed grid
                setattr(self, attr, getattr(self, attr) + every_seconds)
        return due

    def train_step(self) -> dict:
        cfg, s = self.cfg, self.cfg.selector
        with autocast(cfg, self.device):
            batch, cs = self.collector.collect()  # this rank's groups
        self.step += 1
        kept = None
        if batch is not None:
            with self.timer.phase("selection"):
                keep = downsample(s.downsample, batch.rewards, s.m, self.select_gen)  # (P, m)
                kept = batch.select(keep)
            with self.timer.phase("advantages"):
                stats_from = batch.rewards if s.adv_stats == "full" else None
                kept.advantages = group_advantages(
                    kept.rewards, cfg.algo.scale_adv_by_std, stats_from=stats_from
                ).reshape(-1)
        with self.timer.phase("update"), autocast(cfg, self.device):
            rec = policy_update(
                self.train_model, kept, self.optimizer, self.scheduler, cfg, self.device, self.dist, self.ref
            )
        with self.timer.phase("weight_sync"):
            self.generator.sync_weights(self.model)
        empty = torch.zeros(0, s.m)
        all_kept = self.dist.gather(kept.rewards if kept is not None else empty)
        if all_kept.numel():
            rec.update(selection_metrics(torch.cat(cs.all_rewards), all_kept))
        rec.update(self._batch_metrics(batch, kept))
        self.counters["tokens_trained"] += int(rec.get("update/tokens", 0))
        self.counters["rollouts"] += cs.rollouts
        self.counters["tokens_generated"] += cs.tokens
        self.counters["prompts_skipped"] += cs.skipped
        rec.update(self._collect_metrics(cs))
        rec.update(self.prefilter.metrics())
        rec.update(self.timer.pop_step())
        self._log("train", rec)
        return rec

    def _batch_metrics(self, batch, kept) -> dict:
        """Completion statistics over the whole batch (gathered from every rank; call on all ranks)."""
        none = torch.zeros(0)
        lengths = self.dist.gather(batch.completion_lengths.float() if batch is not None else none)
        kept_len = self.dist.gather(kept.completion_lengths.float() if kept is not None else none)
        if not lengths.numel():
            return {}
        return {
            "completions/mean_length": lengths.mean().item(),
            "completions/max_length": lengths.max().item(),
            "completions/min_length": lengths.min().item(),
            "completions/clipped_frac": (lengths >= self.cfg.model.max_completion_len).float().mean().item(),
            "completions/kept_mean_length": kept_len.mean().item() if kept_len.numel() else 0.0,
            "train/groups": float(lengths.numel() // self.cfg.selector.n),
            "train/rollouts_trained": float(kept_len.numel()),
        }

    def _collect_metrics(self, cs) -> dict:
        rewards = torch.cat([r.flatten() for r in cs.all_rewards]) if cs.all_rewards else torch.zeros(0)
        correct = torch.cat([r.flatten() for r in cs.all_correct]) if cs.all_correct else torch.zeros(0)
        out = {
            "reward/mean": rewards.mean().item() if rewards.numel() else float("nan"),
            "reward/std": rewards.std().item() if rewards.numel() > 1 else 0.0,
            "reward/accuracy": correct.mean().item() if correct.numel() else float("nan"),
            "reward/nonfinite": self.dist.sum(cs.nonfinite_rewards),  # counted on each rank's shard
            "reward/timeouts": self.dist.sum(cs.reward_timeouts),
            "reward/errors": self.dist.sum(cs.reward_errors),
            "rollout/rounds": float(cs.rounds),
            "rollout/prompts_drawn": float(cs.drawn),
            "rollout/groups": float(cs.generated_groups),
            "rollout/dropped_zero_var": float(cs.dropped_zero_var),
            "rollout/rollouts": float(cs.rollouts),
            "rollout/tokens": float(cs.tokens),
            "filter/skipped": float(cs.skipped),
            "filter/rollouts_avoided": float(cs.skipped * self.cfg.selector.n),
        }
        for k in sorted(cs.terms):  # every rank has the same reward terms
            v = self.dist.gather(torch.tensor(cs.terms[k], dtype=torch.float32))
            out[f"reward/{k}"] = v.mean().item() if v.numel() else float("nan")
        return out

    def evaluate(self) -> dict:
        from pods.eval import evaluate

        with self.timer.phase("eval"), autocast(self.cfg, self.device), self.dist.full_weights(self.model):
            metrics, samples = evaluate(
                self.generator, self.reward_fn, self.eval_prompts, self.eval_answers, self.cfg, self.dist
            )
        metrics["timing/eval"] = self.timer.step_times.pop("eval", 0.0)  # not part of the next step's timing
        self._log("eval", metrics)
        self.last_eval_step = self.step
        for smp in samples:
            log.info(
                "eval sample | gold=%s correct=%s | %r", smp["gold"], smp["correct"], smp["completion"][:200]
            )
        log.info(
            "step %d  clock %.1fs  eval/accuracy %.3f",
            self.step,
            self.timer.train_clock,
            metrics["eval/accuracy"],
        )
        return metrics

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
