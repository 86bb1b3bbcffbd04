"""Held-out evaluation with a fake generator and an exact-match reward: accuracy over questions and samples."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest
import torch

from pods.distributed import Dist
from pods.eval import evaluate
from pods.reward.registry import RewardOutput

DIST = Dist(SimpleNamespace(distributed="none"), torch.device("cpu"))
PROMPTS, GOLDS = ["1+1", "2+2", "3+3", "4+4"], ["2", "4", "6", "8"]


class FakeGenerator:
    """Answers question i's sample j with ANSWERS[i][j]; records what it was asked for."""

    ANSWERS = [["2", "2", "2"], ["4", "5", "5"], ["0", "0", "6"], ["9", "9", "9"]]

    def __init__(self):
        self.calls = []

    def generate(self, prompts, ids, k, temperature, top_p, top_k, add_special_tokens, batch_size):
        self.calls.append((list(ids), k, temperature))
        texts = [self.ANSWERS[i][j] for i in ids for j in range(k)]
        return SimpleNamespace(texts=texts, completion_lengths=torch.tensor([len(t) for t in texts]))


def run(gen, **kw):
    """evaluate() with the default config's eval group (`kw` changed) and sampling section; no chat template."""
    from pods.config import EvalConfig, SamplingConfig

    show = kw.pop("show", 0)
    e = dataclasses.replace(EvalConfig(), **kw)
    data = SimpleNamespace(prompts=PROMPTS, answers=GOLDS, fields=None)  # a PromptSet's lists
    return evaluate(gen, exact, data, e, SamplingConfig(temperature=0.9), False, DIST, show)


def exact(texts, golds, prompts=None, rows=None):  # the Reward's call: prompts and rows too
    ok = [float(t == g) for t, g in zip(texts, golds)]
    return RewardOutput(total=ok, correct=ok, terms={"accuracy": ok})


def test_greedy_accuracy_is_the_share_of_questions_answered_right():
    gen = FakeGenerator()
    metrics, samples = run(gen, num_samples=3, show=2)
    assert gen.calls == [([0, 1, 2, 3], 1, 0.0)]  # greedy: one sample each, whatever num_samples says
    assert metrics["eval/accuracy"] == 0.5 and metrics["eval/samples_per_question"] == 1.0  # q0, q1 right
    assert metrics["eval/questions"] == 4.0 and metrics["eval/accuracy_std_over_samples"] == 0.0
    assert [s["correct"] for s in samples] == [True, True] and samples[0]["gold"] == "2"


def test_sampled_accuracy_averages_over_questions_and_samples():
    metrics, _ = run(FakeGenerator(), num_samples=3, temperature=0.7)
    assert metrics["eval/accuracy"] == pytest.approx(5 / 12)  # 3 + 1 + 1 + 0 of 12 samples
    per_sample = torch.tensor([2 / 4, 1 / 4, 2 / 4])  # sample j's accuracy over the 4 questions
    assert abs(metrics["eval/accuracy_std_over_samples"] - per_sample.std().item()) < 1e-6
    assert metrics["eval/samples_per_question"] == 3.0 and metrics["eval/mean_length"] == 1.0
