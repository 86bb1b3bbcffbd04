"""Worker side of the grader: `python worker.py` reads JSON jobs on stdin and writes JSON verdicts.

Stdlib + math_verify only (the parent runs this file by path, so the worker never imports pods). Only
math-verify's LaTeX parser (ANTLR) is used; its plain-expression parser calls sympy's parse_expr, i.e.
eval, and is never enabled. The parent kills a worker at its deadline; the worker's own alarm
(soft_s) stops most slow inputs earlier, without the cost of a restart.
"""

from __future__ import annotations

import functools
import json
import os
import signal
import sys

WORKER_MEM_BYTES = 4 << 30  # address-space cap of the worker: memory bombs raise MemoryError there
# math-verify rounds floats to 6 decimals before comparing, so '0.785398' would equal '\\pi/4'. 12 places
# keep symbolic equalities (sqrt(8) = 2 sqrt(2)) and refuse such near misses; see numbers.py for the rule.
FLOAT_ROUNDING = 12
# Compared once at start-up: sympy imports much of itself lazily, and a fresh worker's first symbolic
# comparison would otherwise take ~0.4 s of someone's timeout.
WARMUP = [("1+x^2", "560"), ("(1,2)", "[1,2]"), ("\\{1,2\\}", "\\{2,1\\}"), ("2\\pi", "6.28"), ("x=5", "5"),
          ("x \\in [0,1]", "[0,1]"), ("\\begin{pmatrix}1\\\\2\\end{pmatrix}", "(1,2)"), ("\\text{yes}", "yes")]  # fmt: skip


class _SoftTimeout(BaseException):
    """Raised by SIGALRM in the worker; a BaseException so math-verify's `except Exception` lets it pass."""


def _on_alarm(signum: int, frame: object) -> None:
    raise _SoftTimeout


@functools.lru_cache(maxsize=4096)  # gold answers repeat n times per prompt
def _parse(s: str) -> list:
    from math_verify import LatexExtractionConfig, parse

    if not ("$" in s or "\\boxed" in s or "\\(" in s or "\\[" in s):
        s = f"${s}$"
    # LaTeX (ANTLR) only, never ExprExtractionConfig: that one hands text to sympy's parse_expr, i.e. eval
    return parse(s, [LatexExtractionConfig()], parsing_timeout=None)


def _math_verify(pred: str, gold: str) -> bool:
    from math_verify import verify

    g, p = _parse(gold), _parse(pred)
    return bool(g and p and verify(g, p, float_rounding=FLOAT_ROUNDING, timeout_seconds=None))


def _answer(job: dict) -> str:
    if job["soft_s"] is not None:
        signal.setitimer(signal.ITIMER_REAL, max(job["soft_s"], 1e-3))
    try:
        return "true" if _math_verify(job["pred"], job["gold"]) else "false"
    except _SoftTimeout:
        return "timeout"
    except Exception:  # RecursionError, MemoryError, anything sympy throws
        return "error"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


# Signals meant for the trainer reach every process of its job: Slurm's time-limit SIGUSR2 and a preemption's
# SIGTERM go to the whole job step, Ctrl-C's SIGINT to the terminal's process group. Left at their default
# they would kill a worker mid-job, and the answer it was grading would count as an error. The parent ends
# its workers itself (SIGKILL, stdin EOF, PR_SET_PDEATHSIG), so they ignore these.
IGNORED_SIGNALS = ("SIGINT", "SIGTERM", "SIGHUP", "SIGUSR1", "SIGUSR2")


def _ignore_job_signals() -> None:
    for name in IGNORED_SIGNALS:
        signal.signal(getattr(signal, name), signal.SIG_IGN)


def _die_with_parent() -> None:
    """Linux: SIGKILL this worker when its parent dies, even while it sits in C code (stdin EOF ends it
    otherwise, but only between jobs)."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def serve() -> None:
    """Worker main loop: one JSON job per line on stdin, one JSON verdict per line on stdout."""
    _ignore_job_signals()  # first: a signal while math_verify imports would kill the worker before it is ready
    import logging
    import resource

    out = os.fdopen(os.dup(1), "w")  # replies go here; stray prints from libraries go to /dev/null
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
    _die_with_parent()
    logging.getLogger("math_verify").setLevel(logging.CRITICAL)
    for pred, gold in WARMUP:
        _math_verify(pred, gold)
    resource.setrlimit(resource.RLIMIT_AS, (WORKER_MEM_BYTES, WORKER_MEM_BYTES))
    signal.signal(signal.SIGALRM, _on_alarm)
    os.dup2(os.open(os.devnull, os.O_WRONLY), 2)  # ANTLR and sympy warnings are noise from here on
    print("ready", file=out, flush=True)
    for line in sys.stdin:
        try:
            verdict = _answer(json.loads(line))
        except BaseException:  # a late alarm, or a malformed job
            verdict = "error"
        print(json.dumps(verdict), file=out, flush=True)


if __name__ == "__main__":
    serve()
