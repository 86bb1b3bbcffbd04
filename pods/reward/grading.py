"""Answer grading that untrusted model text cannot hang, crash or exploit, for a whole batch at once.

Plain numbers are compared exactly in this process (numbers.py), in microseconds. Anything else goes to
math-verify in a pool of worker processes (worker.py, stdlib + math_verify only) that the parent kills at
the deadline: sympy can sit in C code (10^{10^{10}}, 1000000!) where no signal reaches it, so only a
process boundary gives a hard bound, in any thread.

A batch (`Grader.score_batch`) is graded with three bounds:
- each (answer, gold) pair once: repeats within the batch share one verdict (n rollouts often agree);
- each pair at most timeout_s after a worker took it (the worker's own alarm fires at soft_fraction of it);
- the whole batch at most batch_timeout_s; pairs still queued or running then count as timeouts.
Workers run side by side (workers=0 picks min(4, CPUs per local rank), at least 2, so a killed worker's
replacement boots while the others go on).
"""

from __future__ import annotations

import collections
import contextlib
import json
import logging
import os
import select
import signal
import subprocess
import sys
import threading
import time
import weakref
from dataclasses import dataclass, field

from pods.reward.numbers import Number, numbers_equal, parse_number

__all__ = ["Grader", "Pool", "extract_answer", "parse_number"]

log = logging.getLogger("pods")
START_TIMEOUT_S = 120.0
START_RETRIES = 3  # deaths per worker before the pool gives up starting
WORKER_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "worker.py")


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


def default_workers() -> int:
    """min(4, CPUs per local rank), at least 2: torchrun's LOCAL_WORLD_SIZE ranks share the host's CPUs."""
    per_rank = (os.cpu_count() or 2) // max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1))
    return max(2, min(4, per_rank))


