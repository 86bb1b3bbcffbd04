"""Time-to-threshold math against hand-computed answers."""

import numpy as np
import pytest

from pods.analysis.errors import CompareError
from pods.analysis.peak import (
    RULES,
    Curves,
    Rule,
    average_ranks,
    bootstrap_pvalue,
    bootstrap_speedups,
    make_rule,
    mean_curve,
    peak,
    percentile_interval,
    permutation_pvalue,
    pick_baseline,
    rule_threshold,
    speedup,
    spread,
    summarize_curves,
    time_to_threshold,
    variant_time,
)

GRID = np.array([0.0, 25, 50, 75, 100, 125])
# baseline peaks at 0.8 (t=100): threshold 0.792 under the paper's rule, 0.8 under strict
BASE = [0.2, 0.4, 0.6, 0.7, 0.8, 0.78]
# variant reaches 0.792 at t=50 and 0.8 at t=75
FAST = [0.2, 0.5, 0.792, 0.8, 0.79, 0.79]
NEVER = [0.1, 0.2, 0.3, 0.3, 0.3, 0.3]


def curves(*seeds: list[float], grid: np.ndarray = GRID) -> Curves:
    values = np.array(seeds, dtype=float)
    runs = [f"s{i}" for i in range(len(seeds))]
    return Curves(grid, values, runs, np.nanmax(values, axis=1), values[:, -1])


def test_time_to_threshold_reads_the_first_grid_point_at_or_above():
    grid, v = np.array([0.0, 10, 20, 30]), np.array([0.1, 0.5, 0.9, 0.95])
    assert time_to_threshold(grid, v, 0.9) == 20
    assert time_to_threshold(grid, v, 0.5) == 10
    assert time_to_threshold(grid, v, 0.96) == np.inf


def test_time_to_threshold_interpolates_between_bracketing_evals():
    grid, v = np.array([0.0, 10, 20, 30]), np.array([0.1, 0.5, 0.9, 0.95])
    assert time_to_threshold(grid, v, 0.7, interpolate=True) == pytest.approx(15.0)
    assert time_to_threshold(grid, v, 0.05, interpolate=True) == 0.0  # hit at the first point
    # a NaN before the hit leaves nothing to interpolate from: read the hit itself
    v_nan = np.array([np.nan, np.nan, 0.9, 0.95])
    assert time_to_threshold(grid, v_nan, 0.7, interpolate=True) == 20.0


def test_time_to_threshold_ignores_nan_and_batches():
    grid = np.array([0.0, 1, 2])
    v = np.array([[[np.nan, 0.9, 1.0], [0.1, 0.2, 0.3]], [[0.95, 0.1, 0.1], [0.1, 0.1, 0.9]]])
    t = time_to_threshold(grid, v, np.array([[0.9], [0.9]]))  # (2, 2)
    np.testing.assert_array_equal(t, [[1.0, np.inf], [0.0, 2.0]])


def test_mean_curve_is_nan_where_any_seed_is_missing_and_peak_skips_nan():
    v = np.array([[0.2, 0.4, np.nan], [0.4, 0.6, 0.8]])
    np.testing.assert_allclose(mean_curve(v), [0.3, 0.5, np.nan])
    assert peak(mean_curve(v)) == pytest.approx(0.5)
    assert np.isnan(peak(np.array([np.nan, np.nan])))


def test_speedup_handles_never_reached():
    assert speedup(100.0, 50.0) == 2.0
    assert speedup(np.inf, 50.0) == np.inf  # only the variant reaches
    assert speedup(100.0, np.inf) == 0.0  # only the baseline reaches
    assert np.isnan(speedup(np.inf, np.inf))


def test_rule_presets_and_overrides():
    assert RULES["paper"] == Rule(0.99, "mean", "nearest", None, "paper")
    assert RULES["paper"].max_gap is None and RULES["strict"].max_gap is None  # the cutoff is opt-in
    gap = make_rule("paper", max_gap=60)
    assert gap.max_gap == 60 and gap.name == "paper+max_gap=60"
    assert "max gap: 60" in gap.describe() and "max gap: none" in RULES["paper"].describe()
    with pytest.raises(CompareError, match="max_gap=-1"):
        make_rule("paper", max_gap=-1)
    strict = make_rule("strict")
    assert (strict.threshold, strict.reference, strict.time_read) == (1.0, "mean", "at-or-before")
    custom = make_rule("paper", threshold=1.0)
    assert custom.threshold == 1.0 and custom.name == "paper+threshold=1.0"
    assert make_rule("paper", threshold=0.99) is RULES["paper"]  # no change, same name
    assert "1 x the baseline's mean-curve peak" in strict.describe()
    with pytest.raises(CompareError, match="paper"):
        make_rule("papr")
    with pytest.raises(CompareError, match="nearest, at-or-before, interpolate|interpolate"):
        Rule(time_read="grid")  # the old snap-and-carry read is gone: nearest replaced it


