"""Extraction, number matching, math-verify fallback, exploits and the worker's deadlines."""

import os
import signal
import sys
import threading
import time
from fractions import Fraction

import pytest

from pods.reward import grading
from pods.reward.grading import START_RETRIES, Grader, Pool, extract_answer
from pods.reward.numbers import parse_number

BOMB = "<answer>10^{10^{10^{10}}}</answer>"  # sympy tries to evaluate it; 0.2 s is far too short
# Wall-clock bounds hold on a loaded machine: a kill, a reap and the scheduler may add seconds to a deadline,
# so a bounded call must return within its timeout plus SLACK_S, while what it bounds (a bomb that sympy would
# grade for hours, a batch whose jobs add up to more than a minute) takes far longer than that.
SLACK_S = 5.0


def graded_generously(grader, monkeypatch, completion: str, gold: str) -> float:
    """A well-formed answer graded under a timeout that holds on a loaded machine (SLACK_S): after a test shortens
    the timeout so that a bomb is cut off, the correct answer it grades next must not be cut off as well (a
    symbolic comparison on a fresh, descheduled worker can take longer than 0.3 s)."""
    monkeypatch.setattr(grader, "timeout_s", SLACK_S)
    return grader.score(completion, gold)


@pytest.fixture(scope="module")
def grader():
    g = Grader(timeout_s=0.5).start()
    yield g
    g.close()