@dataclass
class Grader:
    """Scores completions against gold answers; counts timeouts and errors (per completion) instead of raising.

    Holds one Pool of worker processes, started on first need or by `start()`.
    """

    timeout_s: float = 1.0  # per (answer, gold) pair, from when a worker takes it
    max_chars: int = 4096
    max_answer_chars: int = 256
    boxed: bool = True
    soft_fraction: float | None = 0.8  # the worker stops itself at this share of timeout_s; None: only kills
    rel_tol: float = 0.0  # extra relative tolerance when a side is a decimal (numbers.py); 0: none
    round_to_reference: bool = True  # a decimal gold answer is matched at the places it states
    workers: int = 0  # math-verify processes; 0: default_workers()
    batch_timeout_s: float | None = 30.0  # bound on one score_batch call; None or 0: no bound
    n_timeouts: int = 0
    n_errors: int = 0
    _pool: Pool | None = field(default=None, init=False, repr=False)
    _start_error: str | None = field(default=None, init=False, repr=False)
    _start_logged: bool = field(default=False, init=False, repr=False)

    def start(self) -> Grader:
        """Start the worker pool (once). A pool that failed to start raises the same error again, at once."""
        if self._start_error is not None:
            raise RuntimeError(self._start_error)
        if self._pool is None:
            try:
                self._pool = Pool(self.workers or default_workers())
            except RuntimeError as e:
                self._start_error = str(e)
                raise
        return self

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    def wait_ready(self, timeout_s: float = START_TIMEOUT_S) -> bool:
        """Start the pool and wait until every worker has booted (benchmarks: keep start-up out of timings)."""
        return self.start()._pool.wait_ready(time.monotonic() + timeout_s)

    def score(self, completion: str, gold: str) -> float:
        """1.0 if the completion's answer equals `gold`, else 0.0. Never raises."""
        return self.score_batch([completion], [gold])[0]

    def score_batch(self, completions: list, golds: list) -> list[float]:
        """One 0/1 score per completion. Never raises; n_timeouts / n_errors count completions.
        Identical (completion, gold) pairs are decided once, and within a batch each completion's answer is
        extracted once, each text parsed as a number once and each (answer, gold) pair decided once: n samples
        of one prompt repeat a lot (PODS grades 64 per prompt against one gold answer, and parsing exact numbers
        is most of a grade's cost). The verdicts are those of deciding every pair on its own."""
        seen: dict[tuple[str, str], str | tuple[str, str]] = {}
        memo = _Memo()
        verdicts = []
        for c, g in zip(completions, golds, strict=True):
            if not (isinstance(c, str) and isinstance(g, str)):
                verdicts.append(self._local(c, g))  # "error", never cached
                continue
            v = seen.get((c, g))
            if v is None:
                v = seen[(c, g)] = self._local(c, g, memo)
            verdicts.append(v)
        pending: dict[tuple[str, str], list[int]] = {}
        for i, v in enumerate(verdicts):
            if isinstance(v, tuple):
                pending.setdefault(v, []).append(i)  # identical pairs are graded once
        if pending:  # pairs most completions share go first: a batch cut short then loses the fewest
            pending = dict(sorted(pending.items(), key=lambda kv: -len(kv[1])))
            try:
                got = self.start()._pool.verify_many(
                    list(pending), self.timeout_s, self.soft_fraction, self.batch_timeout_s or None
                )
            except Exception as e:
                if self._pool is None and not self._start_logged:  # the workers did not start: say so once
                    self._start_logged = True
                    log.error(
                        "math-verify grading is unavailable; answers it must decide score 0 as errors: %s", e
                    )
                got = ["error"] * len(pending)
            for idx, v in zip(pending.values(), got, strict=True):
                for i in idx:
                    verdicts[i] = v
        self.n_timeouts += sum(v == "timeout" for v in verdicts)
        self.n_errors += sum(v == "error" for v in verdicts)
        return [1.0 if v == "true" else 0.0 for v in verdicts]

    def _local(self, completion, gold, memo: _Memo | None = None) -> str | tuple[str, str]:
        """A verdict decided here, or the (answer, gold) pair a worker must decide. `memo` (one batch's)
        remembers what is a pure function of its input; without it every step runs."""
        memo = _Memo() if memo is None else memo
        try:
            if not isinstance(completion, str) or not isinstance(gold, str):
                return "error"
            pred = memo.get(
                memo.answers, completion, lambda: extract_answer(completion[-self.max_chars :], self.boxed)
            )
            if not pred or len(pred) > self.max_answer_chars:
                return "false"
            if len(gold) > 16 * self.max_answer_chars:
                return "error"  # a gold answer this long is a data problem; show it in n_errors
            return memo.get(memo.pairs, (pred, gold), lambda: self._decide(pred, gold, memo))
        except Exception:
            return "error"

    def _decide(self, pred: str, gold: str, memo: _Memo) -> str | tuple[str, str]:
        a = memo.get(memo.numbers, pred, lambda: parse_number(pred))
        b = memo.get(memo.numbers, gold, lambda: parse_number(gold))
        if a is not None and b is not None:
            return "true" if numbers_match(a, b, self.rel_tol, self.round_to_reference) else "false"
        return (pred, gold)


class _Memo:
    """One batch's results of pure steps, by input: answers (completion -> extracted answer), numbers (text ->
    parse_number), pairs ((answer, gold) -> verdict or the pair for a worker). A step that raises stores
    nothing, so it raises again for the next row that needs it (and that row's verdict is "error" too)."""

    def __init__(self) -> None:
        self.answers: dict = {}
        self.numbers: dict = {}
        self.pairs: dict = {}

    @staticmethod
    def get(table: dict, key, compute):
        if key in table:
            return table[key]
        table[key] = value = compute()
        return value


def numbers_match(pred: Number, gold: Number, rel_tol: float = 0.0, round_to_reference: bool = True) -> bool:
    """See numbers.py: exact values; a decimal gold answer is matched at the places it states."""
    return numbers_equal(pred, gold, rel_tol, round_to_reference)


