"""The command line's refusals: a retired spelling, a `+group=` Hydra would refuse, a config Hydra cannot
compose and the errors a run raises for bad input each end as one line on stderr and exit status 2, not a
traceback. pods.train's main() calls `run_hydra(task)` once; everything here is about Hydra's ways of
reporting, nothing about training.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

import yaml
from hydra.errors import CompactHydraException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import ConfigAttributeError, ConfigKeyError, OmegaConfBaseException

from pods.config import CONF_DIR, ConfigError, schema_error
from pods.errors import CheckpointError, IntegrityError, PluginError, RunError, file_fault
from pods.spelling import retired_hint, retired_key

log = logging.getLogger("pods")

_started = False  # the task function ran: composition succeeded
# HYDRA_FULL_ERROR makes Hydra raise a composition error instead of printing it, so run_hydra can name the new
# spelling of a retired key set in a YAML file; unset once composed (unless the user had set it)
_RAISE_COMPOSE_ERRORS = "HYDRA_FULL_ERROR" not in os.environ


def fail(msg: str) -> None:
    """One line on stderr (and in the log file), exit 2."""
    error_line(msg)
    sys.exit(2)


def error_line(msg: str, kind: str = "") -> None:
    """`pods: error: msg` on stderr, printed once: the log files (Hydra's `<run dir>/*.log`) get it as an ERROR
    record (`kind: msg`), the console not a second time."""
    print(f"pods: error: {msg}", file=sys.stderr)
    record = log.makeRecord(
        log.name, logging.ERROR, __file__, 0, "%s", (f"{kind}: {msg}" if kind else msg,), None
    )
    for h in dict.fromkeys([*log.handlers, *logging.getLogger().handlers]):
        if isinstance(h, logging.FileHandler) and record.levelno >= h.level:
            h.handle(record)


def composed() -> None:
    """Hydra has composed the config: from here on it reports errors its own way."""
    if _RAISE_COMPOSE_ERRORS:
        os.environ.pop("HYDRA_FULL_ERROR", None)


@contextmanager
def one_line_errors():
    """The task function's body: an error that names bad input (config, data, hub, metrics, checkpoint) or a
    component that broke its contract, or a run that stopped rather than measure something else
    (pods/guard.py), is one line and exit 2."""
    from pods.data.tasks import DataError
    from pods.hub import OfflineError
    from pods.tracking import MetricsGapError

    global _started
    _started = True
    composed()
    try:
        yield
    except (
        ConfigError,
        DataError,
        OfflineError,
        MetricsGapError,
        CheckpointError,
        PluginError,
        IntegrityError,
        RunError,
    ) as e:
        error_line(str(e), type(e).__name__)
        sys.exit(2)


def default_groups() -> set[str]:
    """The groups conf/train.yaml's defaults list already holds a slot for (`optional experiment: null`, ...)."""
    defaults = OmegaConf.load(Path(CONF_DIR) / "train.yaml").defaults
    keys = (k for d in defaults if isinstance(d, DictConfig) for k in d)
    return {k.removeprefix("optional ").removeprefix("override ").strip() for k in keys}


def plus_hint(args: list[str]) -> str | None:
    """`+experiment=greso` asks Hydra to append a second experiment to the defaults list, which Hydra refuses
    ("Multiple values for experiment"): every group already has its slot, and the slots' order, not the
    command line's, decides what wins. One line naming the spelling to use instead."""
    groups = default_groups()
    for a in args:
        group = a[1:].split("=", 1)[0].split("@", 1)[0]
        if a.startswith("+") and not a.startswith("++") and "=" in a and group in groups:
            return f"{a}: '{group}' already has its slot in conf/train.yaml's defaults; write {a[1:]} (without '+')"
    return None


def run_hydra(task: Callable[[], object]) -> None:
    """Run the @hydra.main `task` with the command line's refusals around it (the module docstring)."""
    hint = retired_hint(sys.argv[1:]) or plus_hint(sys.argv[1:])
    if hint:  # before Hydra starts (and its logging): one line on stderr, exit 2
        print(f"pods: error: {hint}", file=sys.stderr)
        sys.exit(2)
    if _RAISE_COMPOSE_ERRORS:
        os.environ["HYDRA_FULL_ERROR"] = "1"
    try:
        task()
    except yaml.YAMLError as e:  # a config file that does not parse (the run's own are read leniently)
        print(f"pods: error: {yaml_error(e)}", file=sys.stderr)
        sys.exit(2)
    except OSError as e:  # a file Hydra or pods cannot read or write: its log, .hydra/, a full disk
        print(f"pods: error: {file_fault(e)}", file=sys.stderr)
        sys.exit(2)
    except SystemExit as e:
        # Hydra reports a config it cannot compose (unknown key, wrong type, unknown group option) and
        # exits 1; that is a config error like any other: exit 2.
        if e.code == 1 and not _started:
            sys.exit(2)
        raise
    except CompactHydraException as e:
        if _started or not _RAISE_COMPOSE_ERRORS:
            raise
        print(compose_error(e), file=sys.stderr)
        sys.exit(2)


def yaml_error(e: yaml.YAMLError) -> str:
    """`<file>:<line>:<column>: <what> (YAML does not parse)`: the file a config group or --config-dir holds."""
    mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
    where = f"{mark.name}:{mark.line + 1}:{mark.column + 1}" if mark else "a config file"
    what = " ".join(str(x) for x in (getattr(e, "context", None), getattr(e, "problem", None)) if x) or str(e)
    return f"{where}: the YAML does not parse ({what}); fix the file"


def compose_error(e: Exception) -> str:
    """What Hydra prints for a config it cannot compose, or one line naming the new key when the key it
    stopped on is a retired spelling set in a YAML file (an old-layout `conf/hardware/mine.yaml`)."""
    cause = e.__cause__ or e.__context__
    key = getattr(cause, "full_key", None)  # the OmegaConf error it stopped on
    hint = retired_key(str(key)) if key else None
    # a key the schema lacks: Hydra's advice ("use +key=...") leads to a refusal too; say what the keys are
    if not hint and isinstance(cause, (ConfigKeyError, ConfigAttributeError)) and key:
        return f"pods: error: {schema_error(cause)}"
    cause = f"\n{e.__cause__}" if isinstance(e.__cause__, OmegaConfBaseException) else ""
    return f"pods: error: {key} (in a YAML file): {hint}" if hint else f"{e}{cause}"
