"""Entry point: `python -m pods.train [group=option ...] [key=value ...]` (Hydra; `-m` for sweeps).

Order of work: compose the config -> validate every field -> check the model/data sources -> size the
model for the card (hardware=auto: full fine-tune or LoRA, pods/memory.py) -> load tokenizer and data
(bad rows reported) -> load the model -> train. Anything wrong with the config or
the inputs fails before the model loads, with a message naming the key (one line and exit 2: pods/cli.py,
which also holds Hydra's errors and the retired spellings).
"""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path

import hydra
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from pods import cli, identity, runlock
from pods.config import CONF_DIR, ConfigError, DatasetConfig, TrainConfig, as_container, register_schema
from pods.errors import RunError, file_fault, writing
from pods.files import refuse_links_in, write_text

log = logging.getLogger("pods")
register_schema()
identity.register_resolver()  # `${pods.run_name:}`: the run directory's name, from the whole config


def check_writable(path: str | Path, key: str) -> None:
    """Fail with one line if `path` (a directory, created if missing) cannot hold new files. Probes by
    writing a file, since permission bits say nothing for root or on a read-only mount."""
    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".pods_write_check_"):
            pass
    except OSError as e:
        raise ConfigError(
            f"{key}={str(path)!r} is not writable ({e.strerror or type(e).__name__}); choose another "
            "directory or fix its permissions"
        ) from None


def check_run_dir(run_dir: str | Path, resume: bool, who: dict | None = None) -> None:
    """Refuse to write into a directory that already holds a run, unless asked to resume it: nothing
    already saved is overwritten or mixed with a new run's metrics; the message tells this experiment from
    another (`who`: pods.identity.describe of this config). The run directory and its checkpoints/ must be
    writable, and no file pods writes there a symbolic link: checked here, not at the first save."""
    if not runlock.main_process():
        return  # under torchrun rank 0 checks; the others would race with the files rank 0 starts writing
    run_dir = Path(run_dir)
    ckpts = run_dir / "checkpoints"
    check_writable(run_dir, "run_dir")
    refuse_links_in(run_dir)  # a link in place of a file pods writes: one line now, not at the first save
    if ckpts.exists():
        check_writable(ckpts, "run_dir/checkpoints")
    runlock.acquire(run_dir)  # held for the run's life: a second process on this dir stops here
    used = (ckpts.exists() and any(ckpts.glob("step_*"))) or (run_dir / "metrics.jsonl").exists()
    if not resume and used:
        raise ConfigError(identity.held_run_message(run_dir, who))


def check_task_config(d: DatasetConfig) -> None:
    """A procedural task's settings (dataset.task_kwargs) are checked by reasoning-gym's own config class
    here, without generating anything: a bad one is one line, not an AssertionError from data loading."""
    if d.source != "reasoning_gym":
        return
    from pods.data.tasks import task_is_cached

    if task_is_cached(d):  # these settings generated both splits before (pods/data/tasks.py): they are valid
        return
    from reasoning_gym.factory import DATASETS

    if d.task not in DATASETS:
        raise ConfigError(
            f"dataset.task={d.task!r} is not a reasoning-gym task; e.g. {', '.join(sorted(DATASETS)[:8])}, ..."
        )
    config_cls = DATASETS[d.task][1]
    try:
        conf = config_cls(size=d.train_size, seed=d.data_seed, **dict(d.task_kwargs))
        if hasattr(conf, "validate"):
            conf.validate()
    except (AssertionError, TypeError, ValueError, KeyError) as e:
        raise ConfigError(f"dataset.task_kwargs={dict(d.task_kwargs)} for task {d.task!r}: {e}") from None


def load_plugins(plugins: list[str]) -> None:
    """Import the modules named in `plugins:`; what they register becomes a valid name (pods.components).
    Anything their import raises is one ConfigError line (pods.registry.load_plugins)."""
    from pods.registry import load_plugins as load

    load(plugins)


def preflight(cfg, who: dict | None = None) -> TrainConfig:
    """Every check that needs no model weights; hardware=auto is settled here (full fine-tune or LoRA, the
    update's layout). Returns the run's typed settings (pods.config.TrainConfig, frozen), the only form of
    the config the stages see. `who`: the run's identity (pods.identity.describe(cfg), computed if not given)."""
    from pods.components import checked, log_summary, summary

    who = who or identity.describe(cfg)
    load_plugins(list(cfg.plugins))
    c = checked(cfg)  # every field, then every component name and its own settings (pods/components.py)
    # torch and transformers load only now: a config refused above costs about a second, not six
    from pods.memory import settle_hardware, settle_rollout
    from pods.models import check_model_source, resolve_device
    from pods.rollout import RolloutSettings, backend_class

    backend = backend_class(c.rollout.name)
    check_task_config(c.dataset)
    device = resolve_device(c.hardware)  # a GPU profile on a machine without a GPU fails here
    check_run_dir(c.run_dir, c.resume, who)
    check_model_source(c.model, c.hardware)
    c = settle_hardware(c, device)  # hardware=auto, once: LoRA or full, the update layout for this device
    c = settle_rollout(c, device)  # rollout.hf's auto decode knobs, so config.yaml holds what runs
    c.check()  # again: LoRA's own fields, when it was chosen
    backend.preflight(RolloutSettings.from_config(c))  # e.g. vllm: the engine is installed
    if runlock.main_process():  # the log's first lines: what runs, stage by stage (run_info.json's too)
        log_summary(summary(c))
    return c


