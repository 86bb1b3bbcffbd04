"""Selectors get the step's context by name (pods/selector/selectors.py CONTEXT), as reward functions do: a
selector names `lengths`, `tokens`, `correct` or `prompt_ids` and the selector stage computes and passes only
those; one written for `fn(rewards, m, generator)` runs as before."""

from __future__ import annotations

import pytest
import torch

from pods.batch import Rollouts
from pods.config import SelectorConfig
from pods.selector import SELECTORS, register_selector
from pods.selector.selectors import wanted
from pods.selector.stage import SelectorStage, selector_context
from pods.testing import check_selector
from pods.timing import PhaseTimer


def shortest(rewards, m, generator=None, lengths=None):
    """Keep the m shortest completions of each group (ties: the lower index)."""
    return torch.argsort(lengths, dim=1, stable=True)[:, :m].sort(dim=1).values


def right_first(rewards, m, generator=None, correct=None):
    """Keep the correct completions first, then the highest rewards."""
    return torch.argsort(-(10 * correct + rewards), dim=1, stable=True)[:, :m].sort(dim=1).values


def everything(rewards, m, generator=None, **kw):
    everything.seen = sorted(kw)
    return torch.arange(m).expand(rewards.shape[0], m).clone()


@pytest.fixture
def plugins():
    """The three selectors above, registered for one test (removed after it: other tests list the names)."""
    names = {"test_shortest": shortest, "test_right_first": right_first, "test_everything": everything}
    for name, fn in names.items():
        register_selector(name)(fn)
    yield names
    for name in names:
        SELECTORS.pop(name)
        SELECTORS.traits.pop(name, None)


def groups(lengths: list[list[int]], correct: list[list[float]], rewards: list[list[float]]) -> Rollouts:
    """Rollouts of len(lengths) groups: prompts of 2 tokens, completions of the given lengths."""
    P, n = len(lengths), len(lengths[0])
    lc = max(max(r) for r in lengths)
    cm = (torch.arange(lc)[None] < torch.tensor(lengths).reshape(-1, 1)).long()  # (P*n, Lc)
    am = torch.cat([torch.ones(P * n, 2, dtype=torch.long), cm], 1)
    ids = torch.randint(3, 50, am.shape) * am
    return Rollouts(ids, am, 2, cm, [""] * (P * n), list(range(10, 10 + P)), n,
                    rewards=torch.tensor(rewards), correct=torch.tensor(correct))  # fmt: skip


def select(name: str, batch: Rollouts, m: int = 2) -> Rollouts:
    stage = SelectorStage(
        SelectorConfig(name=name, n=batch.group_size, m=m), torch.Generator(), None, PhaseTimer()
    )
    return stage(batch)


def test_a_selector_that_prefers_short_completions(plugins):
    b = groups([[5, 2, 7, 3], [1, 4, 4, 2]], [[0.0] * 4] * 2, [[0.0, 1.0, 0.0, 1.0]] * 2)
    kept = select("test_shortest", b)
    assert kept.completion_lengths.view(2, 2).tolist() == [[2, 3], [1, 2]]
    assert kept.rewards.tolist() == [[1.0, 1.0], [0.0, 1.0]]


def test_a_selector_that_uses_correctness(plugins):
    correct = [[0.0, 1.0, 0.0, 1.0], [1.0, 0.0, 0.0, 0.0]]
    rewards = [[0.5, 2.0, 0.25, 1.0], [1.0, 0.125, 0.75, 0.5]]
    kept = select("test_right_first", groups([[3] * 4] * 2, correct, rewards))
    assert kept.correct.tolist() == [[1.0, 1.0], [1.0, 0.0]]
    assert kept.rewards.tolist() == [[2.0, 1.0], [1.0, 0.75]]  # the right ones, then the best of the rest


def test_only_the_named_context_is_computed_and_passed(plugins):
    assert wanted(SELECTORS["max_variance"]) == []  # today's signature: (rewards, m, generator)
    assert wanted(shortest) == ["lengths"] and wanted(right_first) == ["correct"]
    b = groups([[2, 3], [1, 1]], [[1.0, 0.0]] * 2, [[1.0, 0.0]] * 2)
    select("test_everything", b, m=2)
    assert everything.seen == ["correct", "lengths", "prompt_ids", "tokens"]  # **kw: all of it
    ctx = selector_context(["tokens", "prompt_ids"], b)
    assert ctx["tokens"].tolist() == [[4, 5], [3, 3]]  # 2 prompt tokens + each completion's own
    assert ctx["prompt_ids"] == [10, 11]


def test_context_selectors_pass_the_conformance_check():
    check_selector(shortest)
    check_selector(right_first)