def test_rule_threshold_mean_vs_per_seed():
    v = np.array([[0.5, 0.8], [0.9, 0.6]])  # mean curve [0.7, 0.7]; seed peaks 0.8, 0.9
    assert rule_threshold(v, make_rule("paper")) == pytest.approx(0.99 * 0.7)
    assert rule_threshold(v, make_rule("paper", reference="per-seed")) == pytest.approx(0.99 * 0.85)


def test_variant_time_per_seed_averages_and_needs_every_seed():
    rule = make_rule("paper", reference="per-seed")
    v = np.array([[0.2, 0.9, 0.9], [0.2, 0.2, 0.9]])
    assert variant_time(np.array([0.0, 10, 20]), v, 0.8, rule) == 15.0  # mean of 10 and 20
    v[1, 2] = 0.5
    assert variant_time(np.array([0.0, 10, 20]), v, 0.8, rule) == np.inf


def test_average_ranks_ties_and_inf():
    np.testing.assert_array_equal(
        average_ranks(np.array([3.0, 1, np.inf, 1, np.inf])), [3, 1.5, 4.5, 1.5, 4.5]
    )


def test_permutation_pvalue_exact():
    # 2 vs 2 fully separated: only 1 of C(4,2)=6 splits is as extreme
    assert permutation_pvalue(np.array([100.0, 100]), np.array([50.0, 50])) == pytest.approx(1 / 6)
    # 3 vs 3: 1 of 20; a never-reaching variant seed ranks slowest
    assert permutation_pvalue(np.array([7.0, 8, 9]), np.array([1.0, 2, 3])) == pytest.approx(0.05)
    # ranks 3,4,5 vs 1,2,6: 7 of the 20 triples of 1..6 sum to >= 12
    assert permutation_pvalue(np.array([7.0, 8, 9]), np.array([1.0, 2, np.inf])) == 0.35
    assert permutation_pvalue(np.array([5.0, 5]), np.array([5.0, 5])) == 1.0


def test_permutation_pvalue_sampled_matches_exact():
    base, var = np.array([6.0, 7, 8, 9, 10]), np.array([1.0, 2, 3, 4, 11])
    exact = permutation_pvalue(base, var)
    sampled = permutation_pvalue(base, var, max_exact=50_000 - 1, seed=1)
    assert exact == pytest.approx(sampled)  # 252 splits: still exact
    sampled = permutation_pvalue(base, var, max_exact=100, seed=1)
    assert abs(sampled - exact) < 0.1


def test_percentile_interval_and_bootstrap_pvalue():
    s = np.array([0.0, 1.0, 2.0, 3.0, np.inf, np.nan])
    assert percentile_interval(s, 0.5) == (1.0, 3.0)
    assert percentile_interval(s, 0.95) == (0.0, np.inf)
    assert bootstrap_pvalue(np.array([0.5, 1.0, 2.0, 3.0, np.nan])) == 0.5


def test_spread_and_single_seed():
    assert spread(np.array([0.7, 0.9])) == pytest.approx(
        {"mean": 0.8, "std": np.sqrt(0.02), "min": 0.7, "max": 0.9}
    )
    assert np.isnan(spread(np.array([0.7]))["std"])


def test_pick_baseline_from_the_saved_configs_not_the_names():
    plain = {"max_variance-n64-m16": False, "none-n16-m16": True}
    assert pick_baseline(["max_variance-n64-m16", "none-n16-m16"], plain) == "none-n16-m16"
    assert pick_baseline(["pods", "b"], {"pods": False, "b": True}) == "b"  # the name says nothing
    assert pick_baseline(["only"]) == "only"
    with pytest.raises(
        CompareError, match="no run has a saved config.yaml.*choose --baseline from: grpo, pods"
    ):
        pick_baseline(["grpo", "pods"])  # names are not guessed
    with pytest.raises(CompareError, match="none is plain GRPO.*choose --baseline from: b, a"):
        pick_baseline(["b", "a"], {"a": False, "b": False})
    with pytest.raises(
        CompareError, match="several are plain GRPO .*: a, c; choose --baseline from: a, b, c"
    ):
        pick_baseline(["a", "b", "c"], {"a": True, "b": False, "c": True})


