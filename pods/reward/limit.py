"""A time limit on reward functions pods does not bound itself: a plugin's (`plugins:`), which runs in the
training process. pods's own rewards grade through the Grader, whose workers have per-completion and
per-batch limits (reward.timeout_s, reward.batch_timeout_s).

The limit is SIGALRM in the main thread, so the function runs where it always ran (its results, its use of
torch or of math-verify unchanged) and a hang in Python code, a sleep or a blocking read is cut short. A
function that catches BaseException, or an alarm of its own that replaces this one, escapes the limit; a stop
signal still ends the run in time (pods/stopping.py). While it waits, a line every WAIT_LINE_S seconds names
the reward and how long it has run, with or without a limit.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable
from contextlib import contextmanager

from pods.errors import PluginTimeout

log = logging.getLogger("pods")
WAIT_LINE_S = 30.0  # while a plugin's reward has not returned, a line this often says which one it is


class _TimedOut(BaseException):
    """Raised by the alarm inside the function; a BaseException, so its own `except Exception` lets it pass."""


def is_plugin(fn: Callable) -> bool:
    return not str(getattr(fn, "__module__", "") or "").startswith("pods.")


def where(fn: Callable) -> str:
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', fn)}"


@contextmanager
def waiting_lines(name: str, fn: Callable, limit_s: float):
    """While the body runs, a line every WAIT_LINE_S seconds naming the reward and how long it has taken
    (from a thread: the call itself may be stuck anywhere)."""
    done, start = threading.Event(), time.monotonic()
    bound = f"the run stops at reward.plugin_timeout_s={limit_s:g} s" if limit_s > 0 else "no time limit"

    def watch() -> None:
        while not done.wait(WAIT_LINE_S):
            log.warning(
                "reward %r (%s) still running after %.0f s (%s)",
                name,
                where(fn),
                time.monotonic() - start,
                bound,
            )

    thread = threading.Thread(target=watch, name=f"pods-reward-wait-{name}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


def call_with_limit(name: str, fn: Callable, limit_s: float, *args, **kw):
    """fn(*args, **kw), or PluginTimeout (a RunError) naming the reward when it has not returned within `limit_s`
    (0: none); a line every WAIT_LINE_S seconds while it runs. Off the main thread (no SIGALRM there) the call is
    not bounded."""
    with waiting_lines(name, fn, limit_s):
        return _bounded(name, fn, limit_s, *args, **kw)


def _bounded(name: str, fn: Callable, limit_s: float, *args, **kw):
    if limit_s <= 0 or threading.current_thread() is not threading.main_thread():
        return fn(*args, **kw)
    armed = [True]

    def on_alarm(signum, frame):
        if armed[0]:
            raise _TimedOut

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, limit_s)
    try:
        out = fn(*args, **kw)
        armed[0] = False
        return out
    except _TimedOut:
        raise PluginTimeout(
            f"reward {name!r} ({where(fn)}) did not return within reward.plugin_timeout_s={limit_s:g} s; fix the "
            "function, or raise the limit (0: none)"
        ) from None
    finally:
        armed[0] = False
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous if previous is not None else signal.SIG_DFL)
