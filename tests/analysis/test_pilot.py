"""Pilot checks against hand-computed answers on fabricated run dirs."""

import json
from pathlib import Path

import numpy as np
import pytest

from pods.analysis.errors import CompareError
from pods.analysis.pilot import (
    Criteria,
    check_candidate,
    choose,
    group_by_config,
    peak_time,
    rise_at_first_checkpoint,
)


def write_run(d: Path, variant: str, seed: int, lr: float, accs: list[float], step_s: float, zero_var: float):
    """Evals every 10 s; 6 train records per run, the first two with a warm-up cost of 9 s."""
    d.mkdir(parents=True)
    (d / "run_info.json").write_text(
        json.dumps({"name": f"{variant}-s{seed}", "variant": variant, "seed": seed})
    )
    (d / "config.yaml").write_text(f"optim:\n  lr: {lr}\n")
    recs = [
        {
            "kind": "train",
            "step": k,
            "train_time": k,
            "rollouts": k,
            "timing/step": 9.0 if k < 2 else step_s,
            "selector/all_zero_var_frac": 0.0 if k < 2 else zero_var,
        }
        for k in range(6)
    ]
    recs += [
        {"kind": "eval", "step": k, "train_time": 10.0 * k, "rollouts": k, "eval/accuracy": a}
        for k, a in enumerate(accs)
    ]
    (d / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in recs) + "\n")


def test_rise_and_peak_time():
    grid = np.array([0.0, 10, 20, 30, 40])
    curve = np.array([0.5, 0.6, 0.7, 0.9, 0.8])  # rise 0.4; 0.1 of it at T=10
    assert rise_at_first_checkpoint(grid, curve) == pytest.approx(0.25)
    assert peak_time(grid, curve) == 30.0
    # the start is never the peak: a curve that only falls still has a peak at T > 0
    assert peak_time(grid, np.array([0.9, 0.5, 0.6, 0.4, 0.4])) == 20.0
    assert np.isnan(rise_at_first_checkpoint(grid, np.array([0.9, 0.5, 0.6, 0.4, 0.4])))


def test_candidates_pass_fail_and_choice(tmp_path):
    slow = [0.5, 0.55, 0.6, 0.7, 0.8]  # rise 0.3, 1/6 at T=10, peak at 40 (> 20)
    fast = [0.5, 0.9, 0.9, 0.91, 0.9]  # jumps: 0.4 of 0.41 at T=10
    for s in (1, 2):
        write_run(tmp_path / f"a-g{s}", "none-n16-m16", s, 1e-6, slow, 1.0, 0.5)
        write_run(tmp_path / f"b-g{s}", "none-n16-m16", s, 1e-5, fast, 1.0, 0.5)
    write_run(tmp_path / "a-p1", "max_variance-n64-m16", 1, 1e-6, slow, 1.1, 0.3)
    write_run(tmp_path / "b-p1", "max_variance-n64-m16", 1, 1e-5, fast, 1.3, 0.3)
    groups = group_by_config(tmp_path, "optim.lr")
    assert sorted(groups) == ["1e-05", "1e-06"] and len(groups["1e-06"]) == 3
    crit = Criteria()
    rows = {k: check_candidate(v, 10, 40, crit) for k, v in groups.items()}
    a, b = rows["1e-06"], rows["1e-05"]
    assert a["first_rise"] == pytest.approx(0.05 / 0.3) and a["peak_time"] == 40.0
    assert a["zero_var"] == pytest.approx(0.5)  # the warm-up records are skipped
    assert a["step_ratio"] == pytest.approx(1.1) and a["passes"]
    assert not b["i"] and b["peak_time"] == 30.0 and b["ii"] and not b["iv"] and not b["passes"]
    assert a["rise"] == pytest.approx(0.3) and a["v"]
    assert choose(rows) == "1e-06"
    flat = {k: check_candidate(v, 10, 40, Criteria(min_rise=0.5)) for k, v in groups.items()}
    assert not flat["1e-06"]["v"] and choose(flat) is None  # a rise below the floor fails (v)
    assert choose({"1e-05": b}) is None


def test_candidate_without_pods_is_refused(tmp_path):
    write_run(tmp_path / "g1", "none-n16-m16", 1, 1e-6, [0.5, 0.6], 1.0, 0.5)
    with pytest.raises(CompareError, match="max_variance-n64-m16"):
        check_candidate([tmp_path / "g1"], 10, 10, Criteria())


def test_step_ratio_read_on_runs_timed_alone(tmp_path):
    """(iv) from `alone` runs when given; a candidate with none timed alone fails (iv), never passes by default."""
    rise = [0.5, 0.55, 0.6, 0.7, 0.8]
    write_run(tmp_path / "s/g1", "none-n16-m16", 1, 1e-6, rise, 1.0, 0.5)
    write_run(tmp_path / "s/p1", "max_variance-n64-m16", 1, 1e-6, rise, 1.5, 0.3)  # shared: 1.5x
    write_run(tmp_path / "a/g1", "none-n16-m16", 1, 1e-6, [0.5], 0.10, 0.5)
    write_run(tmp_path / "a/p1", "max_variance-n64-m16", 1, 1e-6, [0.5], 0.13, 0.3)  # alone: 1.3x
    runs, alone = (
        group_by_config(tmp_path / "s", "optim.lr")["1e-06"],
        group_by_config(tmp_path / "a", "optim.lr"),
    )
    crit = Criteria(max_step_ratio=1.35)
    shared = check_candidate(runs, 10, 40, crit)
    assert shared["step_ratio"] == pytest.approx(1.5) and not shared["iv"]
    timed = check_candidate(runs, 10, 40, crit, alone["1e-06"])
    assert timed["step_ratio"] == pytest.approx(1.3) and timed["iv"] and timed["passes"]
    untimed = check_candidate(runs, 10, 40, crit, [])
    assert np.isnan(untimed["step_ratio"]) and not untimed["iv"] and not untimed["passes"]
