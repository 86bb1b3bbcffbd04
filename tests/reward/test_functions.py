"""Reward functions, their weighted sum, the registry and the config errors (RewardConfig.check)."""

import math

import pytest

from pods.config import RewardConfig
from pods.reward import REWARDS, Reward, RewardOutput, build_reward, register_reward
from pods.reward.functions import FORMAT_ANSWER_ONLY, FORMAT_FULL, accuracy, format_reward

GOOD = "<think>2+2</think>\n<answer>4</answer>"
BARE = "<answer>4</answer>"


def cfg(**kw):
    return RewardConfig(**({"name": "t", "weights": {"accuracy": 1.0, "format": 0.1}} | kw))


@pytest.fixture(scope="module")
def reward():
    r = build_reward(cfg())
    yield r
    r.close()


@pytest.mark.parametrize(
    "text, want",
    [
        (GOOD, FORMAT_FULL),
        ("  <think>a</think>  <answer>b</answer>\n", FORMAT_FULL),
        (BARE, FORMAT_ANSWER_ONLY),
        ("<think>a</think> then <answer>b</answer>", FORMAT_ANSWER_ONLY),  # text between the blocks
        ("<think>a<think>b</think><answer>c</answer>", FORMAT_ANSWER_ONLY),
        ("<think>a</think><answer>b</answer></answer>", FORMAT_ANSWER_ONLY),
        ("<think>a</think><answer>b", 0.0),
        ("4", 0.0),
        ("", 0.0),
    ],
)
def test_format(text, want):
    assert format_reward([text]) == [want]


def test_accuracy_without_a_grader_uses_its_own(reward):
    assert accuracy([BARE, BARE, "4"], ["4", "5", "4"]) == [1.0, 0.0, 0.0]  # numbers: no worker needed
    assert accuracy(["<answer>\\frac{1}{2}</answer>"], ["0.5"], grader=reward.grader) == [1.0]


def test_weighted_sum(reward):
    out = reward([GOOD, BARE, "<answer>5</answer>", "4"], ["4", "4", "4", "4"])
    assert isinstance(out, RewardOutput)
    assert out.terms == {"accuracy": [1.0, 1.0, 0.0, 0.0], "format": [1.0, 0.5, 0.5, 0.0]}
    assert out.total == pytest.approx([1.1, 1.05, 0.05, 0.0])
    assert out.correct == [True, True, False, False]
    assert (out.n_timeouts, out.n_errors) == (0, 0)


def test_accuracy_is_computed_even_when_not_weighted(reward):
    r = Reward("format_only", {"format": 1.0}, reward.grader)
    out = r([GOOD, "<answer>5</answer>"], ["4", "4"])
    assert (
        out.total == [1.0, 0.5] and out.correct == [True, False] and set(out.terms) == {"format", "accuracy"}
    )


def test_counts_timeouts_per_call(reward, monkeypatch):
    monkeypatch.setattr(reward.grader, "timeout_s", 0.2)
    out = reward(["<answer>9^{9^{9^{9}}}</answer>", GOOD], ["5", "4"])
    assert out.n_timeouts == 1 and out.correct == [False, True]
    assert reward([GOOD], ["4"]).n_timeouts == 0


@register_reward("test_length")
def length(completions, answers, **kw):
    return [len(c) / 10 for c in completions]


def test_registered_reward_is_usable_by_name():
    assert REWARDS["test_length"] is length
    r = build_reward(cfg(weights={"test_length": 2.0, "accuracy": 1.0}))
    out = r(["<answer>\\frac{8}{2}</answer>"], ["4"])  # 28 characters, graded by math-verify
    assert out.terms["test_length"] == [2.8] and out.total == pytest.approx([6.6])
    r.close()


@register_reward("test_context")
def context(completions, answers, prompts=None, level=None, **kw):
    return [len(p) + lv for p, lv in zip(prompts, level)]


@register_reward("test_old_style")
def old_style(completions, answers, grader):  # written before prompts and rows were passed: no **kw
    return [float(grader is not None)] * len(completions)


