"""The same global batch gives the same update on 1 process and on 2 (gloo), under DDP and FSDP: loss
normalisers are global totals, the gradient is reduced once per step, and the clip sees the global norm.
`fsdp_keep` keeps the gathered weights through the step (update.fsdp_reshard_after_forward=false)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import torch

from bench.harness import torchrun_command
from scripts.check_update_ranks import run


def _run(procs: int, kind: str, out: Path) -> dict:
    try:
        return run(procs, kind, "cpu", out, timeout=300)
    except SystemExit as e:  # a failed launch: its stderr
        pytest.fail(str(e))


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["ddp", "fsdp", "fsdp_keep", "fsdp_prefetch", "fsdp_units"])
def test_one_and_two_processes_give_the_same_update(tmp_path, kind):
    one = _run(1, "none", tmp_path / "one.pt")
    two = _run(2, kind, tmp_path / "two.pt")
    assert (
        one["stats"]["update/rows"] == two["stats"]["update/rows"] == 6.0
    )  # the zero-variance group skipped
    assert one["stats"]["update/tokens"] == two["stats"]["update/tokens"]
    assert two["stats"]["update/loss"] == pytest.approx(one["stats"]["update/loss"], abs=1e-6)
    assert one["weights"].keys() == two["weights"].keys() == one["start"].keys()
    for k, w in one["weights"].items():
        torch.testing.assert_close(two["weights"][k], w, rtol=1e-5, atol=1e-6, msg=k)
    moved = sum(not torch.equal(w, one["start"][k]) for k, w in one["weights"].items())
    assert moved >= len(one["weights"]) - 2  # the update moved (almost) every tensor


@pytest.mark.slow
def test_fsdp_keeping_the_gathered_weights_all_gathers_once_per_layer_per_step(tmp_path):
    """update.fsdp_reshard_after_forward=false: each FSDP unit is gathered once in the update (its first
    forward), not again in its backward and the next micro-batches; the update is the same (above)."""
    default = _run(2, "fsdp", tmp_path / "default.pt")["all_gathers"]
    keep = _run(2, "fsdp_keep", tmp_path / "keep.pt")["all_gathers"]
    units = 2 + 1  # random_qwen2's decoder layers, each its own unit, and the root
    assert keep == units, (keep, default)
    assert default > 2 * keep  # two micro-batches here, each gathering in its forward and its backward
    # update.fsdp_prefetch moves the gathers earlier, it does not add any
    assert _run(2, "fsdp_prefetch", tmp_path / "prefetch.pt")["all_gathers"] == default
    # each of the 2 micro-batches gathers every layer unit in its forward and again in its backward, and the
    # root once (kept for its backward); with update.fsdp_unit_params both layers are one unit
    grouped = _run(2, "fsdp_units", tmp_path / "units.pt")["all_gathers"]
    assert (default, grouped) == (2 * (2 * 2 + 1), 2 * (2 * 1 + 1))


@pytest.mark.slow
@pytest.mark.parametrize("unit_params", [0, 10**12])  # each layer a unit; both layers one unit
def test_the_generation_copy_refreshed_per_fsdp_unit_equals_the_per_tensor_refresh(tmp_path, unit_params):
    """The Trainer refreshes its bf16 generation copy inside Dist.full_weights: one all-gather per FSDP unit in
    the compute dtype instead of one per tensor in float32; the copy's weights are the same, bit for bit."""
    script = Path(__file__).with_name("sync_ranks.py")
    cmd = [*torchrun_command(2), str(script), str(tmp_path / "sync.pt"), str(unit_params)]
    proc = subprocess.run(
        cmd, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = torch.load(tmp_path / "sync.pt")
    assert r["per_unit"].keys() == r["per_tensor"].keys()
    for k, w in r["per_tensor"].items():
        assert w.dtype == torch.bfloat16 and torch.equal(r["per_unit"][k], w), k
    moved = sum(not torch.equal(w, r["before"][k]) for k, w in r["per_unit"].items())
    assert moved >= len(r["before"]) - 2  # the refresh brought the moved shards (rotary buffers stay)
    assert r["units"] == (3 if unit_params == 0 else 2)  # 2 layers and the root; or the layers' unit and root
    assert r["unit_gathers"] == r["units"]
    assert r["plain"] and r["resharded"]  # full tensors inside the block, shards again after it
    for k, w in r["per_tensor"].items():  # a unit at a time (the Trainer's way): the same weights
        assert torch.equal(r["windowed"][k], w), k
    assert r["window_gathers"] == r["units"]
    names = [n for unit in r["named"] for n in unit]
    assert sorted(names) == r["all_names"] and len(r["named"]) == r["units"]  # each weight in one unit
    for i, (unit, whole) in enumerate(zip(r["named"], r["whole"])):  # whole: this unit, at most the next too
        after = r["named"][i + 1] if i + 1 < len(r["named"]) else []
        assert set(unit) <= set(whole) <= set(unit) | set(after), (i, whole)
