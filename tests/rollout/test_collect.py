"""The filter -> generate -> reward -> refill part of a step (pods.collect over its stages) with a fake
backend and reward: the batch it returns carries rewards, correctness and how it was sampled; dynamic
sampling refills; the pre-rollout filter's skips are counted; rewards get the prompts and the rows' fields;
positions map to the right rank's groups."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from pods.batch import Rollouts, Sampling
from pods.collect import Stages, collect
from pods.config import DynamicSamplingConfig, SamplingConfig
from pods.data import PromptSampler
from pods.distributed import Dist
from pods.prefilter import NoFilter, PrefilterStage
from pods.reward.registry import RewardOutput, RewardStage
from pods.rollout.dynamic_sampling import DynamicSampling, useful_groups
from pods.rollout.stage import RolloutStage
from pods.timing import PhaseTimer

# prompt i's completions: "1" (right) or "0" (wrong); prompts 0-3 all right, 4-7 all wrong, 8+ mixed
PROMPTS = [f"q{i}" for i in range(16)]


class FakeBackend:
    pad_id, reads_policy = 0, None

    def __init__(self):
        self.calls = []

    def generate(self, prompts, prompt_ids, n, temperature, top_p=1.0, top_k=0, add_special_tokens=False):
        self.calls.append((list(prompt_ids), n, temperature, top_p, top_k, add_special_tokens))
        texts = [("1" if p < 4 or (p >= 8 and j % 2) else "0") for p in prompt_ids for j in range(n)]
        B = len(texts)
        return Rollouts(
            input_ids=torch.ones(B, 3, dtype=torch.long),
            attention_mask=torch.ones(B, 3, dtype=torch.long),
            prompt_len=2,
            completion_mask=torch.ones(B, 1, dtype=torch.long),
            texts=texts,
            prompt_ids=list(prompt_ids),
            group_size=n,
            sampling=Sampling(temperature, top_p, top_k),
        )


def reward(texts, golds, prompts=None, rows=None):
    ok = [float(t == g) for t, g in zip(texts, golds)]
    return RewardOutput(total=ok, correct=ok, terms={"accuracy": ok})


def stages(dynamic: bool, prefilter=None, order=None, reward_fn=reward):
    ds = DynamicSamplingConfig(enabled=dynamic, oversample=1.25, max_rounds=6)
    sampler = PromptSampler(len(PROMPTS), seed=0)
    if order is not None:  # a fixed draw order
        draws = iter(order)
        sampler.next = lambda k: [(next(draws), 0) for _ in range(k)]
    dist, timer, backend = (
        Dist(SimpleNamespace(distributed="none"), torch.device("cpu")),
        PhaseTimer(),
        FakeBackend(),
    )
    rows = [{"question": p, "level": i % 3} for i, p in enumerate(PROMPTS)]
    s = Stages(
        prefilter=PrefilterStage(prefilter or NoFilter(), sampler, 4, len(PROMPTS), dist, timer),
        rollout=RolloutStage(backend, SamplingConfig(0.7, 0.9, 5), 4, False, PROMPTS, dist, timer),
        reward=RewardStage(reward_fn, PROMPTS, ["1"] * 16, rows, dist, timer),
        dynamic_sampling=DynamicSampling(ds, dist),
    )
    return s, backend, dist


def test_one_round_returns_the_batch_with_rewards_correctness_and_sampling():
    s, backend, dist = stages(dynamic=False, order=[0, 4, 8, 9])
    batch = collect(s, 4, dist)
    assert batch.prompt_ids == [0, 4, 8, 9] and batch.group_size == 4
    assert batch.rewards.tolist() == [[1.0] * 4, [0.0] * 4, [0, 1, 0, 1], [0, 1, 0, 1]]
    assert torch.equal(batch.correct, batch.rewards)
    assert batch.sampling == Sampling(0.7, 0.9, 5)
    assert backend.calls == [([0, 4, 8, 9], 4, 0.7, 0.9, 5, False)]
    m = s.metrics()
    assert (m["dynamic_sampling/rounds"], m["prefilter/prompts_drawn"], m["rollout/rollouts"]) == (1, 4, 16)
    assert m["dynamic_sampling/dropped_zero_var"] == 0 and m["prefilter/skipped"] == 0
    assert m["reward/mean"] == 0.5 and m["dynamic_sampling/groups"] == 4 and m["reward/accuracy"] == 0.5


def test_dynamic_sampling_drops_flat_groups_and_refills():
    # round 1 draws ceil(4 / 1 * 1.25) = 5 prompts: 0, 4 (flat), 8, 9, 10 -> 3 useful; round 2 needs 1 more
    s, _, dist = stages(dynamic=True, order=[0, 4, 8, 9, 10, 1, 11, 12, 13, 14, 15])
    batch = collect(s, 4, dist)
    assert batch.prompt_ids == [8, 9, 10, 11]
    assert all(r.max() > r.min() for r in batch.rewards)  # only groups with variance are trained on
    # round 2: ratio 0.5 * 2/5 = 0.2 -> ceil(1 / 0.8 * 1.25) = 2 prompts: 1 (flat), 11 (useful)
    m = s.metrics()
    assert (
        m["dynamic_sampling/rounds"] == 2
        and m["dynamic_sampling/dropped_zero_var"] == 3
        and m["dynamic_sampling/groups"] == 7
    )
    assert s.dynamic_sampling.zero_var_ratio > 0 and s.reward.step_rewards().shape == (7, 4)


def test_prefilter_skips_are_counted_and_never_generated():
    class SkipEven(NoFilter):
        def keep(self, prompt_ids, epoch):
            return [p % 2 == 1 for p in prompt_ids]

    s, backend, dist = stages(dynamic=False, prefilter=SkipEven(), order=list(range(16)))
    batch = collect(s, 4, dist)
    m = s.metrics()
    assert (
        batch.prompt_ids == [1, 3, 5, 7] and m["prefilter/skipped"] == 4 and m["prefilter/prompts_drawn"] == 8
    )
    assert m["prefilter/rollouts_avoided"] == 16
    assert all(p % 2 for call in backend.calls for p in call[0])


def test_the_reward_gets_each_completions_prompt_and_row():
    seen = {}

    def spy(texts, golds, prompts=None, rows=None):
        seen.update(prompts=prompts, rows=rows)
        return reward(texts, golds)

    s, _, dist = stages(dynamic=False, order=[2, 5, 8, 9], reward_fn=spy)
    collect(s, 4, dist)
    assert seen["prompts"] == [p for p in ["q2", "q5", "q8", "q9"] for _ in range(4)]
    assert [r["level"] for r in seen["rows"]] == [lv for lv in [2, 2, 2, 0] for _ in range(4)]


def test_useful_groups_and_rank_positions():
    r = torch.tensor([[1.0, 1.0], [0.0, 1.0], [0.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    assert useful_groups(r, 5) == [1, 3, 4] and useful_groups(r, 2) == [1, 3]
    d = Dist(SimpleNamespace(distributed="none"), torch.device("cpu"))
    d.world = 2  # 5 items sharded: rank 0 holds items 0, 2, 4 (gathered positions 0-2), rank 1 items 1, 3
    d.rank = 0
    assert d.local_positions([1, 3, 4], 5) == [1]
    d.rank = 1
    assert d.local_positions([1, 3, 4], 5) == [0, 1]


def test_a_step_whose_prompts_are_all_skipped_has_no_batch_and_still_reports():
    from pods.config import SelectorConfig
    from pods.selector.stage import SelectorStage

    class SkipAll(NoFilter):
        def keep(self, prompt_ids, epoch):
            return [False] * len(prompt_ids)

    s, backend, dist = stages(dynamic=False, prefilter=SkipAll())
    assert collect(s, 4, dist) is None and backend.calls == []
    m = s.metrics()
    assert m["prefilter/skipped"] == m["prefilter/prompts_drawn"] == 20 * 4 + 16  # the step's draw budget
    selector = SelectorStage(
        SelectorConfig(name="max_variance", n=4, m=2), torch.Generator(), dist, PhaseTimer()
    )
    assert selector(None) is None and selector.metrics(s.reward.step_rewards(), None) == {}


def test_the_prefilter_stage_checkpoints_its_filters_state():
    """What checkpoints hold under `prefilter` is the registered filter's state (the stage's counts are the
    step's), so the Trainer checkpoints the stage and older checkpoints restore into it."""

    class Counting(NoFilter):
        seen = 0

        def observe(self, prompt_ids, epoch, correct):
            self.seen += len(prompt_ids)

        def state_dict(self):
            return {"seen": self.seen}

        def load_state_dict(self, state):
            self.seen = state["seen"]

    s, _, dist = stages(dynamic=False, prefilter=Counting(), order=[0, 4, 8, 9])
    collect(s, 4, dist)
    assert s.prefilter.state_dict() == {"seen": 4} == s.prefilter.prefilter.state_dict()
    other, _, _ = stages(dynamic=False, prefilter=Counting())
    other.prefilter.load_state_dict(s.prefilter.state_dict())
    assert other.prefilter.prefilter.seen == 4