def test_a_reward_gets_the_prompts_and_the_rows_fields_as_columns(reward):
    r = Reward("ctx", {"test_context": 1.0, "test_old_style": 1.0}, reward.grader)
    rows = [{"level": 1, "prompts": "never passed: a keyword of the Reward's own"}, {"level": 3}]
    out = r([BARE, "4"], ["4", "4"], prompts=["ab", "abcd"], rows=rows)
    assert out.terms["test_context"] == [3.0, 7.0] and out.terms["test_old_style"] == [1.0, 1.0]
    old = Reward("old", {"test_old_style": 1.0}, reward.grader)
    assert old([BARE], ["4"]).terms["test_old_style"] == [1.0]  # called without prompts or rows, as before


def test_registering_a_name_twice_fails():
    with pytest.raises(ValueError, match="already registered"):
        register_reward("accuracy")(lambda completions, answers, **kw: [0.0] * len(completions))


def test_unknown_reward_lists_the_registered_names(make_cfg):
    from pods.components import checked

    with pytest.raises(
        ValueError, match=r"reward.weights.acuracy is not valid; allowed values: accuracy, .*format"
    ):
        checked(make_cfg("reward.weights={acuracy: 1.0}"))


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, "1.0", None])
def test_non_finite_weight_fails(bad):
    with pytest.raises(ValueError, match="reward.weights.format"):
        cfg(weights={"accuracy": 1.0, "format": bad}).check()


@pytest.mark.parametrize("field, bad", [("timeout_s", 0.0), ("timeout_s", math.inf), ("max_chars", -1)])
def test_bad_limits_fail(field, bad):
    with pytest.raises(ValueError, match=f"reward.{field}"):
        cfg(**{field: bad}).check()


def test_empty_weights_fail():
    with pytest.raises(ValueError, match="empty"):
        cfg(weights={}).check()


def test_length_mismatch_fails(reward):
    with pytest.raises(ValueError, match="2 completions but 1 answers"):
        reward([GOOD, GOOD], ["4"])


def test_workers_start_with_the_run_only_when_a_gold_answer_is_not_a_plain_number():
    """Plain-number gold answers: no worker process until a completion needs math-verify; then it starts and
    decides. A gold answer math-verify must read: the workers start at once (Reward.prepare)."""
    r = build_reward(cfg())
    try:
        assert r.prepare(["4", "-7", "1,000", "2.50", "\\frac{3}{4}"]) is False
        assert r.grader._pool is None
        assert r(["<answer>4</answer>"], ["4"]).terms["accuracy"] == [1.0]
        assert r.grader._pool is None  # graded in this process
        assert r(["<answer>2+2</answer>"], ["4"]).terms["accuracy"] == [1.0]  # math-verify's verdict
        assert r.grader._pool is not None
    finally:
        r.close()
    r = build_reward(cfg())
    try:
        assert r.prepare(["4", "x^2+1"]) is True and r.grader._pool is not None
    finally:
        r.close()


def test_workers_that_cannot_start_on_first_need_score_errors_and_are_not_retried(monkeypatch, caplog):
    """A pool that fails to start when a batch first needs it: that batch's undecided answers are errors, the
    failure is logged once, and later batches do not try (and wait) again."""
    import sys

    from pods.reward import grading

    monkeypatch.setattr(sys, "executable", "/bin/false")
    starts = []
    real = grading.Pool.__init__
    monkeypatch.setattr(
        grading.Pool, "__init__", lambda self, size: (starts.append(size), real(self, size))[1]
    )
    r = build_reward(cfg(workers=1))
    try:
        with caplog.at_level("ERROR", logger="pods"):
            for _ in range(2):
                out = r(["<answer>2+2</answer>", "<answer>4</answer>"], ["4", "4"])
                assert out.terms["accuracy"] == [0.0, 1.0] and out.n_errors == 1
        assert len(starts) == 1
        msgs = [m for m in caplog.messages if "math-verify grading is unavailable" in m]
        assert len(msgs) == 1 and "did not start" in msgs[0]
    finally:
        r.close()
