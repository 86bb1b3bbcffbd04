"""The config and checkpoint errors and the one-line checks every settings class uses (no imports of pods: any module may use it).

Each message names the key, the bad value and what is allowed: `selector.m=80 must be between 1 and ...`.
"""

from __future__ import annotations

import errno
import math
import reprlib
from contextlib import contextmanager
from typing import Any


class ConfigError(ValueError):
    """A config value is invalid; the message names the key and the allowed values."""


class CheckpointError(RuntimeError):
    """A checkpoint could not be written; the message says why and what is left intact (raised by
    pods/checkpoint.py; defined here so that the command line can name it without importing torch)."""


class PluginError(ValueError):
    """A registered component (a reward, a selector, a prefilter, an advantage estimator, a loss: a plugin's or
    pods' own) broke its contract when the loop called it: returned the wrong type, count, shape or indices, a
    non-finite value, or raised. The message names it (`selector 'x' returned ...`, `reward 'y' raised ...`)
    and shows what it returned; in a run, pods/faults.py adds what was saved."""


_SHORT = reprlib.Repr()  # keyword arguments only from Python 3.12
_SHORT.maxlist, _SHORT.maxlevel, _SHORT.maxstring, _SHORT.maxother = 4, 3, 40, 40


def shown(value: Any) -> str:
    """`value` in a few dozen characters on one line, for an error message: a tensor or array as its type,
    shape and first values (`tensor (2, 2) int64 [[0, 0], [1, 1]]`)."""
    if hasattr(value, "tolist") and hasattr(value, "shape"):
        return f"{type(value).__name__} {tuple(value.shape)} {value.dtype} {_SHORT.repr(value.tolist())}"
    return _SHORT.repr(value)


class IntegrityError(RuntimeError):
    """The run stopped because going on would measure something other than what its config says: a non-finite
    reward, loss, gradient or weight, or steps that rolled out nothing. The message names what, and at which
    step (pods/guard.py); no checkpoint is written from that state."""


class NonFiniteError(IntegrityError):
    """A NaN or inf, raised where it first appears; a stage does not know the step: pods/guard.py adds it."""

    def __init__(self, what: str, detail: str, step: int | None = None):
        self.what, self.detail, self.step = what, detail, step
        at = f" at step {step}" if step is not None else ""
        super().__init__(f"non-finite {what}{at}: {detail}")


class RunError(RuntimeError):
    """The run cannot go on for a cause outside its config: a file it cannot write (a full disk, a read-only
    file), a reward that does not return. The message names the file or the reward and the cause, and what
    is left intact; the command line prints it as one line (exit 2)."""


class PluginTimeout(RunError):
    """A plugin's reward did not return within reward.plugin_timeout_s (pods/reward/limit.py): a component's
    fault, saved and reported as the others are (pods/faults.py)."""


def component_fault(e: BaseException) -> bool:
    """A component's fault at run time: its contract broken or an exception it raised (PluginError), a reward
    that did not return (PluginTimeout), a reward's NaN or inf (the only NonFiniteError a component returns; the
    update's are the weights' and stay pods/guard.py's). pods/faults.py saves the last completed step on one."""
    named = isinstance(e, (PluginError, PluginTimeout))
    return named or (isinstance(e, NonFiniteError) and e.what == "reward")


@contextmanager
def writing(path):
    """Name `path` in an OSError raised while writing it: a write to an open file raises one that names none."""
    try:
        yield
    except OSError as e:
        if not e.filename:
            e.filename = str(path)
        raise


_FIX = {
    errno.ENOSPC: "free space on that disk",
    errno.EDQUOT: "free space within your quota",
    errno.EACCES: "make it writable",
    errno.EPERM: "make it writable",
    errno.EROFS: "write to a disk mounted read-write",
}


def file_fault(e: OSError, intact: str = "") -> RunError:
    """The one line of any OSError a run meets (ENOSPC, EACCES, EROFS, EIO, ...): the file, the cause and
    errno's name, what is intact (`intact`), what to do."""
    where = e.filename if e.filename is not None else "a file of the run"
    if e.filename2 is not None:
        where = f"{where} -> {e.filename2}"
    cause = e.strerror or str(e) or type(e).__name__
    code = errno.errorcode.get(e.errno or -1, type(e).__name__)
    fix = _FIX.get(e.errno, "fix the cause")
    return RunError(f"{where}: {cause} ({code}){intact}; {fix}, then continue the run with resume=true")


def choice(key: str, value: Any, allowed) -> None:
    allowed = list(allowed)
    if value not in allowed:
        raise ConfigError(f"{key}={value!r} is not valid; allowed values: {', '.join(map(str, allowed))}")


def number(key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(f"{key}={value!r} must be a finite number")
    return value


def positive(key: str, value: float, allow_zero: bool = False, note: str = "") -> None:
    ok = math.isfinite(number(key, value)) and (value >= 0 if allow_zero else value > 0)
    if not ok:
        raise ConfigError(f"{key}={value!r} must be {'>= 0' if allow_zero else '> 0'} and finite{note}")


def at_least(key: str, value: int, low: int, note: str = "") -> None:
    if number(key, value) < low:
        raise ConfigError(f"{key}={value!r} must be >= {low}{note}")


def rows_or_auto(key: str, value: Any) -> None:
    """A row count (an int >= 1) or "auto".

    >>> rows_or_auto("rollout.batch_size", "auto"), rows_or_auto("rollout.batch_size", 64)
    (None, None)
    """
    if value != "auto" and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise ConfigError(f"{key}={value!r} must be auto or a whole number >= 1")


def interval(key: str, value: float, lo: float, hi: float, closed: str = "[]", note: str = "") -> None:
    """value in the interval; `closed` says which ends are included: "[]", "[)", "(]" or "()"."""
    number(key, value)
    ok = (value >= lo if closed[0] == "[" else value > lo) and (
        value <= hi if closed[1] == "]" else value < hi
    )
    if not ok:
        raise ConfigError(f"{key}={value!r} must be in {closed[0]}{lo:g}, {hi:g}{closed[1]}{note}")