def test_summarize_paper_strict_and_interpolate():
    c = {"grpo": curves(BASE, BASE), "pods": curves(FAST, FAST)}
    paper = summarize_curves(c, make_rule("paper"), "grpo", n_boot=200)
    base, pods = paper.rows
    assert (paper.baseline, paper.threshold) == ("grpo", pytest.approx(0.792))
    assert (base["time"], pods["time"], pods["speedup"]) == (100.0, 50.0, 2.0)
    assert (pods["speedup_lo"], pods["speedup_hi"], pods["p_boot"]) == (2.0, 2.0, 0.0)
    assert pods["p_perm"] == pytest.approx(1 / 6)
    assert pods["curve_peak"] == 0.8 and pods["curve_peak_x"] == 75.0
    assert pods["curve_final"] == 0.79 and pods["seeds_reached"] == 2
    strict = summarize_curves(c, make_rule("strict"), "grpo", n_boot=0)
    assert strict.rows[1]["time"] == 75.0
    assert strict.rows[1]["speedup"] == pytest.approx(100 / 75)
    assert np.isnan(strict.rows[1]["speedup_lo"])  # no bootstrap asked
    interp = summarize_curves(c, make_rule("paper", time_read="interpolate"), "grpo", n_boot=0)
    # baseline crosses 0.792 between (75, 0.7) and (100, 0.8): 75 + 0.92 * 25 = 98
    assert interp.rows[0]["time"] == pytest.approx(98.0)
    assert interp.rows[1]["speedup"] == pytest.approx(98.0 / 50.0)


def test_summarize_variant_that_never_reaches():
    c = {"none": curves(BASE), "max_reward": curves(NEVER, NEVER)}
    s = summarize_curves(c, make_rule("paper"), "none", n_boot=100)
    row = s.rows[1]
    assert row["time"] == np.inf and row["speedup"] == 0.0 and row["seeds_reached"] == 0
    assert (row["speedup_lo"], row["speedup_hi"], row["p_boot"]) == (0.0, 0.0, 1.0)
    assert row["p_perm"] == 1.0
    assert (row["peak_std"], row["peak_max"]) == (0.0, 0.3)


def test_bootstrap_distribution_matches_hand_count():
    # baseline reaches 0.99 at t=100. Variant seed A reaches at 50, seed B at 100, and
    # their mean at 100: a resample is 2.0x only when it draws A twice (p = 1/4).
    grid = np.array([0.0, 50, 100])
    c = {"grpo": curves([0, 0.5, 1.0], grid=grid), "pods": curves([0, 1, 1], [0, 0.5, 1], grid=grid)}
    s = summarize_curves(c, make_rule("paper"), "grpo", n_boot=4000, seed=3)
    row = s.rows[1]
    assert row["speedup"] == 1.0
    assert row["p_boot"] == pytest.approx(0.75, abs=0.03)
    assert (row["speedup_lo"], row["speedup_hi"]) == (1.0, 2.0)
    again = summarize_curves(c, make_rule("paper"), "grpo", n_boot=4000, seed=3)
    assert again.rows[1]["p_boot"] == row["p_boot"]  # seeded


def test_unknown_baseline_lists_variants():
    with pytest.raises(CompareError, match="'grpo' is not a variant; choose --baseline from: pods"):
        summarize_curves({"pods": curves(FAST)}, make_rule(), baseline="grpo")


def test_bootstrap_speedups_chunks_to_the_requested_count():
    c = {"grpo": curves(BASE, FAST), "pods": curves(FAST, BASE)}
    boots = bootstrap_speedups(c, "grpo", make_rule(), n_boot=601, seed=0, chunk=250)
    assert boots["pods"].shape == (601,)
    # each side is BASE-only (t=100), FAST-only (t=50) or mixed (t=100): speedups in {0.5, 1, 2}
    assert set(np.unique(boots["pods"])) <= {0.5, 1.0, 2.0}
