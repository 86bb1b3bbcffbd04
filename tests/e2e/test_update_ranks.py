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

SCRIPT = Path(__file__).with_name("update_ranks.py")  # as scripts/check_update_ranks.py launches it
KINDS = ["ddp", "fsdp", "fsdp_keep", "fsdp_prefetch", "fsdp_units", "fsdp_pairs", "fsdp_pairs_prefetch"]


def _launch(procs: int, kinds: list[str], out: Path) -> dict:
    """One torchrun launch of update_ranks.py by `procs` processes running `kinds` one after the other (each on a
    model of its own): {kind: its saved update}."""
    cmd = [*torchrun_command(procs), str(SCRIPT), str(out), ",".join(kinds), "cpu"]
    proc = subprocess.run(
        cmd, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True, timeout=600
    )
    if proc.returncode != 0:
        pytest.fail(f"{kinds} x{procs} failed:\n{proc.stderr[-3000:]}")
    return {k: torch.load(out / f"{k}.pt") for k in kinds} if len(kinds) > 1 else {kinds[0]: torch.load(out)}


@pytest.fixture(scope="module")
def launched(tmp_path_factory):
    """(procs, kind) -> that kind's saved update: one process (none) in one launch, every 2-process kind in one
    more, for the module's tests."""
    work = tmp_path_factory.mktemp("update_ranks")
    done = {(1, "none"): _launch(1, ["none"], work / "none_1.pt")["none"]}
    done.update({(2, k): r for k, r in _launch(2, KINDS, work / "two").items()})
    return lambda procs, kind: done[(procs, kind)]


@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
def test_one_and_two_processes_give_the_same_update(launched, kind):
    one = launched(1, "none")
    two = launched(2, kind)
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
def test_fsdp_all_gathers_once_per_unit_per_pass(launched):
    """Each of the 2 micro-batches gathers every layer unit in its forward and again in its backward, and the
    root once (kept for its backward). update.fsdp_reshard_after_forward=false gathers each unit once per step;
    update.fsdp_prefetch moves gathers earlier without adding any; update.fsdp_unit_params makes fewer units.
    The model has 4 decoder layers."""
    kinds = ("fsdp", "fsdp_keep", "fsdp_prefetch", "fsdp_units", "fsdp_pairs", "fsdp_pairs_prefetch")
    runs = {k: launched(2, k) for k in kinds}
    units = {k: r["units"] for k, r in runs.items()}  # measured on the sharded model, the root included
    assert units == {"fsdp": 5, "fsdp_keep": 5, "fsdp_prefetch": 5, "fsdp_units": 2, "fsdp_pairs": 3,
                     "fsdp_pairs_prefetch": 3}  # fmt: skip
    gathers = {k: r["all_gathers"] for k, r in runs.items()}
    for k, n in units.items():
        layer_units = n - 1
        if k == "fsdp_keep":
            assert gathers[k] == n, (k, gathers)
        else:
            assert gathers[k] == 2 * (2 * layer_units + 1), (k, gathers)


@pytest.fixture(scope="module")
def synced(tmp_path_factory) -> dict:
    """sync_ranks.py's three groupings, in one launch of 2 processes (each grouping on a model of its own)."""
    out = tmp_path_factory.mktemp("sync_ranks") / "sync.pt"
    script = Path(__file__).with_name("sync_ranks.py")
    cmd = [*torchrun_command(2), str(script), str(out), "layer,pairs,one"]
    proc = subprocess.run(
        cmd, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return torch.load(out)


@pytest.mark.slow
@pytest.mark.parametrize("grouping,expected_units", [("layer", 5), ("pairs", 3), ("one", 2)])  # root included
def test_the_generation_copy_refreshed_per_fsdp_unit_equals_the_per_tensor_refresh(
    synced, grouping, expected_units
):
    """The Trainer refreshes its bf16 generation copy inside Dist.full_weights: one all-gather per FSDP unit in
    the compute dtype instead of one per tensor in float32; the copy's weights are the same, bit for bit."""
    r = synced[grouping]
    assert r["per_unit"].keys() == r["per_tensor"].keys()
    for k, w in r["per_tensor"].items():
        assert w.dtype == torch.bfloat16 and torch.equal(r["per_unit"][k], w), k
    moved = sum(not torch.equal(w, r["before"][k]) for k, w in r["per_unit"].items())
    assert moved >= len(r["before"]) - 2  # the refresh brought the moved shards (rotary buffers stay)
    assert r["units"] == expected_units  # measured on the sharded model, the root's unit included
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
