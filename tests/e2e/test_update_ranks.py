"""The same global batch gives the same update on 1 process and on 2 (gloo), under DDP and FSDP: loss
normalisers are global totals, the gradient is reduced once per step, and the clip sees the global norm."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import torch

from bench.harness import torchrun_command

SCRIPT = Path(__file__).with_name("update_ranks.py")


def _run(procs: int, kind: str, out: Path) -> dict:
    cmd = [*torchrun_command(procs), str(SCRIPT), str(out), kind]
    proc = subprocess.run(
        cmd, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return torch.load(out)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["ddp", "fsdp"])
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
