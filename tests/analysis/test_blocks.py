"""Blocked time-to-threshold reads (pods/analysis/blocks.py) against hand-computed answers."""

import numpy as np
import pytest

from pods.analysis.blocks import blocked_summary, geometric_mean, stratified_permutation_pvalue
from pods.analysis.errors import CompareError
from pods.analysis.peak import RULES, Curves

GRID = np.array([0.0, 10, 20, 30, 40])


def curves(*seeds):
    v = np.array(seeds, dtype=float)
    return Curves(GRID, v, [f"s{i}" for i in range(len(v))], v[:, 1:].max(axis=1), v[:, -1])


# block A starts low: baseline peaks 0.50 (threshold 0.495) at 40; the variant reaches it at 20 -> 2x
A = {
    "base": curves([0.1, 0.2, 0.3, 0.4, 0.5], [0.1, 0.2, 0.3, 0.4, 0.5]),
    "fast": curves([0.1, 0.3, 0.5, 0.5, 0.5], [0.1, 0.3, 0.5, 0.5, 0.5]),
}
# block B starts high: baseline peaks 0.90 at 20 (threshold 0.891); the variant reaches it at 20 -> 1x
B = {
    "base": curves([0.6, 0.8, 0.9, 0.9, 0.9], [0.6, 0.8, 0.9, 0.9, 0.9]),
    "fast": curves([0.6, 0.8, 0.9, 0.9, 0.9], [0.6, 0.8, 0.9, 0.9, 0.9]),
}


def test_each_block_reads_its_own_threshold_and_blocks_combine_by_geometric_mean():
    (row,) = blocked_summary({"A": A, "B": B}, "base", RULES["paper"], n_boot=200)
    assert row.block_speedups == {"A": pytest.approx(2.0), "B": pytest.approx(1.0)}
    assert row.speedup == pytest.approx(np.sqrt(2.0))
    # identical seeds: every bootstrap replicate gives the same answer
    assert row.lo == pytest.approx(np.sqrt(2.0)) and row.hi == pytest.approx(np.sqrt(2.0))
    assert row.p_boot == 0.0


def test_pooling_the_same_blocks_would_leave_block_a_never_reaching():
    # why the blocked read exists: block A's curves never reach a threshold set by the pooled mean
    pooled_base_peak = np.vstack([A["base"].values, B["base"].values]).mean(axis=0)[1:].max()
    assert A["fast"].values.max() < 0.99 * pooled_base_peak


def test_geometric_mean_keeps_never_reached_meaningful():
    assert geometric_mean(np.array([2.0, 0.0])) == 0.0
    assert geometric_mean(np.array([2.0, np.inf])) == np.inf
    assert geometric_mean(np.array([2.0, 8.0])) == pytest.approx(4.0)


def test_stratified_permutation_by_hand():
    # one block, 2 vs 2 seeds, variant strictly faster: 1 of C(4,2) = 6 splits is as extreme
    p = stratified_permutation_pvalue([(np.array([30.0, 40.0]), np.array([10.0, 20.0]))])
    assert p == pytest.approx(1 / 6)
    # two such blocks, labels permuted within each: 1 of 36 combinations
    two = [(np.array([30.0, 40.0]), np.array([10.0, 20.0]))] * 2
    assert stratified_permutation_pvalue(two) == pytest.approx(1 / 36)
    # never-reached (inf) ranks slowest; a variant that never reaches gets p = 1
    assert stratified_permutation_pvalue([(np.array([10.0, 20.0]), np.array([np.inf, np.inf]))]) == 1.0


def test_a_baseline_missing_from_a_block_is_refused_with_the_choices():
    with pytest.raises(CompareError, match="not in every block.*fast"):
        blocked_summary({"A": A, "B": {"fast": B["fast"]}}, "base", RULES["paper"])


def test_paired_gaps_pair_runs_by_seed_and_skip_the_start():
    from pods.analysis.blocks import paired_gaps

    base = Curves(
        GRID,
        np.array([[0.5, 0.1, 0.1, 0.1, 0.1], [0.5, 0.2, 0.2, 0.2, 0.2]]),
        ["none-n16-m16-s2", "none-n16-m16-s1"],
        np.zeros(2),
        np.zeros(2),
    )
    var = Curves(
        GRID,
        np.array([[0.0, 0.3, 0.3, 0.3, 0.3], [0.0, 0.1, 0.1, 0.1, 0.1]]),
        ["max_variance-n64-m16-s1", "max_variance-n64-m16-s2"],
        np.zeros(2),
        np.zeros(2),
    )
    # s1: 0.3 - 0.2; s2: 0.1 - 0.1; the start (T = 0, where they differ by 0.5) is not counted
    assert paired_gaps(base, var) == {"1": pytest.approx(0.1), "2": pytest.approx(0.0)}
    with pytest.raises(CompareError, match="-s<seed>"):
        paired_gaps(base, Curves(GRID, var.values, ["a", "b"], np.zeros(2), np.zeros(2)))


def test_sign_flip_pvalue_against_brute_force():
    """Exact p equals a brute-force loop over all sign patterns, in chunks or not; ties count as extreme."""
    from itertools import product as patterns

    from pods.analysis.blocks import sign_flip_pvalue

    rng = np.random.default_rng(3)
    for n in (1, 5, 9):
        d = rng.normal(0.02, 0.05, n)
        brute = np.mean(
            [abs(np.dot(s, d)) >= abs(d.sum()) * (1 - 1e-12) for s in patterns((1, -1), repeat=n)]
        )
        assert sign_flip_pvalue(d) == pytest.approx(brute)
        assert sign_flip_pvalue(d, chunk=3) == pytest.approx(brute)
    assert sign_flip_pvalue(np.array([0.1, 0.2, 0.3, 0.4, 0.5, 0.6])) == pytest.approx(2 / 64)
    assert sign_flip_pvalue(np.zeros(4)) == 1.0  # no effect: every pattern ties
