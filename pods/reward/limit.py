"""A time limit on reward functions pods does not bound itself: a plugin's (`plugins:`), which runs in the
training process. pods's own rewards grade through the Grader, whose workers have per-completion and
per-batch limits (reward.timeout_s, reward.batch_timeout_s).

The limit is SIGALRM in the main thread, so the function runs where it always ran (its results, its use of
torch or of math-verify unchanged) and a hang in Python code, a sleep or a blocking read is cut short. A
function that catches BaseException, or an alarm of its own that replaces this one, escapes the limit; a stop
signal still ends the run in time (pods/stopping.py).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable

from pods.errors import PluginTimeout


class _TimedOut(BaseException):
    """Raised by the alarm inside the function; a BaseException, so its own `except Exception` lets it pass."""


def is_plugin(fn: Callable) -> bool:
    return not str(getattr(fn, "__module__", "") or "").startswith("pods.")


def call_with_limit(name: str, fn: Callable, limit_s: float, *args, **kw):
    """fn(*args, **kw), or PluginTimeout (a RunError) naming the reward when it has not returned within `limit_s` (0: none).
    Off the main thread (no SIGALRM there) the call is not bounded."""
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
        where = f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', fn)}"
        raise PluginTimeout(
            f"reward {name!r} ({where}) did not return within reward.plugin_timeout_s={limit_s:g} s; fix the "
            "function, or raise the limit (0: none)"
        ) from None
    finally:
        armed[0] = False
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous if previous is not None else signal.SIG_DFL)