@pytest.mark.parametrize(
    "text, want",
    [
        ("<answer>42</answer>", "42"),
        ("<think>3?</think>\n<answer> 4 </answer>", "4"),
        ("<answer>1</answer> then <answer>2</answer>", "2"),  # the last one wins
        ("<answer>1</answer> then <answer>2", "1"),  # an unclosed tag is not an answer
        ("<answer>a</answer>b</answer>", "a"),
        ("</answer><answer>", None),
        ("so \\boxed{\\frac{1}{2}} or \\boxed{3}", "3"),
        ("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
        ("<answer>5</answer> \\boxed{6}", "5"),  # tags beat \boxed
        ("\\boxed{unclosed", None),
        ("the answer is 42", None),
        ("", None),
    ],
)
def test_extract_answer(text, want):
    assert extract_answer(text) == want


def test_extract_answer_without_boxed():
    assert extract_answer("\\boxed{3}", boxed=False) is None


@pytest.mark.parametrize(
    "s, value, decimals",
    [
        ("42", 42, None),
        ("-4", -4, None),
        ("+4", 4, None),
        ("1,000", 1000, None),
        ("1,234,567.5", Fraction(2469135, 2), 1),
        ("$18", 18, None),
        ("\\$18", 18, None),
        ("-$5", -5, None),
        ("$7$", 7, None),
        (".5", Fraction(1, 2), 1),
        ("5.", 5, None),  # a full stop, not a decimal point
        ("72.0", 72, 1),
        ("1{,}000", 1000, None),
        ("4.2e1", 42, 0),
        ("1e6", 10**6, None),
        ("1.5 \\times 10^{3}", 1500, 0),
        ("\\frac{3}{4}", Fraction(3, 4), None),
        ("-\\dfrac{3}{4}", Fraction(-3, 4), None),
        ("\\frac{-3}{4}", Fraction(-3, 4), None),
        ("\\frac12", Fraction(1, 2), None),
        ("3/4", Fraction(3, 4), None),
        ("1\\frac{1}{2}", Fraction(3, 2), None),  # a mixed number, not 1 * 1/2
        ("-2 1/2", Fraction(-5, 2), None),
        ("\\boxed{\\frac{1}{2}}", Fraction(1, 2), None),
        ("42\u200b", 42, None),
        ("\u221242", -42, None),
        ("The answer is 42.", 42, None),
        ("Answer: 42", 42, None),
        ("9" * 100, int("9" * 100), None),
    ],
)
def test_parse_number(s, value, decimals):
    got = parse_number(s)
    assert got.value == value and got.decimals == decimals


@pytest.mark.parametrize(
    "s",
    [
        "1,00",
        "x",
        "",
        "1/0",
        "\\frac{1}{0}",
        "1e100000",
        "9" * 100_000,
        "42 or 43",
        "between 1 and 2",
        "1.2.3",
    ],
)
def test_not_plain_numbers(s):
    assert parse_number(s) is None


def test_percent_is_flagged():
    assert parse_number("12%").percent and parse_number("12\\%").value == 12


@pytest.mark.parametrize(
    "completion, gold, want",
    [
        ("<answer>560</answer>", "560", 1.0),
        ("<answer>1,000</answer>", "1000", 1.0),
        ("<answer>-4</answer>", "-4", 1.0),
        ("<answer>4</answer>", "-4", 0.0),
        ("<answer>72.0</answer>", "72", 1.0),
        ("<answer>\\frac{1}{2}</answer>", "0.5", 1.0),
        ("<answer>0.5</answer>", "\\frac{1}{2}", 1.0),
        ("<answer>\\dfrac{2}{4}</answer>", "\\frac{1}{2}", 1.0),
        ("<answer>1+x^2</answer>", "x^2+1", 1.0),
        ("<answer>x^2-1</answer>", "x^2+1", 0.0),
        ("<answer>x = 5</answer>", "5", 1.0),
        ("<answer>\\boxed{18}</answer>", "18", 1.0),
        ("<answer>18 \\text{ dollars}</answer>", "18", 1.0),
        ("<answer>\\sqrt{2}</answer>", "\\sqrt{2}", 1.0),
        ("the result is \\boxed{\\frac{1}{2}}", "\\frac{1}{2}", 1.0),
        ("the answer is 560", "560", 0.0),  # no tag, no box: no answer
        ("<answer></answer>", "0", 0.0),
        ("<answer>a long answer " + "x" * 300 + "</answer>", "x", 0.0),  # over max_answer_chars
    ],
)
def test_grader_scores(grader, monkeypatch, completion, gold, want):
    assert graded_generously(grader, monkeypatch, completion, gold) == want


def test_keeps_the_end_of_long_completions():
    g = Grader(max_chars=30)
    assert g.score("<answer>1</answer>" + "." * 100 + "<answer>2</answer>", "2") == 1.0
    assert g.score("<answer>2</answer>" + "." * 100, "2") == 0.0  # the tag was cut off


def test_bad_inputs_score_zero_and_count(grader):
    n = grader.n_errors
    assert grader.score(None, "1") == 0.0 and grader.score("<answer>1</answer>", None) == 0.0
    assert grader.n_errors == n + 2


@pytest.mark.parametrize(
    "payload",
    [
        "__import__('os').system('touch {m}')",
        "$__import__('os').system('touch {m}')$",
        "\\text{{__import__('os').system('touch {m}')}}",
        "import os; os.system('touch {m}')",
        "exec(\"open('{m}', 'w')\")",
        "eval(compile('open(\"{m}\", \"w\")', 'x', 'exec'))",
        "(lambda: __import__('subprocess').run('touch {m}', shell=True))()",
        "Symbol('x').__class__.__mro__[-1].__subclasses__()",
        "1 + __import__('os').system('touch {m}')",
    ],
)
def test_exploits_do_nothing(grader, tmp_path, payload):
    marker = tmp_path / "pwned"
    text = payload.format(m=marker)
    for completion in [f"<answer>{text}</answer>", f"\\boxed{{{text}}}", f"<answer>${text}$</answer>"]:
        for gold in ["0", "x^2+1", text]:
            grader.score(completion, gold)
    assert not marker.exists()


def test_bomb_times_out_and_the_next_answer_is_fine(grader, monkeypatch):
    monkeypatch.setattr(grader, "timeout_s", 0.2)
    n, t0 = grader.n_timeouts, time.perf_counter()
    assert grader.score(BOMB, "5") == 0.0
    assert time.perf_counter() - t0 < 0.2 + SLACK_S and grader.n_timeouts == n + 1
    assert graded_generously(grader, monkeypatch, "<answer>\\frac{1}{2}</answer>", "0.5") == 1.0


def test_parent_kills_a_worker_that_ignores_its_alarm(grader, monkeypatch):
    monkeypatch.setattr(grader, "timeout_s", 0.2)
    monkeypatch.setattr(grader, "soft_fraction", None)  # only the parent's deadline can stop it now
    n = grader.n_timeouts
    for _ in range(2):  # a kill, then the spare is killed or still starting: bounded either way
        pids = {w.proc.pid for w in grader._pool._workers}
        t0 = time.perf_counter()
        assert grader.score(BOMB, "5") == 0.0
        assert time.perf_counter() - t0 < 0.2 + SLACK_S
        assert pids - {w.proc.pid for w in grader._pool._workers}  # the parent killed and replaced one
    assert grader.n_timeouts == n + 2
    _wait_for_spare(grader)
    assert graded_generously(grader, monkeypatch, "<answer>1+x^2</answer>", "x^2+1") == 1.0


def _when_busy(workers, act) -> threading.Thread:
    """Run act(worker) on the first of `workers` that holds a job: mid-job by construction, not by a delay."""

    def watch():
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            busy = [w for w in workers if w.busy]
            if busy:
                act(busy[0])
                return
            time.sleep(0.001)

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    return t


def test_a_crashed_worker_counts_as_an_error(grader, monkeypatch):
    _wait_for_spare(grader)
    monkeypatch.setattr(grader, "soft_fraction", None)
    monkeypatch.setattr(grader, "timeout_s", 60.0)  # the crash, not the deadline, ends the job
    n, t = grader.n_errors, _when_busy(list(grader._pool._workers), lambda w: w.proc.kill())
    assert grader.score(BOMB, "5") == 0.0 and grader.n_errors == n + 1
    t.join()
    _wait_for_spare(grader)
    assert grader.score("<answer>1+x^2</answer>", "x^2+1") == 1.0  # replaced


def test_workers_that_died_idle_are_replaced(grader, monkeypatch):
    _wait_for_spare(grader)
    for w in grader._pool._workers:
        w.proc.kill()
        w.proc.wait()
    t0 = time.perf_counter()
    assert grader.score("<answer>1+x^2</answer>", "x^2+1") in (0.0, 1.0)
    assert time.perf_counter() - t0 < grader.timeout_s + SLACK_S  # no worker ready: a timeout, bounded
    _wait_for_spare(grader)
    assert graded_generously(grader, monkeypatch, "<answer>1+x^2</answer>", "x^2+1") == 1.0


def test_grading_off_the_main_thread_is_bounded(grader, monkeypatch):
    monkeypatch.setattr(grader, "timeout_s", 0.2)
    got, n = {}, grader.n_timeouts

    def work():  # the bomb under 0.2 s, the correct answer under a timeout that holds on a loaded machine
        for name, completion, gold, timeout in [
            ("bomb", BOMB, "5", 0.2), ("ok", "<answer>\\frac{2}{4}</answer>", "0.5", SLACK_S)]:  # fmt: skip
            grader.timeout_s = timeout  # monkeypatch (above) restores it after the test
            t0 = time.perf_counter()
            got[name] = (grader.score(completion, gold), time.perf_counter() - t0)

    t = threading.Thread(target=work)
    t.start()
    t.join(timeout=10)
    assert not t.is_alive()
    assert got["bomb"][0] == 0.0 and got["bomb"][1] < 0.2 + SLACK_S and grader.n_timeouts == n + 1
    assert got["ok"][0] == 1.0


def _wait_for_spare(grader: Grader) -> None:
    assert grader.wait_ready(60)


@pytest.mark.parametrize("size", [1, 2])
def test_worker_that_cannot_start_raises_a_clear_error(monkeypatch, size):
    """The pool gives up after START_RETRIES deaths per worker. Workers that die in the same pass of its start
    loop are all counted, so with two or more workers it may have seen up to size - 1 more: the message says
    how many it saw."""
    monkeypatch.setattr(sys, "executable", "/bin/false")
    limit = START_RETRIES * size
    with pytest.raises(RuntimeError, match="did not start: its processes exited") as e:
        Pool(size)
    msg = str(e.value)
    assert f"(it gives up after {limit}; last: exit status 1)" in msg
    seen = int(msg.split("exited ")[1].split(" times")[0])
    assert limit <= seen < limit + size, msg


def test_a_worker_that_dies_while_it_starts_is_started_again(monkeypatch, tmp_path):
    """The first process dies before it is ready (as one hit by a stray signal would); its replacement serves."""
    mark, real = tmp_path / "failed_once", sys.executable
    fake = tmp_path / "python"
    fake.write_text(
        f'#!/bin/sh\nif [ ! -e {mark} ]; then touch {mark}; kill -USR2 $$; fi\nexec {real} "$@"\n'
    )
    fake.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(fake))
    pool = Pool(1)
    try:
        assert mark.exists()  # the first start did die
        assert pool.verify_many([("1+x^2", "x^2+1")], 5.0, 0.8, None) == ["true"]
    finally:
        pool.close()


