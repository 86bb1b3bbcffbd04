"""Answer grading that untrusted model text cannot hang, crash or exploit.

Plain numbers are compared here, in a few microseconds. Anything else goes to math-verify in a worker
process (`python grading.py`, stdlib + math_verify only) that the parent kills at the deadline: sympy
can sit in C code (10^{10^{10}}, 1000000!) where no signal reaches it, so only a process boundary gives
a hard bound, in any thread. Only math-verify's LaTeX parser (ANTLR) is used; its plain-expression
parser calls sympy's parse_expr, i.e. eval, and is never enabled.
"""

from __future__ import annotations

import functools
import json
import os
import re
import select
import signal
import subprocess
import sys
import threading
import time
import weakref
from dataclasses import dataclass, field
from fractions import Fraction

REL_TOL = 1e-9  # decimals within this relative distance are equal; integers must be equal
MAX_DIGITS = 64  # longer numerals are not plain numbers (and go to math-verify, or score 0)
WORKER_MEM_BYTES = 4 << 30  # address-space cap of the worker: memory bombs raise MemoryError there
START_TIMEOUT_S = 120.0
# Compared once at start-up: sympy imports much of itself lazily, and a fresh worker's first symbolic
# comparison would otherwise take ~0.4 s of someone's timeout.
WARMUP = [("1+x^2", "560"), ("(1,2)", "[1,2]"), ("\\{1,2\\}", "\\{2,1\\}"), ("2\\pi", "6.28"), ("x=5", "5"),
          ("x \\in [0,1]", "[0,1]"), ("\\begin{pmatrix}1\\\\2\\end{pmatrix}", "(1,2)"), ("\\text{yes}", "yes")]  # fmt: skip

_NUMBER = re.compile(r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d*)?|[-+]?\.\d+")


def extract_answer(text: str, boxed: bool = True) -> str | None:
    """The last complete <answer>...</answer>, else (if `boxed`) the last \\boxed{...}, else None.

    >>> extract_answer("<answer>1</answer> no, <answer> 2 </answer>")
    '2'
    >>> extract_answer("so \\\\boxed{\\\\frac{1}{2}}."), extract_answer("42")
    ('\\\\frac{1}{2}', None)
    """
    end = text.rfind("</answer>")
    start = text.rfind("<answer>", 0, end) if end >= 0 else -1
    if start >= 0:
        end = text.find("</answer>", start)  # the closer that belongs to this opener
        return text[start + len("<answer>") : end].strip()
    return last_boxed(text) if boxed else None