class Pool:
    """math-verify worker processes with a hard deadline per job and per batch. Thread-safe; one batch at
    a time. `verify_many` returns 'true', 'false', 'timeout' or 'error' per job.
    """

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError(f"reward.workers = {size}; it must be >= 1 (0 picks a default)")
        self.size = size
        self._lock = threading.Lock()
        self._procs: list[subprocess.Popen] = []  # every process started, for the finaliser
        self._finalizer = weakref.finalize(self, _kill_all, self._procs, os.getpid())
        self._workers = [self._spawn() for _ in range(size)]
        deadline, exits, limit = time.monotonic() + START_TIMEOUT_S, [], START_RETRIES * size
        # A worker that dies before it is ready (a stray signal, a crash while it imports) is started again
        # until the pool has seen `limit` deaths; the first ready worker lets the run go on. Workers that die in
        # the same pass are all counted, so the pool can give up having seen up to limit + size - 1 deaths.
        while not any(w.ready for w in self._workers) and time.monotonic() < deadline:
            for w in [w for w in self._workers if w.dead]:
                exits.append(w.proc.wait())
                if len(exits) < limit:
                    self._replace(w)
            if len(exits) >= limit:
                break
            self._pump(deadline)
        if not any(w.ready for w in self._workers):
            self.close()
            why = (
                f"its processes exited {len(exits)} times before they were ready (it gives up after {limit}; "
                f"last: {_exit_status(exits[-1])})"
                if exits
                else f"none was ready within {START_TIMEOUT_S:.0f} s"
            )
            raise RuntimeError(
                f"the math-verify worker did not start: {why}; "
                f"check that `{sys.executable} -c 'import math_verify'` works"
            )

    def _spawn(self) -> _Worker:
        w = _Worker()
        self._procs[:] = [p for p in self._procs if p.poll() is None] + [w.proc]
        return w

    def _replace(self, w: _Worker) -> None:
        w.kill()
        self._workers[self._workers.index(w)] = self._spawn()

    def _pump(self, deadline: float) -> bool:
        """Wait until a worker has output or `deadline`; read it. False if nothing came."""
        live = [w for w in self._workers if not w.dead and (w.busy or not w.ready)]
        left = deadline - time.monotonic()
        if not live or left <= 0:
            if left > 0:
                time.sleep(min(left, 0.01))
            return False
        fds = {w.fd: w for w in live}
        readable = select.select(list(fds), [], [], left)[0]
        for fd in readable:
            fds[fd].read_available()
        return bool(readable)

    def wait_ready(self, deadline: float) -> bool:
        """Replace dead workers and wait until all are ready or `deadline`; True if all are ready."""
        with self._lock:
            while time.monotonic() < deadline:
                for w in [w for w in self._workers if w.dead]:
                    self._replace(w)
                if all(w.ready for w in self._workers):
                    return True
                self._pump(min(deadline, time.monotonic() + 0.5))
            return all(w.ready and not w.dead for w in self._workers)

    def verify_many(
        self,
        jobs: list[tuple[str, str]],
        timeout_s: float,
        soft_fraction: float | None,
        batch_s: float | None,
    ) -> list[str]:
        with self._lock:
            return self._run(jobs, timeout_s, soft_fraction, batch_s)

    def _run(self, jobs, timeout_s, soft_fraction, batch_s) -> list[str]:
        now = time.monotonic()
        batch_deadline = now + batch_s if batch_s else float("inf")
        soft_s = None if soft_fraction is None else soft_fraction * timeout_s
        out: list[str | None] = [None] * len(jobs)
        queue = collections.deque(range(len(jobs)))
        starved_since = None  # jobs wait, and no worker is ready: the head job times out after timeout_s
        while queue or any(w.busy for w in self._workers):
            for w in list(self._workers):  # collect replies, deaths and overruns
                while w.busy and w.replies:
                    i = w.job
                    out[i] = w.take_reply()
                if w.dead:
                    if w.busy:
                        out[w.job] = "error"  # it crashed on this job
                    self._replace(w)
                    continue
                if w.busy and time.monotonic() >= w.deadline:
                    out[w.job] = "timeout"
                    self._replace(w)
            for w in self._workers:  # hand out work
                if queue and w.ready and not w.busy and not w.dead:
                    i = queue.popleft()
                    pred, gold = jobs[i]
                    if not w.send(
                        i, {"pred": pred, "gold": gold, "soft_s": soft_s}, time.monotonic() + timeout_s
                    ):
                        queue.appendleft(i)  # it had died while idle; replaced on the next pass
            now = time.monotonic()
            if queue and not any(w.ready and not w.dead for w in self._workers):
                starved_since = starved_since or now
                if now - starved_since >= timeout_s:
                    out[queue.popleft()] = "timeout"
                    starved_since = now
            else:
                starved_since = None
            if now >= batch_deadline:
                for w in self._workers:
                    if w.busy:
                        out[w.job] = "timeout"
                        self._replace(w)
                for i in queue:
                    out[i] = "timeout"
                break
            if not queue and not any(w.busy for w in self._workers):
                break
            wake = min([batch_deadline] + [w.deadline for w in self._workers if w.busy])
            if starved_since is not None:
                wake = min(wake, starved_since + timeout_s)
            self._pump(wake)
        return [v or "error" for v in out]

    def close(self) -> None:
        self._finalizer()


