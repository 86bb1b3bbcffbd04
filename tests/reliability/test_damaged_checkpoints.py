"""Faults inside a save: a damaged newest checkpoint (truncated trainer_state.pt or weights, garbage in
`latest`) is named in one line and the resume falls back to the newest intact one; a full disk during a save
is one line with the previous checkpoint intact; trainer_state.pt runs no code on load. Each resumed run ends
bitwise equal to the uninterrupted one, every record once."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from pods import checkpoint as ckpt
from pods.errors import ConfigError
from pods.resume import read_state
from pods.tracking import read_metrics
from pods.train import run
from tests.conftest import SMOKE

ROOT = Path(__file__).resolve().parents[2]
COMMON = [*SMOKE, "max_steps=4", "checkpoint.every_steps=1", "checkpoint.keep_last=3", "eval.every_steps=2"]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    from tests.conftest import compose_cfg

    d = tmp_path_factory.mktemp("reference") / "run"
    run(compose_cfg(COMMON, d))
    return d


def _records(d: Path) -> list[tuple[str, int]]:
    return [(r["kind"], r["step"]) for r in read_metrics(d / "metrics.jsonl")]


def _final_weights(d: Path) -> dict:
    return ckpt.read_weights(d / "checkpoints" / "step_0000004")


def assert_same_run(a: Path, b: Path) -> None:
    """Every record once, the same train records, bitwise-equal final weights."""
    assert _records(b) == _records(a) == [("eval", 0), *[("train", s) for s in (1, 2)], ("eval", 2),
                                          *[("train", s) for s in (3, 4)], ("eval", 4)]  # fmt: skip
    for x, y in zip(read_metrics(a / "metrics.jsonl"), read_metrics(b / "metrics.jsonl")):
        assert x.get("update/loss") == y.get("update/loss") and x.get("reward/mean") == y.get("reward/mean")
    wa, wb = _final_weights(a), _final_weights(b)
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


DAMAGE = {
    "trainer_state_truncated": (lambda s: _truncate(s / "trainer_state.pt"), "trainer_state.pt is"),
    "weights_truncated": (lambda s: _truncate(s / "model" / "model.safetensors"), "model.safetensors is"),
    "weights_flipped_byte": (
        lambda s: (s / "model" / "model.safetensors").open("r+b").write(b"\x00" * 64),
        "model.safetensors checksum differs",
    ),
}


@pytest.mark.parametrize("kind", sorted(DAMAGE))
def test_damaged_newest_checkpoint_falls_back_to_the_intact_one(kind, reference, make_cfg, tmp_path, caplog):
    d = tmp_path / "run"
    shutil.copytree(reference, d)
    damage, says = DAMAGE[kind]
    damage(d / "checkpoints" / "step_0000004")
    with caplog.at_level(logging.WARNING, logger="pods"):
        run(make_cfg(*COMMON, "resume=true", run_dir=d))  # from step 3: step 4 and its eval recomputed
    lines = [r.getMessage() for r in caplog.records if "damaged" in r.getMessage()]
    assert len(lines) == 1 and "step_0000004" in lines[0] and says in lines[0], lines
    assert_same_run(reference, d)
    assert ckpt.verify(d / "checkpoints" / "step_0000004") is None  # re-saved whole


def test_garbage_in_latest_is_named_and_the_newest_complete_is_used(reference, make_cfg, tmp_path, caplog):
    d = tmp_path / "run"
    shutil.copytree(reference, d)
    shutil.rmtree(d / "checkpoints" / "step_0000004")  # as if killed in step 4, before its save
    (d / "checkpoints" / "latest").write_bytes(os.urandom(40))
    with caplog.at_level(logging.WARNING, logger="pods"):
        run(make_cfg(*COMMON, "resume=true", run_dir=d))
    assert any("not a complete checkpoint; using step_0000003" in r.getMessage() for r in caplog.records)
    assert_same_run(reference, d)


def test_trainer_state_runs_no_code_on_load(tmp_path):
    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {tmp_path / 'pwned'}",))

    d = tmp_path / "step_0000001"
    d.mkdir()
    torch.save({"format": 2, "step": 1, "x": Evil()}, d / "trainer_state.pt")
    with pytest.raises(ConfigError, match="pods loads no code from a checkpoint") as e:
        read_state(d)
    assert "\n" not in str(e.value) and not (tmp_path / "pwned").exists()


def _mount_tmpfs(path: Path, size: str) -> None:
    path.mkdir(parents=True)
    try:
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], check=True,
                       capture_output=True, text=True)  # fmt: skip
    except (OSError, subprocess.CalledProcessError) as e:
        pytest.skip(f"cannot mount a small tmpfs here (needs root): {getattr(e, 'stderr', '') or e}".strip())


@pytest.mark.slow
def test_full_disk_during_a_save_is_one_line_and_the_run_resumes_elsewhere(reference, tmp_path):
    # 14 MiB: the first checkpoint (9.6 MiB) fits, the second does not
    disk = tmp_path / "small"
    _mount_tmpfs(disk, "14m")
    try:
        d = disk / "run"
        cmd = [sys.executable, "-m", "pods.train", *COMMON, f"hydra.run.dir={d}"]
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 2, proc.stderr[-3000:]
        errors = [x for x in proc.stderr.splitlines() if x.startswith("pods: error:")]
        assert len(errors) == 1 and "no space left on device" in errors[0], proc.stderr[-3000:]
        assert "step_0000001 and `latest` are intact" in errors[0] and "Traceback" not in proc.stderr
        root = d / "checkpoints"
        assert sorted(p.name for p in root.iterdir()) == ["latest", "step_0000001"]  # no partial temp dir
        assert (root / "latest").read_text() == "step_0000001" and ckpt.verify(root / "step_0000001") is None
        moved = tmp_path / "moved"
        shutil.copytree(d, moved)
    finally:
        subprocess.run(["umount", str(disk)], check=False)
    run_cmd = [sys.executable, "-m", "pods.train", *COMMON, f"hydra.run.dir={moved}", "resume=true"]
    subprocess.run(run_cmd, cwd=ROOT, check=True, capture_output=True, timeout=300)
    assert_same_run(reference, moved)
