"""The GRPO loop with PODS down-sampling and GRESO pre-rollout filtering.

    for each step:
        prompts -> pre-rollout filter -> n rollouts each -> rewards -> dynamic sampling    (pods/collect.py)
        keep m of n per prompt (selector)  -> advantages on the kept m
        clipped policy-gradient update (mu iterations, micro-batched)
        eval / checkpoint on the training clock

Every stage runs under a named timer; the training clock excludes eval, checkpointing and compile warm-up.
Each stage is built from its own groups (pods/config.py), not the whole config.
Benchmarks and tools hook in through `callbacks` (pods/callbacks.py), not by patching methods. A component
that breaks its contract ends the run in one line with the last completed step saved (pods/faults.py).
"""

from __future__ import annotations

import gc
import logging
from dataclasses import asdict
from pathlib import Path

import torch
import transformers

from pods import faults, history, runlock, stopping
from pods.callbacks import ZeroVarianceWarning
from pods.checkpoint import RngStreams
from pods.collect import Stages, collect
from pods.config import TrainConfig
from pods.data import PromptSampler, load_prompt_sets
from pods.distributed import Dist
from pods.eval import Evaluator
from pods.guard import RunGuard
from pods.models import (
    autocast,
    load_policy,
    load_tokenizer,
    reference_policy,
    resolve_device,
    resolve_dtype,
    set_cuda_allocator,
)
from pods.prefilter import PrefilterStage, build_prefilter
from pods.resume import Checkpointer
from pods.reward import RewardStage, build_reward, check_on_data
from pods.rollout import RolloutSettings, build_backend
from pods.rollout.dynamic_sampling import DynamicSampling
from pods.rollout.stage import RolloutStage, completion_metrics
from pods.run_state import RunState
from pods.selector.stage import SelectorStage
from pods.threads import set_threads
from pods.timing import Every, PhaseTimer, freeze_heap
from pods.tracking import MetricsLogger, Progress, write_run_info
from pods.update import estimate_advantages
from pods.update.stage import UpdateStage

log = logging.getLogger("pods")


