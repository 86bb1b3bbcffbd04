"""Fuzz: no input escapes with an exception or outlives timeout_s, and no payload runs.

The corpus (bench/fuzz.py; scripts/fuzz_rewards.py runs it at scale) holds power towers, huge factorials,
10^6-digit numbers, brace nests, LaTeX repetition, Python payloads, NUL bytes, lone surrogates,
1 MB lines and thousands of tags, in several wrappers, plus random token soups and honest answers.
"""

import math
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.fuzz import GOLDS, SOUP, WRAPS, adversarial_corpus, fuzz_reward_fields
from pods.config import RewardConfig
from pods.reward import build_reward

TIMEOUT_S = 0.2
# A kill, a reap and the scheduler of a loaded machine may add seconds past the deadline; what the deadline
# bounds (sympy on a power tower or \prod_{i=1}^{10^9} i) runs for minutes or more, so this bound still
# tells a grade stopped at its deadline from one that ran to the end.
BOUND_S = TIMEOUT_S + 5.0
SETTINGS = settings(max_examples=150, deadline=None, database=None)


@pytest.fixture(scope="module")
def reward():
    r = build_reward(RewardConfig(**fuzz_reward_fields(TIMEOUT_S)))
    assert r.grader.wait_ready()  # the workers start on first need: their start is not what BOUND_S bounds
    yield r
    r.close()


def graded_in_time(reward, completion: str, gold: str):
    t0 = time.perf_counter()
    out = reward([completion], [gold])
    seconds = time.perf_counter() - t0
    assert seconds < BOUND_S, f"{seconds:.2f} s for {completion[:100]!r}"
    assert out.terms["accuracy"][0] in (0.0, 1.0) and out.terms["format"][0] in (0.0, 0.5, 1.0)
    assert math.isfinite(out.total[0])
    return out


def test_adversarial_corpus(reward, tmp_path):
    marker = tmp_path / "pwned"
    corpus = adversarial_corpus(2000, seed=0, marker=str(marker))
    outs = [graded_in_time(reward, completion, gold) for _, completion, gold in corpus]
    assert not marker.exists()
    honest = [o.correct[0] for o, (kind, _, _) in zip(outs, corpus) if kind == "honest"]
    assert 0 < sum(honest) < len(honest)  # the grader still grades
    assert sum(o.n_timeouts for o in outs) < 0.1 * len(corpus)


def test_batch_of_bombs_returns_one_score_each(reward):
    corpus = [x for x in adversarial_corpus(400, seed=1) if x[0] != "bomb"]
    out = reward([c for _, c, _ in corpus], [g for _, _, g in corpus])
    assert len(out.total) == len(out.correct) == len(corpus)


@SETTINGS
@given(body=st.text(max_size=300), gold=st.sampled_from(GOLDS), wrap=st.sampled_from(WRAPS))
def test_any_text(reward, body, gold, wrap):
    graded_in_time(reward, wrap.replace("@", body), gold)


@SETTINGS
@given(tokens=st.lists(st.sampled_from(SOUP), max_size=60), gold=st.sampled_from(GOLDS + ["\\pi"]))
def test_latex_soup(reward, tokens, gold):
    graded_in_time(reward, "<answer>" + "".join(tokens) + "</answer>", gold)


@settings(max_examples=300, deadline=None, database=None)
@given(x=st.integers(-(10**40), 10**40), fmt=st.sampled_from(["{:,}", "{}", "${:,}", "{}%"]))
def test_numbers_match_exactly(reward, x, fmt):
    completion = f"<answer>{fmt.format(x)}</answer>"
    assert graded_in_time(reward, completion, str(x)).correct == [True]
    assert graded_in_time(reward, completion, str(x + 1)).correct == [False]
