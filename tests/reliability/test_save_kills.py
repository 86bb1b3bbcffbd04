"""SIGKILL aimed at checkpoint saves: the run resumes to bitwise-equal weights with every record once.
A small dose of scripts/soak_save_kills.py (results/save_kill_soak holds its 50-kill run)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_kills_inside_saves_resume_bitwise_equal(tmp_path):
    cmd = [
        sys.executable,
        "scripts/soak_save_kills.py",
        "--kills",
        "1",
        "--seed",
        "1",
        "--out",
        str(tmp_path),
    ]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["kills_with_a_save_half_done_on_disk"] >= 1 and summary["failures"] == []
    assert summary["runs_bitwise_equal"] == summary["runs"] >= 1