class Trainer(RunState):
    """The loop; what it logs, saves and restores is RunState's (pods/run_state.py)."""

    def __init__(self, config: TrainConfig, run_dir: Path, callbacks=(), identity: dict | None = None):
        """`config`: the run's settled settings, what pods.train.preflight(cfg) returns (every check run,
        hardware=auto decided); a Trainer neither checks nor settles a config again. `identity`: who the run
        is (pods.identity.describe of the composed config; default: of `config`), for run_info.json."""
        if not isinstance(config, TrainConfig) or not config.update.settled():
            got = type(config).__name__ + ("" if not isinstance(config, TrainConfig) else ", not settled")
            raise TypeError(f"Trainer takes the settled TrainConfig of pods.train.preflight(cfg), got {got}")
        self.run_dir, self.callbacks = Path(run_dir), list(callbacks)
        c = config
        self.device = resolve_device(c.hardware)
        self.settings = c
        self.run_dir.mkdir(parents=True, exist_ok=True)
        transformers.set_seed(c.seed)
        set_cuda_allocator(c.hardware, self.device)  # before anything is allocated on the GPU
        self.threads = set_threads(c.hardware.num_threads, self.device.type)  # 0: the free cores
        self.dist = Dist(c.hardware, self.device)
        # one run per run dir: pods.train took the lock already; a Trainer built in code takes it here
        if self.dist.is_main:
            runlock.acquire(self.run_dir)
        self.ckpt = Checkpointer(self.run_dir, self.dist, c.checkpoint.keep_last, c.hardware.lora)
        plan = self.ckpt.plan() if c.resume else None  # a bad resume fails here, before the model loads
        changed = self._same_experiment(plan) if plan else {}  # a changed experiment: refused here too
        self.tok = load_tokenizer(c.model)
        self.reward_fn = build_reward(c.reward)
        self.train_set, self.eval_set = load_prompt_sets(c.dataset, c.model, self.tok)
        check_on_data(self.reward_fn, self.train_set, self.eval_set, c.dataset.name)  # a bad term: one line
        changed.update(self._same_data(plan))  # other data than the checkpoint's: refused here too
        # the math-verify workers start now if the data needs them
        self.reward_fn.prepare(self.train_set.answers + self.eval_set.answers)
        # the heavy part comes after every check
        self.model, ref = load_policy(
            c.model, c.hardware, self.device, c.algo.beta > 0, c.update.gradient_checkpointing
        )
        self.ref = reference_policy(self.model, ref, c.algo.beta, c.hardware.lora)
        self.dtype = resolve_dtype(c.model, c.hardware, self.device)  # the compute dtype (autocast)
        self.model = self.dist.shard_model(  # FSDP: in place
            self.model, self.dtype, c.update.fsdp_prefetch, c.update.fsdp_unit_params
        )
        on_gpu = self.device.type == "cuda"
        self.timer = PhaseTimer(sync_cuda=on_gpu, peak_memory=on_gpu)
        # the rollout backend (pods/rollout/backend.py); `generator` means only a torch.Generator here
        self.backend = build_backend(
            RolloutSettings.from_config(c), self.model, self.tok, self.device, self.timer
        )
        self.update = UpdateStage.build(c, self.model, self.ref, self.device, self.dist)
        self.optimizer, self.scheduler = self.update.optimizer, self.update.scheduler  # what checkpoints hold
        faults.count_optimizer_steps(self)  # a component's fault after one saves nothing (pods/faults.py)
        self.snapshot = None  # the state at the current step's start (one process: pods/faults.py)
        self.guard = RunGuard(self.model, self.dist, c.optim, c.max_empty_steps)  # non-finite, empty steps
        self.sampler = PromptSampler(len(self.train_set.prompts), c.seed)  # same draws on every rank
        prefilter = build_prefilter(c.prefilter, c.seed)  # the registered filter the prefilter stage calls
        self.select_rng = torch.Generator().manual_seed(c.seed * 1000 + self.dist.rank)
        self.rng = RngStreams(self.select_rng)  # this rank's random streams, the selection generator's too
        self.selector = SelectorStage(c.selector, self.select_rng, self.dist, self.timer)
        self.callbacks.append(ZeroVarianceWarning(c.sampling.temperature, c.selector.n, self.dist.is_main))
        train, dist, n = self.train_set, self.dist, c.selector.n
        self.stages = Stages(  # each built once, from its own groups; the selector and update stages above
            prefilter=PrefilterStage(
                prefilter, self.sampler, n, len(train.prompts), dist, self.timer, c.prefilter.name
            ),
            rollout=RolloutStage.build(c, self.backend, train.prompts, dist, self.timer),
            reward=RewardStage(self.reward_fn, train.prompts, train.answers, train.fields, dist, self.timer),
            dynamic_sampling=DynamicSampling(c.dynamic_sampling, dist),
        )
        self.evaluator = Evaluator.build(c, self.backend, self.reward_fn, self.eval_set, dist)
        self.eval_every = Every(c.eval.every_steps, c.eval.every_seconds)
        self.ckpt_every = Every(c.checkpoint.every_steps, c.checkpoint.every_seconds)
        self.step, self.last_eval_step = 0, -1  # each step is evaluated at most once
        self.eval_pending = False  # an eval a stop cut short: the resume runs it first (pods/stopping.py)
        self.changes = self.saved_changes = 0  # records logged in all / up to the newest checkpoint
        self.counters = {"rollouts": 0, "tokens_generated": 0, "tokens_trained": 0, "prompts_skipped": 0}
        data = {"train": self.train_set.report.__dict__, "eval": self.eval_set.report.__dict__}
        decisions = getattr(self.backend, "decisions", None)  # rollout's auto settings: rows, decode
        self.run_info = write_run_info(
            c, self.run_dir, data, dist.world, self.threads, dist.is_main, bool(plan), decisions, identity
        )
        resume_step = self._resume(plan) if c.resume else None
        self.resumed_from = resume_step if plan else None  # the checkpoint's step, None: a fresh start
        changes = {k: list(v) for k, v in changed.items()}
        self.history_event(
            "resume" if plan else "start",
            step=self.step,
            world_size=self.dist.world,
            changed=changes,
            command=history.command(),
        )
        self.logger = (
            MetricsLogger(c.logger, self.run_dir, self.run_info, asdict(c)) if self.dist.is_main else None
        )
        if self.logger and resume_step is not None:  # drop records after the checkpoint (-1: all)
            self.logger.load_state_dict(
                {"step": resume_step, "metrics_lines": (plan or {}).get("metrics_lines")}
            )

    # --- the loop -------------------------------------------------------------------------------

    def done(self) -> bool:
        c = self.settings
        return self.step >= c.max_steps or (
            c.max_train_time > 0 and self.timer.train_clock >= c.max_train_time
        )

    def train(self) -> dict:
        c = self.settings
        if (self.eval_pending or self.step == 0 and c.eval.at_start) and self.last_eval_step != self.step:
            self.evaluate()
        name, clock = self.run_info["name"], self.timer.train_clock
        bar = Progress(c.max_steps, c.max_train_time, clock, self.step, name, not self.dist.is_main)
        frozen = False
        try:
            while not self.done():
                with self.timer.phase("log"):
                    self.snapshot = faults.snapshot(self)  # what a component's fault or a stop goes back to
                    for cb in self.callbacks:
                        cb.on_step_start(self)
                with faults.saved_on_fault(self, f"step {self.step + 1}"):  # one line, the last step saved
                    rec = self.train_step()
                with self.timer.phase("log"):  # charged to the next step's record, as its record's writing
                    for cb in self.callbacks:
                        cb.on_step_end(self, rec)
                    bar.advance(self.step, self.timer.train_clock, rec.get("reward/mean", float("nan")))
                if not frozen:  # once, after the first step's warm-ups and compiles
                    with self.timer.phase("gc"):
                        freeze_heap()
                    frozen = True
                if self.eval_every.due(self.step, self.timer.train_clock):
                    self.evaluate()
                if self.ckpt_every.due(self.step, self.timer.train_clock) and self.guard.may_save():
                    self.save()
            self.guard.at_end(self.step)  # not on steps that rolled out nothing
            for cb in self.callbacks:  # a callback written before this hook has none
                if hasattr(cb, "on_loop_end"):
                    cb.on_loop_end(self)
        finally:
            if frozen:  # collectable again once the loop is over
                gc.unfreeze()
            bar.close()  # a run that stops here prints its line below the bar, not on it
        final = {}
        if c.eval.at_end and self.last_eval_step != self.step:  # a resumed finished run: already evaluated
            final = self.evaluate()
        if c.checkpoint.save_final and self.changes != self.saved_changes:
            self.save()  # not again when nothing happened since the checkpoint this run resumed from
        if self.logger:
            self.logger.finish()
        return final

    def train_step(self) -> dict:
        """One step of the algorithm, a stage a line (each under its named timer)."""
        c, t = self.settings, self.timer
        t.start_step()
        # rounds of: prefilter, rollout, reward, observe, dynamic sampling's refill; a stop signal abandons them
        with autocast(self.dtype, self.device), self.guard.at(self.step + 1), stopping.abandonable():
            batch = collect(self.stages, c.algo.prompts_per_step, self.dist)  # this rank's groups
        self.step += 1
        kept = self.selector(batch)  # keep m of n per prompt
        self.advantages(kept, batch)
        with t.phase("update"), autocast(self.dtype, self.device):
            rec = self.update(kept)
            self.guard.after_update(self.step, rec)  # a non-finite loss, gradient norm, weight: stop
        with t.phase("weight_sync"):
            self._sync_generation_weights()
        rec.update(self._step_metrics(batch, kept, rec))
        with t.phase("log"):
            self._log("train", rec)
        self.guard.after_step(self.step, self.stages.rollout.rollouts)  # a step that rolled out nothing
        return rec

    def advantages(self, kept, batch) -> None:
        """Advantages of the kept rollouts, by the estimator `advantage.name` (given all n rewards too)."""
        if kept is None:
            return
        a = self.settings.advantage
        with self.timer.phase("advantages"):
            kept.advantages = estimate_advantages(a.name, kept.rewards, batch.rewards, a.own())

    def _step_metrics(self, batch, kept, update: dict) -> dict:
        s, st = self.settings.selector, self.stages
        out = {}
        with self.timer.phase("metrics"):  # gathers and reductions across ranks: a step cost, named
            out.update(self.selector.metrics(st.reward.step_rewards(), kept))
            out.update(
                completion_metrics(batch, kept, self.dist, s.n, self.settings.model.max_completion_len)
            )
            out.update(st.metrics())
        self.counters["tokens_trained"] += int(update.get("update/tokens", 0))
        self.counters["rollouts"] += st.rollout.rollouts
        self.counters["tokens_generated"] += st.rollout.tokens
        self.counters["prompts_skipped"] += st.prefilter.skipped
        out.update(self.timer.pop_step())
        return out

    def evaluate(self) -> dict:
        phase, weights = self.timer.phase("eval"), self.dist.full_weights(self.model)
        at, stop = self.guard.at(self.step, "eval"), stopping.abandonable_eval(self)
        fault = faults.saved_on_fault(self, f"the eval at step {self.step}")
        with fault, at, phase, autocast(self.dtype, self.device), weights, stop:
            metrics, samples = self.evaluator()
        metrics.update(self.timer.pop_phase("eval"))  # not part of the next step's timing
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
