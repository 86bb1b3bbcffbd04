"""Reward functions, TRL style: `fn(completions, answers, **kw) -> list[float]`, one value per completion.

The Reward built from the config passes its Grader as `grader=`, so every term shares one worker pool
and one pair of timeout/error counters.
"""

from __future__ import annotations

from pods.reward.grading import Grader, extract_answer
from pods.reward.registry import register_reward

FORMAT_FULL = 1.0  # <think>...</think> then <answer>...</answer>, nothing else but whitespace
FORMAT_ANSWER_ONLY = 0.5  # a well-formed <answer>...</answer> anywhere, without the full shape


@register_reward("accuracy")
def accuracy(completions: list[str], answers: list[str], grader: Grader | None = None, **kw) -> list[float]:
    """1.0 if the answer in the completion (last <answer>, else last \\boxed{}) equals the gold answer.

    >>> accuracy(["<answer>1,000</answer>", "<answer>7</answer>", "7"], ["1000", "8", "7"])
    [1.0, 0.0, 0.0]
    """
    own = grader is None
    grader = Grader() if own else grader
    try:
        return grader.score_batch(completions, answers)  # in parallel, each distinct pair once
    finally:
        if own:
            grader.close()


@register_reward("format")
def format_reward(completions: list[str], answers: list[str] | None = None, **kw) -> list[float]:
    """FORMAT_FULL for <think>..</think><answer>..</answer>, FORMAT_ANSWER_ONLY for an <answer> alone, else 0.

    >>> format_reward(["<think>hm</think>\\n<answer>4</answer>", "<answer>4</answer>", "4"])
    [1.0, 0.5, 0.0]
    """
    scores: dict[str, float] = {}  # n samples of a prompt repeat: each distinct text is scored once
    return [_score_once(scores, c) if isinstance(c, str) else 0.0 for c in completions]


def _score_once(scores: dict[str, float], text: str) -> float:
    if text not in scores:
        scores[text] = _format_score(text)
    return scores[text]


def _format_score(text: str) -> float:
    if _full_shape(text):
        return FORMAT_FULL
    return FORMAT_ANSWER_ONLY if extract_answer(text, boxed=False) is not None else 0.0


def _full_shape(text: str) -> bool:
    """`<think>A</think> <answer>B</answer>`, whitespace around, no think tag in A, no answer tag in B.

    Plain str methods, not a regex: linear and fast on a 1 MB completion full of tags.
    """
    t = text.strip()
    if not (t.startswith("<think>") and t.endswith("</answer>")):
        return False
    think, _, rest = t[len("<think>") :].partition("</think>")
    rest = rest.lstrip()
    if "<think>" in think or not rest.startswith("<answer>") or len(rest) < len("<answer></answer>"):
        return False
    answer = rest[len("<answer>") : -len("</answer>")]
    return "<answer>" not in answer and "</answer>" not in answer
