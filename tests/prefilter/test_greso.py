import numpy as np
import torch

from pods.prefilter import GresoFilter, NoFilter
from pods.prefilter.greso import (
    EASY,
    HARD,
    MIXED,
    group_outcome,
    keep_probability,
    zero_var_streak,
)


def test_outcomes_and_streaks():
    r = torch.tensor([[1.0, 1.0], [0.0, 0.0], [1.0, 0.0]])
    assert group_outcome(r).tolist() == [EASY, HARD, MIXED]
    assert zero_var_streak([]) == (MIXED, 0)
    assert zero_var_streak([EASY, MIXED, EASY, EASY]) == (EASY, 2)
    assert zero_var_streak([HARD, HARD, HARD]) == (HARD, 3)
    assert zero_var_streak([HARD, MIXED]) == (MIXED, 0)
    assert keep_probability(0, 0.5, 0.01) == 1.0
    assert keep_probability(2, 0.5, 0.01) == 0.25
    assert keep_probability(10, 0.5, 0.01) == 0.01


def test_synthetic_pool_skips_at_expected_rates():
    """Easy prompts seen easy once are kept with prob p_easy; twice: p_easy^2; mixed ones always kept."""
    f = GresoFilter(seed=0, p_init=0.5)
    easy, hard, mixed = list(range(0, 1000)), list(range(1000, 2000)), list(range(2000, 3000))
    f.observe(easy, 0, torch.ones(1000, 4))
    f.observe(hard, 0, torch.zeros(1000, 4))
    f.observe(mixed, 0, torch.tensor([[1.0, 0, 1, 0]]).repeat(1000, 1))
    keep = np.array(f.keep(easy + hard + mixed, 1))
    assert abs(keep[:1000].mean() - 0.5) < 0.05
    assert abs(keep[1000:2000].mean() - 0.5) < 0.05
    assert keep[2000:].all()
    f.observe(easy, 1, torch.ones(1000, 4))  # second easy epoch in a row -> keep prob 0.25
    assert abs(np.mean(f.keep(easy, 2)) - 0.25) < 0.05


def test_probabilities_adapt_toward_target_and_stay_bounded():
    f = GresoFilter(seed=0, p_init=0.5, p_step=0.01)
    # 60% easy, 30% hard: both above targets (8.3% / 16.7%) -> both p go down by 0.01 per step
    for _ in range(5):
        r = torch.cat([torch.ones(6, 4), torch.zeros(3, 4), torch.tensor([[1.0, 0, 0, 0]])])
        f.observe(list(range(10)), 1, r)
        f.end_step(epoch=1)
    assert abs(f.p[EASY] - 0.45) < 1e-9
    assert abs(f.p[HARD] - 0.45) < 1e-9
    # all mixed -> below target -> p goes up, but never above p_max
    for _ in range(100):
        f.observe(list(range(10)), 1, torch.tensor([[1.0, 0, 0, 0]]).repeat(10, 1))
        f.end_step(epoch=1)
    assert abs(f.p[EASY] - 0.95) < 1e-9 and abs(f.p[HARD] - 0.95) < 1e-9


def test_no_adaptation_during_first_epoch():
    f = GresoFilter(seed=0)
    f.observe([0, 1], 0, torch.ones(2, 4))
    f.end_step(epoch=0)
    assert f.p[EASY] == 0.5


def test_state_roundtrip_gives_identical_decisions():
    a = GresoFilter(seed=3)
    a.observe(list(range(50)), 0, torch.ones(50, 4))
    b = GresoFilter(seed=99)
    b.load_state_dict(a.state_dict())
    assert a.keep(list(range(50)), 1) == b.keep(list(range(50)), 1)


def test_no_filter_keeps_everything():
    assert NoFilter().keep([1, 2, 3], 0) == [True] * 3
