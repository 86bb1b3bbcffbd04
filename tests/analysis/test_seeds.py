"""Per-seed pilot checks (pods/analysis/seeds.py) on synthetic curves: a gradual rise passes, a take-off fails."""

import numpy as np
import pytest

from pods.analysis.seeds import SeedCriteria, check_setting, choose, rises, seed_stats, takes_off

T = np.arange(0, 310, 10.0)  # 300 s, a checkpoint every 10 s


def gradual(rise=0.10, noise=0.005, seed=0, start=0.41):
    rng = np.random.default_rng(seed)
    y = start + rise * T / T[-1] + rng.normal(0, noise, len(T))
    y[0] = start  # the shipped policy's eval: the same for every seed
    return y


def takeoff(at=150.0, rise=0.30, start=0.41):
    return start + rise * (at <= T)  # flat, then one 10-s interval holds the whole rise


def test_seed_stats_by_hand():
    s = seed_stats(np.array([0.4, 0.42, 0.41, 0.45, 0.46, 0.47]), tail=3)
    assert s["start"] == 0.4
    assert s["end"] == pytest.approx(0.46)
    assert s["rise"] == pytest.approx(0.06)
    assert s["jump"] == pytest.approx(0.04)
    assert s["noise"] == pytest.approx(np.std([0.02, -0.01, 0.04, 0.01, 0.01], ddof=1))


def test_gradual_seed_rises_and_does_not_take_off():
    s = seed_stats(gradual())
    assert rises(s) and not takes_off(s)


def test_takeoff_seed_fails():
    s = seed_stats(takeoff())
    assert s["rise"] == pytest.approx(0.30)
    assert takes_off(s)


def test_take_off_over_30_s_with_one_big_interval_fails():
    y = 0.41 + np.interp(T, [0, 140, 150, 160, 170, 300], [0, 0, 0.04, 0.22, 0.26, 0.27])
    assert takes_off(seed_stats(y))  # 0.18 of a 0.27 rise in one interval


def test_flat_or_falling_seed_neither_rises_nor_takes_off():
    flat = seed_stats(0.41 + 0.004 * np.sin(T))
    assert not rises(flat) and not takes_off(flat)
    falling = seed_stats(0.41 - 0.05 * T / T[-1])
    assert not rises(falling) and not takes_off(falling)


def test_rise_below_own_noise_fails_a():
    s = seed_stats(gradual(rise=0.01, noise=0.02, seed=3))
    assert not rises(s)


def test_gradual_setting_passes_and_takeoff_setting_fails():
    good = check_setting(
        np.array([gradual(seed=k) for k in range(3)]), np.array([gradual(rise=0.12, seed=9)])
    )
    assert good["passes"], good
    assert good["grpo_rises"] == 3 and good["takeoffs"] == 0
    # v3's material: some seeds take off at random moments, the others stay flat
    bad = check_setting(
        np.array([takeoff(60), takeoff(200), gradual(rise=0.0, seed=1)]), np.array([takeoff(100)])
    )
    assert not bad["a"] and not bad["b"] and not bad["passes"]
    assert bad["takeoffs"] == 3


def test_pods_takeoff_alone_fails_b():
    r = check_setting(np.array([gradual(seed=k) for k in range(3)]), np.array([takeoff(120)]))
    assert r["a"] and not r["b"] and not r["passes"]


def test_choice_floor_rise_and_snr():
    small = check_setting(
        np.array([gradual(rise=0.03, noise=0.001, seed=k) for k in range(3)]), np.empty((0, 0))
    )
    assert small["a"] and small["b"] and not small["d"]  # rise < 0.05
    noisy = check_setting(
        np.array([gradual(rise=0.06, noise=0.012, seed=k) for k in range(4)]), np.empty((0, 0))
    )
    assert noisy["rise"] >= 0.05 and noisy["rise"] < 4 * noisy["noise"] and not noisy["d"]


def test_end_spread_fails_c():
    r = check_setting(np.array([gradual(rise=0.05, seed=1), gradual(rise=0.15, seed=2)]), np.empty((0, 0)))
    assert not r["c"]  # ends 0.10 apart against a mean rise of 0.10


def test_choose_takes_best_snr_among_passing():
    rows = {
        "x": {"passes": True, "snr": 5.0},
        "y": {"passes": True, "snr": 9.0},
        "z": {"passes": False, "snr": 20.0},
    }
    assert choose(rows) == "y"
    assert choose({"x": {"passes": False, "snr": 1.0}}) is None


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="no gaps"):
        seed_stats(np.array([0.4, np.nan, 0.5, 0.5, 0.5]))
    with pytest.raises(ValueError, match="2\\+ GRPO seeds"):
        check_setting(np.array([gradual()]), np.empty((0, 0)), SeedCriteria())