def _exit_status(code: int | None) -> str:
    """'exit status 1', or 'killed by SIGUSR2' for a negative Popen return code."""
    if code is not None and code < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-code).name}"
    return f"exit status {code}"


def _kill_all(procs: list[subprocess.Popen], owner: int | None = None) -> None:
    if owner is not None and owner != os.getpid():
        return  # a forked child (e.g. a DataLoader worker) must not kill its parent's workers
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait()  # reaped: no zombies
        for pipe in (p.stdin, p.stdout):
            with contextlib.suppress(OSError):  # unflushed bytes to a dead reader
                pipe.close()


class _Worker:
    """Parent side of one worker: JSON lines over pipes, read without blocking after select()."""

    def __init__(self) -> None:
        code = "import runpy, sys; sys.path.pop(0); runpy.run_path(sys.argv[1], run_name='__main__')"
        self.proc = subprocess.Popen(
            [sys.executable, "-c", code, WORKER_FILE],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            close_fds=True,
        )
        self.fd = self.proc.stdout.fileno()
        self.ready, self.dead, self._buf = False, False, b""
        self.replies: list[bytes] = []
        self.job: int | None = None
        self.deadline = float("inf")

    @property
    def busy(self) -> bool:
        return self.job is not None

    def send(self, job_id: int, job: dict, deadline: float) -> bool:
        try:
            self.proc.stdin.write(json.dumps(job).encode() + b"\n")
            self.proc.stdin.flush()
        except OSError:
            self.dead = True
            return False
        self.job, self.deadline = job_id, deadline
        return True

    def read_available(self) -> None:
        chunk = os.read(self.fd, 1 << 16)
        if not chunk:
            self.dead = True
            return
        self._buf += chunk
        *lines, self._buf = self._buf.split(b"\n")
        for line in lines:
            if not self.ready:
                self.ready = True  # the first line is 'ready'
            else:
                self.replies.append(line)

    def take_reply(self) -> str:
        line = self.replies.pop(0)
        self.job, self.deadline = None, float("inf")
        try:
            verdict = json.loads(line)
        except ValueError:
            return "error"
        return verdict if verdict in ("true", "false", "timeout", "error") else "error"

    def kill(self) -> None:
        self.dead = True
        _kill_all([self.proc])
