"""Issue 28's GPU checks, their pure parts: how far two updates are (scripts/check_update_ranks.py) and what
each scaling point of scripts/bench_scaling.py launches."""

from __future__ import annotations

from argparse import Namespace
from pathlib import Path

import pytest
import torch

from scripts.bench_scaling import DISTS, per_repeat, point_overrides
from scripts.check_update_ranks import update_distance


def _update(delta: dict[str, torch.Tensor], loss=0.5, rows=6.0, tokens=30.0) -> dict:
    start = {k: torch.ones_like(v) for k, v in delta.items()}
    return {
        "start": start,
        "weights": {k: start[k] + v for k, v in delta.items()},
        "stats": {"update/loss": loss, "update/rows": rows, "update/tokens": tokens},
    }


def test_update_distance_is_relative_to_the_reference_update_per_tensor():
    ref = _update({"a": torch.tensor([3.0, 4.0]), "b": torch.tensor([1.0, 0.0])})
    same = update_distance(ref, _update({"a": torch.tensor([3.0, 4.0]), "b": torch.tensor([1.0, 0.0])}))
    assert same == {"rel": 0.0, "tensor": "", "loss_diff": 0.0, "same_rows_tokens": True}
    # a's change off by 0.05 in norm 5 (1%), b's by 0.5 in norm 1 (50%): the worst tensor is reported
    off = update_distance(
        ref, _update({"a": torch.tensor([3.03, 4.04]), "b": torch.tensor([1.0, 0.5])}, loss=0.6)
    )
    assert off["rel"] == pytest.approx(0.5) and off["tensor"] == "b"
    assert off["loss_diff"] == pytest.approx(0.1)
    assert not update_distance(ref, _update({"a": torch.zeros(2), "b": torch.zeros(2)}, rows=4.0))[
        "same_rows_tokens"
    ]


def test_a_diverged_update_is_the_worst_not_a_pass():
    ref = _update({"a": torch.tensor([3.0, 4.0]), "b": torch.tensor([1.0, 0.0])})
    d = update_distance(ref, _update({"a": torch.tensor([3.0, 4.0]), "b": torch.tensor([float("nan"), 0.0])}))
    assert d["rel"] == float("inf") and d["tensor"] == "b"


def test_an_update_that_moves_a_tensor_the_reference_left_alone_counts_as_fully_off():
    ref = _update({"a": torch.zeros(3)})
    assert update_distance(ref, _update({"a": torch.zeros(3)}))["rel"] == 0.0
    assert update_distance(ref, _update({"a": torch.tensor([0.0, 1e-3, 0.0])}))["rel"] == 1.0


@pytest.mark.parametrize("dist", sorted(DISTS))
def test_each_scaling_point_names_its_layout_and_the_same_work(dist, tmp_path):
    a = Namespace(strong=0, completion_len=16, device="cuda", lora=False, steps=5, set=["seed=3"])
    ov = point_overrides(a, tmp_path / "m", (Path("t.jsonl"), Path("e.jsonl")), 2, dist, tmp_path / "r")
    assert f"hardware={DISTS[dist][0]}" in ov and f"hardware.distributed={DISTS[dist][1]}" in ov
    assert ("update.fsdp_reshard_after_forward=false" in ov) == (dist == "fsdp_keep")
    assert ("update.fsdp_prefetch=1" in ov) == (dist == "fsdp_prefetch")
    assert any(o.startswith("update.fsdp_unit_params=") for o in ov) == dist.startswith(
        ("fsdp_units", "fsdp_one", "fsdp_per")
    )
    assert "algo.prompts_per_step=2" in ov and "selector.n=16" in ov and ov[-1] == "seed=3"
    a.strong, a.device = 8, "cpu"  # strong scaling: the global batch is fixed; on a CPU the cpu preset
    ov = point_overrides(a, tmp_path / "m", (Path("t.jsonl"), Path("e.jsonl")), 2, dist, tmp_path / "r")
    assert "algo.prompts_per_step=8" in ov and "selector.n=64" in ov and "hardware=cpu" in ov


def test_each_repeat_pairs_with_its_own_one_process_point():
    walls = {("ddp", 1): [1.0, 1.2], ("ddp", 4): [1.25, 1.2], ("fsdp", 4): [2.0]}  # fsdp: no 1-process point
    rows = per_repeat(walls, weak=True).strip().splitlines()
    assert rows[0].startswith("| dist | procs | wall step s per repeat | efficiency per repeat")
    assert rows[2] == "| ddp | 1 | 1.000, 1.200 | - |"
    assert rows[3] == "| ddp | 4 | 1.250, 1.200 | 0.800, 1.000 |"  # repeat 1 against repeat 1, 2 against 2
    assert rows[4] == "| fsdp | 4 | 2.000 | - |"
    assert "speedup per repeat" in per_repeat(walls, weak=False)


def test_the_update_table_states_each_distance_against_bf16s_own_rounding():
    from scripts.check_update_ranks import render

    d = lambda rel: {"rel": rel, "tensor": "w", "loss_diff": 0.0, "same_rows_tokens": True}  # noqa: E731
    md = render("head\n", [("fp32", d(0.02), None), ("2 processes, fsdp", d(0.03), False)])
    assert "| fp32 | 2.00e-02 | 1.00 | w |" in md and "| 2 processes, fsdp | 3.00e-02 | 1.50 | w |" in md
    assert "**no**" in md and "reference" in md
    assert "| 2 processes, ddp | 1.00e-06 | - | w |" in render(
        "head\n", [("2 processes, ddp", d(1e-6), True)]
    )


def test_the_pass_bound_is_two_independent_bf16_roundings_apart():
    from scripts.check_update_ranks import pass_bound

    # results/scaling/h200x4b/: bf16's own 1.84e-2 -> 2.60e-2; FSDP's bf16 gather read 2.19e-2, DDP 2.55e-3
    assert pass_bound(1.84e-2) == pytest.approx(2.602e-2, rel=1e-3)
    assert 2.19e-2 <= pass_bound(1.84e-2) < 3e-2
    assert pass_bound(0.0) == 1e-6  # an exact float32 run still leaves a bound, not zero


def test_the_default_bound_is_capped_so_a_far_or_diverged_reference_cannot_pass_everything():
    import math

    from scripts.check_update_ranks import CAP, default_bound

    assert default_bound(1.84e-2) == (pytest.approx(2.602e-2, rel=1e-3), "sqrt(2) x bf16's own rounding")
    for own in (1.0, math.inf, math.nan):  # a tensor only one update moved reads 1.0; a diverged one inf
        bound, why = default_bound(own)
        assert bound == CAP and why.startswith("capped") and CAP < 0.5  # a factor-2 error still fails