@pytest.mark.parametrize("sig", [signal.SIGUSR2, signal.SIGTERM, signal.SIGINT], ids=lambda s: s.name)
def test_a_signal_for_the_trainer_does_not_cost_a_grade(grader, monkeypatch, sig):
    """Slurm signals every process of a job (SIGUSR2 before its time limit, SIGTERM on preemption): a worker
    grading an answer then must finish it, not die and turn it into an error."""
    _wait_for_spare(grader)
    monkeypatch.setattr(grader, "timeout_s", 0.6)
    monkeypatch.setattr(grader, "soft_fraction", None)  # BOMB runs until the parent's deadline
    workers = list(grader._pool._workers)
    for w in workers:  # idle: delivered before the worker can read its next job
        os.kill(w.proc.pid, sig)
    errors, timeouts = grader.n_errors, grader.n_timeouts
    t = _when_busy(workers, lambda w: w.proc.send_signal(sig))  # mid-job: its deadline is 0.6 s away
    assert grader.score(BOMB, "5") == 0.0
    t.join()
    assert (grader.n_errors, grader.n_timeouts) == (errors, timeouts + 1)  # a timeout, as without the signal
    _wait_for_spare(grader)
    assert graded_generously(grader, monkeypatch, "<answer>1+x^2</answer>", "x^2+1") == 1.0