def last_boxed(text: str) -> str | None:
    """Content of the last \\boxed{...} with balanced braces; one linear scan."""
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    depth, i = 1, start + len("\\boxed{")
    for j in range(i, len(text)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return text[i:j].strip()
    return None


def parse_number(s: str) -> Fraction | int | None:
    """A plain number ('1,000', '-4', '2.50', '$5', '12%') as an int or Fraction, else None.

    $ and % are units and are dropped, so '12%' equals '12' (not 0.12).

    >>> parse_number("$1,000"), parse_number("-0.5"), parse_number("1/2")
    (1000, Fraction(-1, 2), None)
    """
    s = s.strip()
    if len(s) > 2 * MAX_DIGITS:
        return None
    if len(s) > 2 and s[0] == s[-1] == "$":
        s = s[1:-1].strip()  # inline math $...$
    s = s.replace("\\$", "$").replace("\\%", "%").replace("{,}", ",")
    s = s.removesuffix("%").strip()
    if s[:1] in "+-" and s[1:2] == "$":
        s = s[0] + s[2:]
    s = s.removeprefix("$").strip()
    if not _NUMBER.fullmatch(s) or sum(c.isdigit() for c in s) > MAX_DIGITS:
        return None
    s = s.replace(",", "")
    return int(s) if "." not in s else Fraction(s)


def numbers_match(a: Fraction | int, b: Fraction | int) -> bool:
    """Exact for two integers, else equal up to REL_TOL."""
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    return abs(a - b) <= REL_TOL * max(1, abs(a), abs(b))


@dataclass
class Grader:
    """Scores completions against gold answers; counts timeouts and errors instead of raising.

    Holds one Sandbox (two worker processes), started on first need or by `start()`.
    """

    timeout_s: float = 1.0
    max_chars: int = 4096
    max_answer_chars: int = 256
    boxed: bool = True
    soft_fraction: float | None = 0.8  # the worker stops itself at this share of timeout_s; None: only kills
    n_timeouts: int = 0
    n_errors: int = 0
    _sandbox: Sandbox | None = field(default=None, init=False, repr=False)

    def start(self) -> Grader:
        if self._sandbox is None:
            self._sandbox = Sandbox()
        return self

    def close(self) -> None:
        if self._sandbox is not None:
            self._sandbox.close()
            self._sandbox = None

    def score(self, completion: str, gold: str) -> float:
        """1.0 if the completion's answer equals `gold`, else 0.0. Never raises."""
        try:
            verdict = self._verdict(completion, gold)
        except Exception:
            verdict = "error"
        self.n_timeouts += verdict == "timeout"
        self.n_errors += verdict == "error"
        return 1.0 if verdict == "true" else 0.0

    def _verdict(self, completion: str, gold: str) -> str:
        if not isinstance(completion, str) or not isinstance(gold, str):
            return "error"
        pred = extract_answer(completion[-self.max_chars :], self.boxed)
        if not pred or len(pred) > self.max_answer_chars:
            return "false"
        if len(gold) > 16 * self.max_answer_chars:
            return "error"  # a gold answer this long is a data problem; show it in n_errors
        a, b = parse_number(pred), parse_number(gold)
        if a is not None and b is not None:
            return "true" if numbers_match(a, b) else "false"
        return self.start()._sandbox.verify(pred, gold, self.timeout_s, self.soft_fraction)


class Sandbox:
    """A math-verify worker process with a hard deadline per call, and a warm spare for after a kill.

    Thread-safe; calls are serialised. `verify` returns 'true', 'false', 'timeout' or 'error'.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._procs: list[subprocess.Popen] = []  # every process started, for the finaliser
        self._finalizer = weakref.finalize(self, _kill_all, self._procs, os.getpid())
        self._live = self._spawn()
        try:
            ok = self._live.wait_ready(time.monotonic() + START_TIMEOUT_S)
        except EOFError:
            ok = False
        if not ok:
            self.close()
            raise RuntimeError(
                f"the math-verify worker did not start within {START_TIMEOUT_S:.0f} s; "
                f"check that `{sys.executable} -c 'import math_verify'` works"
            )
        self._spare = self._spawn()  # boots in the background (~2 s) while the live one works

    def _spawn(self) -> _Worker:
        w = _Worker()
        self._procs[:] = [p for p in self._procs if p.poll() is None] + [w.proc]
        return w

    def verify(self, pred: str, gold: str, timeout_s: float, soft_fraction: float | None) -> str:
        with self._lock:
            deadline = time.monotonic() + timeout_s
            soft_s = None if soft_fraction is None else soft_fraction * timeout_s
            job = {"pred": pred, "gold": gold, "soft_s": soft_s}
            try:
                if not self._live.wait_ready(deadline):
                    return "timeout"  # still starting after a kill (both workers were used up)
                reply = self._live.ask(job, deadline)
            except EOFError:  # it died: a crash counts as an error
                self._replace()
                return "error"
            if reply is None:  # past the deadline: kill it, the spare takes over
                self._replace()
                return "timeout"
            return reply

    def _replace(self) -> None:
        self._live.kill()
        self._live, self._spare = self._spare, self._spawn()

    def close(self) -> None:
        self._finalizer()


def _kill_all(procs: list[subprocess.Popen], owner: int | None = None) -> None:
    if owner is not None and owner != os.getpid():
        return  # a forked child (e.g. a DataLoader worker) must not kill its parent's workers
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()
        p.stdin.close()
        p.stdout.close()


class _Worker:
    """Parent side of one worker: JSON lines over pipes, read with select() against a deadline."""

    def __init__(self) -> None:
        code = "import runpy, sys; sys.path.pop(0); runpy.run_path(sys.argv[1], run_name='__main__')"
        self.proc = subprocess.Popen(
            [sys.executable, "-c", code, os.path.abspath(__file__)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            close_fds=True,
        )
        self.ready, self._buf = False, b""

    def wait_ready(self, deadline: float) -> bool:
        """True once the worker has imported math-verify; False at the deadline; EOFError if it died."""
        if not self.ready:
            self.ready = self._read_line(deadline) is not None
        return self.ready

    def ask(self, job: dict, deadline: float) -> str | None:
        try:
            self.proc.stdin.write(json.dumps(job).encode() + b"\n")
            self.proc.stdin.flush()
        except OSError as e:
            raise EOFError from e
        line = self._read_line(deadline)
        return None if line is None else json.loads(line)

    def _read_line(self, deadline: float) -> bytes | None:
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                raise EOFError
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return line

    def kill(self) -> None:
        _kill_all([self.proc])


# ----------------------------------------------------------------------------- worker side


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
    return bool(g and p and verify(g, p, timeout_seconds=None))


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


def serve() -> None:
    """Worker main loop: one JSON job per line on stdin, one JSON verdict per line on stdout."""
    import logging
    import resource

    out = os.fdopen(os.dup(1), "w")  # replies go here; stray prints from libraries go to /dev/null
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
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
