"""Extraction, number matching, math-verify fallback, exploits and the worker's deadlines."""

import sys
import threading
import time
from fractions import Fraction

import pytest

from pods.reward.grading import Grader, Sandbox, extract_answer, numbers_match, parse_number

BOMB = "<answer>10^{10^{10^{10}}}</answer>"  # sympy tries to evaluate it; 0.2 s is far too short


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
    "s, want",
    [
        ("42", 42),
        ("-4", -4),
        ("1,000", 1000),
        ("1,234,567.5", Fraction(2469135, 2)),
        ("$18", 18),
        ("\\$18", 18),
        ("-$5", -5),
        ("12%", 12),
        ("12\\%", 12),
        ("$7$", 7),
        (".5", Fraction(1, 2)),
        ("5.", Fraction(5)),
        ("1{,}000", 1000),
        ("1,00", None),  # not a thousands separator
        ("1/2", None),
        ("x", None),
        ("", None),
        ("9" * 65, None),  # more than MAX_DIGITS: not a plain number
        ("9" * 100_000, None),
    ],
)
def test_parse_number(s, want):
    got = parse_number(s)
    assert got == want and type(got) is type(want)


def test_numbers_match():
    assert numbers_match(10**60, 10**60) and not numbers_match(10**60, 10**60 + 1)  # ints: exact
    assert numbers_match(Fraction(1, 2), Fraction(5, 10)) and numbers_match(72, Fraction(72))
    assert numbers_match(Fraction(1, 10), Fraction(1, 10) + Fraction(1, 10**12))
    assert not numbers_match(Fraction(1, 10), Fraction(1001, 10000))


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
def test_grader_scores(grader, completion, gold, want):
    assert grader.score(completion, gold) == want


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
    assert time.perf_counter() - t0 < 0.2 + 0.5 and grader.n_timeouts == n + 1
    assert grader.score("<answer>\\frac{1}{2}</answer>", "0.5") == 1.0


def test_parent_kills_a_worker_that_ignores_its_alarm(grader, monkeypatch):
    monkeypatch.setattr(grader, "timeout_s", 0.2)
    monkeypatch.setattr(grader, "soft_fraction", None)  # only the parent's deadline can stop it now
    n = grader.n_timeouts
    for _ in range(2):  # a kill, then the spare is killed or still starting: bounded either way
        t0 = time.perf_counter()
        assert grader.score(BOMB, "5") == 0.0
        assert time.perf_counter() - t0 < 0.2 + 0.5
    assert grader.n_timeouts == n + 2
    _wait_for_spare(grader)
    assert grader.score("<answer>1+x^2</answer>", "x^2+1") == 1.0


def test_a_crashed_worker_counts_as_an_error(grader):
    _wait_for_spare(grader)
    n = grader.n_errors
    grader._sandbox._live.proc.kill()
    assert grader.score("<answer>\\frac{1}{2}</answer>", "0.5") == 0.0 and grader.n_errors == n + 1
    assert grader.score("<answer>\\frac{1}{2}</answer>", "0.5") == 1.0  # the spare took over


def test_grading_off_the_main_thread_is_bounded(grader, monkeypatch):
    monkeypatch.setattr(grader, "timeout_s", 0.2)
    got, n = {}, grader.n_timeouts

    def work():
        for name, completion, gold in [("bomb", BOMB, "5"), ("ok", "<answer>\\frac{2}{4}</answer>", "0.5")]:
            t0 = time.perf_counter()
            got[name] = (grader.score(completion, gold), time.perf_counter() - t0)

    t = threading.Thread(target=work)
    t.start()
    t.join(timeout=10)
    assert not t.is_alive()
    assert got["bomb"][0] == 0.0 and got["bomb"][1] < 0.2 + 0.5 and grader.n_timeouts == n + 1
    assert got["ok"][0] == 1.0


def _wait_for_spare(grader: Grader) -> None:
    spare = grader._sandbox._spare
    assert spare.wait_ready(time.monotonic() + 60) and grader._sandbox._live.wait_ready(time.monotonic() + 60)


def test_worker_that_cannot_start_raises_a_clear_error(monkeypatch):
    monkeypatch.setattr(sys, "executable", "/bin/false")
    with pytest.raises(RuntimeError, match="did not start"):
        Sandbox()