def _record_jobs(monkeypatch) -> list:
    """Every job the grader hands its worker pool, in order."""
    sent, verify_many = [], Pool.verify_many

    def record(self, jobs, *args):
        sent.extend(jobs)
        return verify_many(self, jobs, *args)

    monkeypatch.setattr(Pool, "verify_many", record)
    return sent


def test_batch_grades_each_distinct_pair_once(grader, monkeypatch):
    # one timeout for the whole batch: long enough for the correct pair on a loaded machine, and the bomb (hours
    # of sympy) still times out; the bomb's 16 copies cost one timeout, not 16
    monkeypatch.setattr(grader, "timeout_s", SLACK_S)
    sent, n = _record_jobs(monkeypatch), grader.n_timeouts
    scores = grader.score_batch([BOMB] * 16 + ["<answer>1+x^2</answer>"] * 4, ["5"] * 16 + ["x^2+1"] * 4)
    assert scores == [0.0] * 16 + [1.0] * 4
    assert grader.n_timeouts == n + 16  # counted per completion, as reward/timeouts always was
    assert sent == [("10^{10^{10^{10}}}", "5"), ("1+x^2", "x^2+1")]  # one bomb graded, not sixteen


def test_batch_time_limit_bounds_the_whole_batch(grader, monkeypatch):
    """12 bombs of 10 s each take a minute on any pool of workers; the batch's 0.8 s limit ends it at once."""
    monkeypatch.setattr(grader, "timeout_s", 10.0)
    monkeypatch.setattr(grader, "soft_fraction", None)
    monkeypatch.setattr(grader, "batch_timeout_s", 0.8)
    bombs = [f"<answer>10^{{10^{{10^{{{10 + i}}}}}}}</answer>" for i in range(12)]  # distinct
    assert 12 * 10.0 / len(grader._pool._workers) > 0.8 + 4 * SLACK_S
    n, t0 = grader.n_timeouts, time.perf_counter()
    assert grader.score_batch(bombs, ["5"] * 12) == [0.0] * 12
    assert time.perf_counter() - t0 < 0.8 + SLACK_S and grader.n_timeouts == n + 12
    _wait_for_spare(grader)
    assert grader.score("<answer>1+x^2</answer>", "x^2+1") == 1.0


def test_batch_runs_workers_side_by_side(grader, monkeypatch):
    """Every ready worker takes a job at once: the most jobs in flight together is the pool's size."""
    monkeypatch.setattr(grader, "timeout_s", 0.4)
    _wait_for_spare(grader)
    k, most, send = len(grader._pool._workers), [0], grading._Worker.send

    def counting_send(self, *args):
        ok = send(self, *args)
        most[0] = max(most[0], sum(w.busy for w in grader._pool._workers))
        return ok

    monkeypatch.setattr(grading._Worker, "send", counting_send)
    bombs = [f"<answer>10^{{10^{{10^{{{20 + i}}}}}}}</answer>" for i in range(2 * k)]
    assert grader.score_batch(bombs, ["5"] * len(bombs)) == [0.0] * len(bombs)
    assert k >= 2 and most[0] == k


def test_no_worker_outlives_close():
    g = Grader().start()
    procs = [w.proc for w in g._pool._workers]
    g.close()
    assert all(p.returncode is not None for p in procs)  # killed and reaped, no zombies


def test_default_workers_share_cpus_between_local_ranks(monkeypatch):
    from pods.reward.grading import default_workers

    monkeypatch.setattr("os.cpu_count", lambda: 64)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "8")
    assert default_workers() == 4
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "64")
    assert default_workers() == 2  # at least two: a killed worker's replacement boots while one works


def test_identical_pairs_are_decided_once_in_the_parent(grader, monkeypatch):
    """64 samples of a prompt repeat: each distinct text (answer or gold) is parsed once per batch, and every
    copy gets the same verdict as grading it alone; non-strings still count as errors each."""
    import pods.reward.grading as grading

    calls = []
    real = grading.parse_number
    monkeypatch.setattr(grading, "parse_number", lambda s: calls.append(s) or real(s))
    comps = ["<answer>7</answer>", "<answer>8</answer>"] * 32 + ["<answer>7.0</answer>", None]
    golds = ["7"] * 65 + ["7"]
    before = grader.n_errors
    got = grader.score_batch(comps, golds)
    assert sorted(calls) == ["7", "7.0", "8"]  # gold "7" and answer "7" are one text, parsed once
    assert grader.n_errors - before == 1
    assert got == [1.0, 0.0] * 32 + [1.0, 0.0]
    assert got == [grader.score(c, g) if c is not None else 0.0 for c, g in zip(comps, golds)]
