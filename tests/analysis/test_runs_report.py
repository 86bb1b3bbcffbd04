"""pods.analysis.runs_report: eval accuracy before/after/peak per run and the mean; the scripts/ entry points."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from pods.analysis.runs_report import main

ROOT = Path(__file__).resolve().parents[2]


def _run(d: Path, accs: list[float]) -> None:
    d.mkdir(parents=True)
    recs = [
        {
            "kind": "eval",
            "step": 2 * i,
            "train_time": 10.0 * i,
            "wall_time": 100.0 + 20 * i,
            "eval/accuracy": a,
        }
        for i, a in enumerate(accs)
    ]
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))


def test_before_after_peak_and_mean(tmp_path, capsys):
    _run(tmp_path / "s0", [0.25, 0.75, 0.5])
    _run(tmp_path / "s1", [0.25, 0.5, 0.75])
    main([str(tmp_path / "s0"), str(tmp_path / "s1")])
    out = capsys.readouterr().out
    assert out.startswith("# Default run (`python -m pods.train`), 2 seeds")
    assert "| s0 | 0.250 | 0.500 | 0.750 | 4 | 20 | 40 |" in out
    assert "| s1 | 0.250 | 0.750 | 0.750 | 4 | 20 | 40 |" in out
    assert "| **mean** | 0.250 | 0.625 | 0.750 | | | |" in out
    assert "Mean change after - before: +37.5 points absolute." in out


def test_scripts_are_thin_entry_points(tmp_path):
    _run(tmp_path / "sweep" / "grpo-s1", [0.25, 0.5])
    env = {**os.environ, "PYTHONPATH": str(ROOT)}  # this checkout's pods, not an installed one
    for script, arg, expect in [
        ("scripts/phase_totals.py", tmp_path / "sweep", "| grpo | 1 |"),
        ("scripts/report_runs.py", tmp_path / "sweep" / "grpo-s1", "| grpo-s1 | 0.250 | 0.500 |"),
    ]:
        out = subprocess.run(
            [sys.executable, script, str(arg)], cwd=ROOT, env=env, capture_output=True, text=True, check=True
        ).stdout
        assert expect in out, (script, out)
