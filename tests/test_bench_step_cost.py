"""scripts/bench_step_cost.py's A/B benchmarks run end to end on the CPU at the smallest shape (one prompt, 8 new
tokens): the host-work A/B (before/after detokenize and reward, bench/host_work.py) and the prefill A/B. A change
to the reward's or the backend's interface that the benchmark's 'before' arms do not follow fails here."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_host_and_prefill_ab_run_and_agree(tmp_path):
    cmd = [sys.executable, "scripts/bench_step_cost.py", "--device", "cpu", "--threads", "1",
           "--prompts-per-step", "1", "--settings", "", "--host-ab", "--host-reps", "1", "--prefill-ab", "--profile-decode",
           "--set", "model.max_completion_len=8", "--out", str(tmp_path)]  # fmt: skip
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    table = (tmp_path / "results.md").read_text()
    assert "| detokenize |" in table and "| reward |" in table
    assert table.count("Profile of one generate call") == 2 and "| `aten::mm` |" in table  # 16 and 64 rows
    assert json.loads((tmp_path / "results.json").read_text())  # the numbers behind the table