def run(cfg, callbacks=()) -> dict:
    """One training run of a composed config; `callbacks` (pods/callbacks.py) join the loop's own.
    Ctrl-C and SIGTERM (and Slurm's signals in a Slurm job) end it with a checkpoint (pods/signals.py)."""
    from pods import signals, slurm, stopping
    from pods.stopping import StopRequested

    slurm.setup(cfg)  # in a Slurm job: a requeued job resumes; several tasks get their ranks from Slurm
    stop = slurm.handler()  # from here a signal stops the run within checkpoint.stop_deadline_s
    stop.deadline_s = signals.DEADLINE_S  # checkpoint.stop_deadline_s once the config is checked
    run_dir = OmegaConf.select(cfg, "run_dir", default=None)
    trainer = None
    try:
        # start-up: a stop abandons it at once (what it writes is appended or replaced whole, nothing is trained)
        with stopping.abandonable():
            who = identity.describe(cfg)  # as the run directory was named (conf/train.yaml, pods.identity)
            c = preflight(cfg, who)
            stop.deadline_s = c.checkpoint.stop_deadline_s
            # after the checks: a bad config is refused without loading the trainer's stack
            from pods.trainer import Trainer

            trainer = Trainer(c, Path(c.run_dir), callbacks=[stop, *callbacks], identity=who)
        config = Path(c.run_dir) / "config.yaml"
        if trainer.dist.is_main and (trainer.resumed_from is None or not config.exists()):
            # the settings the run started with (hardware=auto's choice included), for pods.compare; a
            # resume's changes go to history.jsonl, not here
            with writing(config):  # a link in its place is refused (pods/files.py)
                write_text(config, OmegaConf.to_yaml(as_container(c)))
        with slurm.lost_rank_ends_the_job(trainer):  # several tasks: a lost node is one line, not a traceback
            final = trainer.train()
        stop.check(trainer)  # a signal during the final eval or save: the run is saved; exit as signalled
        return final
    except StopRequested:  # rollout, reward, eval or start-up cut short: save as of the last completed step
        stop.abandoned(trainer, run_dir)
    except OSError as e:  # a full disk, a read-only file, ...: one line naming the file (pods/cli.py)
        raise file_fault(e, intact_note(run_dir)) from None
    finally:
        stop.uninstall()
        if run_dir:
            runlock.release(run_dir)


def intact_note(run_dir) -> str:
    """What a run stopped by a file error left: its newest checkpoint (saves are atomic, records appended)."""
    if not run_dir:
        return ""
    from pods.signals import latest_name

    return f"; nothing saved was changed, the newest checkpoint is {latest_name(run_dir)}"


class OutputDirCheck(Callback):
    """Hydra callback (conf/train.yaml: hydra.callbacks): check hydra.run.dir / hydra.sweep.dir before
    Hydra creates it, so an unwritable one is one line and exit 2, not a traceback from inside Hydra."""

    def on_run_start(self, config: DictConfig, **kwargs) -> None:
        self._check(config, "hydra.run.dir")
        if runlock.main_process():  # the run dir's lock, before Hydra writes .hydra/ and its log there
            try:
                runlock.acquire(OmegaConf.select(config, "hydra.run.dir"))
            except (ConfigError, RunError) as e:  # held by another run; a link in place of run.lock
                cli.fail(str(e))
            except OSError as e:  # run.lock on a full or read-only disk
                cli.fail(str(file_fault(e)))

    def on_multirun_start(self, config: DictConfig, **kwargs) -> None:
        self._check(config, "hydra.sweep.dir")

    @staticmethod
    def _check(config: DictConfig, key: str) -> None:
        cli.composed()  # before jobs start (a Slurm job inherits the environment)
        try:
            check_writable(OmegaConf.select(config, key), key)
        except ConfigError as e:
            cli.fail(str(e))


@hydra.main(config_path=CONF_DIR, config_name="train", version_base="1.3")
def _hydra_main(cfg: DictConfig) -> float | None:
    with cli.one_line_errors():
        final = run(cfg)
    return final.get("eval/accuracy") if final else None  # lets sweepers optimise the final accuracy


def main() -> None:
    cli.run_hydra(_hydra_main)  # Hydra's errors and retired spellings: one line, exit 2 (pods/cli.py)


if __name__ == "__main__":
    main()
