import itertools

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from pods.selector import SELECTORS, downsample, register_selector
from pods.selector.selectors import max_variance


def brute_force_best_var(row: list[float], m: int) -> float:
    """Largest population variance over all size-m subsets (exhaustive)."""
    best = -1.0
    for sub in itertools.combinations(row, m):
        t = torch.tensor(sub, dtype=torch.float64)
        best = max(best, t.var(unbiased=False).item())
    return best


def achieved_var(rewards: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    return rewards.double().gather(1, keep).var(1, unbiased=False)


rows = st.integers(2, 9).flatmap(
    lambda n: st.tuples(
        st.lists(
            st.one_of(
                st.lists(st.floats(-5, 5, allow_nan=False, width=32), min_size=n, max_size=n),  # real
                st.lists(st.sampled_from([0.0, 1.0]), min_size=n, max_size=n),  # binary
                st.lists(st.sampled_from([0.0, 0.1, 1.0, 1.1]), min_size=n, max_size=n),  # heavy ties
            ),
            min_size=1,
            max_size=4,
        ),
        st.integers(2, n),
    )
)


@settings(max_examples=300, deadline=None)
@given(rows)
def test_max_variance_matches_exhaustive_search(case):
    groups, m = case
    r = torch.tensor(groups, dtype=torch.float64)
    keep = downsample("max_variance", r, m)
    got = achieved_var(r, keep)
    for g, row in enumerate(groups):
        assert got[g].item() == pytest.approx(brute_force_best_var(row, m), abs=1e-9)
    assert keep.shape == (len(groups), m)
    assert all(len(set(k.tolist())) == m for k in keep)  # distinct indices


def test_binary_rewards_keep_half_top_half_bottom():
    r = torch.tensor([[1, 0, 0, 1, 0, 0, 0, 1, 1, 1, 0, 0, 0, 0, 0, 1]], dtype=torch.float32)  # 6 ones
    keep = max_variance(r, 4)
    assert r[0, keep[0]].sum().item() == 2  # two correct, two wrong
    keep = max_variance(r, 16)
    assert keep.tolist() == [list(range(16))]


def test_max_variance_is_deterministic_and_breaks_ties_by_index():
    r = torch.zeros(3, 8)
    assert max_variance(r, 4).tolist() == [[0, 1, 2, 3]] * 3
    r = torch.rand(5, 32)
    assert torch.equal(max_variance(r, 8), max_variance(r.clone(), 8))


def test_max_variance_m_equals_two_takes_min_and_max():
    r = torch.tensor([[0.3, 0.9, -0.2, 0.5]])
    assert max_variance(r, 2).tolist() == [[1, 2]]


def test_vectorised_equals_per_row():
    torch.manual_seed(0)
    r = torch.randn(64, 24)
    batched = max_variance(r, 6)
    for g in range(64):
        assert torch.equal(batched[g], max_variance(r[g : g + 1], 6)[0])


def test_max_reward_keeps_the_top_m():
    r = torch.tensor([[0.1, 0.9, 0.5, 0.7, 0.2]])
    assert downsample("max_reward", r, 3).tolist() == [[1, 2, 3]]


def test_random_is_seeded_uniform_and_distinct():
    r = torch.zeros(2000, 8)
    a = downsample("random", r, 2, torch.Generator().manual_seed(1))
    b = downsample("random", r, 2, torch.Generator().manual_seed(1))
    assert torch.equal(a, b)
    counts = torch.bincount(a.flatten(), minlength=8).float() / a.numel()
    assert torch.allclose(counts, torch.full((8,), 1 / 8), atol=0.02)  # each index kept ~ m/n of the time


def test_none_keeps_all_and_refuses_m_below_n():
    r = torch.rand(3, 4)
    assert downsample("none", r, 4).tolist() == [[0, 1, 2, 3]] * 3
    with pytest.raises(ValueError, match="m=2"):
        downsample("none", r, 2)


def test_unknown_selector_lists_valid_names():
    with pytest.raises(KeyError, match="max_variance"):
        downsample("maxvar", torch.rand(1, 4), 2)


def test_selector_defined_here_is_usable_by_name():
    @register_selector("test_lowest_m")
    def lowest(rewards, m, generator=None):
        return torch.argsort(rewards, dim=1, stable=True)[:, :m].sort(1).values

    try:
        keep = downsample("test_lowest_m", torch.tensor([[3.0, 1.0, 2.0]]), 2)
        assert keep.tolist() == [[1, 2]]
    finally:
        SELECTORS.pop("test_lowest_m")


def test_contract_violations_are_caught():
    @register_selector("test_bad")
    def bad(rewards, m, generator=None):
        return torch.zeros(rewards.shape[0], m, dtype=torch.long)  # repeated index

    try:
        with pytest.raises(ValueError, match="repeated"):
            downsample("test_bad", torch.rand(2, 4), 2)
    finally:
        SELECTORS.pop("test_bad")


def test_max_variance_is_optimal_under_a_large_common_offset():
    """E[x^2] - E[x]^2 lost every digit here: offsets of 1e8..1e10 plus U(0, 1) (issue 13)."""
    g = torch.Generator().manual_seed(0)
    wrong = 0
    for case in range(200):
        offset = 10 ** (8 + 2 * case / 200)
        r = offset + torch.rand(1, 8, generator=g, dtype=torch.float64)
        keep = max_variance(r, 4)
        centred = r - r.mean()  # the subsets' variances, computed where no digits are lost
        best = brute_force_best_var(centred[0].tolist(), 4)
        wrong += achieved_var(centred, keep).item() < best - 1e-12
    assert wrong == 0


def test_max_variance_hand_computed_with_offset():
    # sorted: 0, 0.25, 0.5, 1 (+1e10); m=2 keeps min and max (var 0.25); m=3: {0, .25, 1} and {0, .5, 1}
    # have variances 0.1806 and 0.1667, so the bottom two plus the top one win.
    r = torch.tensor([[1e10 + 0.5, 1e10, 1e10 + 1.0, 1e10 + 0.25]], dtype=torch.float64)
    assert max_variance(r, 2).tolist() == [[1, 2]]
    assert max_variance(r, 3).tolist() == [[1, 2, 3]]


@pytest.mark.parametrize("name", ["max_variance", "max_reward", "random"])
@pytest.mark.parametrize(
    "rewards, m, match",
    [
        (torch.tensor([[0.0, float("nan"), 1.0]]), 2, "NaN or inf"),
        (torch.tensor([[0.0, float("inf"), 1.0]]), 2, "NaN or inf"),
        (torch.tensor([[0.0, 1.0], [float("-inf"), 1.0]]), 2, r"row 1, column 0"),
        (torch.rand(2, 4), 5, "m=5"),
        (torch.rand(2, 4), 1, "m=1"),
        (torch.rand(2, 4), 0, "m=0"),
        (torch.rand(4), 2, "tensor"),
        (torch.rand(2, 3, 4), 2, "tensor"),
        ([[0.0, 1.0]], 2, "tensor"),
    ],
)
def test_selectors_refuse_bad_input(name, rewards, m, match):
    with pytest.raises(ValueError, match=match):
        SELECTORS[name](rewards, m, torch.Generator().manual_seed(0))
    with pytest.raises(ValueError, match=match):
        downsample(name, rewards, m, torch.Generator().manual_seed(0))


def test_none_refuses_non_finite_rewards():
    with pytest.raises(ValueError, match="NaN or inf"):
        downsample("none", torch.tensor([[0.0, float("nan")]]), 2)


def test_integer_rewards_are_accepted():
    assert downsample("max_variance", torch.tensor([[0, 1, 1, 0]]), 2).tolist() == [[0, 2]]  # first 0, last 1


def test_the_selector_stage_keeps_m_of_n_and_reports_the_kept_against_all():
    from types import SimpleNamespace

    from pods.batch import Rollouts, Sampling
    from pods.config import SelectorConfig
    from pods.distributed import Dist
    from pods.selector.stage import SelectorStage
    from pods.timing import PhaseTimer

    rewards = torch.tensor([[0.0, 1.0, 1.0, 1.0], [0.0, 0.0, 0.0, 1.0]])
    batch = Rollouts(
        input_ids=torch.ones(8, 3, dtype=torch.long), attention_mask=torch.ones(8, 3, dtype=torch.long),
        prompt_len=2, completion_mask=torch.ones(8, 1, dtype=torch.long), texts=[str(i) for i in range(8)],
        prompt_ids=[0, 1], group_size=4, sampling=Sampling(1.0, 1.0, 0), rewards=rewards,
    )  # fmt: skip
    dist = Dist(SimpleNamespace(distributed="none"), torch.device("cpu"))
    stage = SelectorStage(
        SelectorConfig(name="max_variance", n=4, m=2), torch.Generator(), dist, PhaseTimer()
    )
    kept = stage(batch)
    assert kept.rewards.tolist() == [[0.0, 1.0], [0.0, 1.0]]  # the largest variance in each group
    m = stage.metrics(rewards, kept)
    assert m["selector/kept_reward_mean"] == m["selector/all_reward_mean"] == 0.5
    assert (
        m["selector/kept_group_var"] == 0.25 and m["selector/all_group_var"] == 0.1875
    )  # population variances
