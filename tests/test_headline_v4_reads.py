"""scripts/headline_v4_reads.sh: every registered read of headline v4 over two fabricated calls."""

import subprocess
import tarfile
from pathlib import Path

import pytest

from tests.analysis.test_pilot_seed_checks import gradual, write_run
from tests.conftest import script_env

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_reads_over_two_calls(tmp_path):
    calls = []
    for c, seeds in (("A", (1, 2, 3)), ("B", (4, 5, 6))):  # each call its own seeds, as the study's
        w = tmp_path / "work" / c / "confirm"
        for s in seeds:
            write_run(w / f"g{s}", "none-n16-m16", s, 2e-5, 100, gradual(0.08, s), 0.2)
            write_run(w / f"p{s}", "max_variance-n64-m16", s, 2e-5, 100, gradual(0.12, s + 10), 0.3)
        (tmp_path / c).mkdir()
        with tarfile.open(tmp_path / c / "confirm.tgz", "w:gz") as t:
            t.add(w, arcname="confirm")
        calls.append(f"{c}={tmp_path / c}")
    out = tmp_path / "out"
    env = script_env(HV4R=str(tmp_path / "r"))
    subprocess.run(
        ["bash", "scripts/headline_v4_reads.sh", "confirm", str(out), *calls], cwd=ROOT, env=env, check=True
    )
    blocked = (out / "blocked.md").read_text()
    # PODS's curves rise 0.12 in 300 s against GRPO's 0.08: it reaches GRPO's threshold sooner in both calls
    assert "| max_variance-n64-m16 | 1.50x | 1.47x |" in blocked
    assert "6/6" in blocked  # paired gap: every seed above its GRPO
    assert (out / "seed_curves.png").read_bytes()[:4] == b"\x89PNG"
    checks = (out / "seed_checks.md").read_text()
    assert checks.count("| confirm | 2e-05 | 100 | 3/3 |") == 2
    for name in ("blocked_strict.md", "blocked_per_step.md", "blocked_per_rollout.md", "step_costs.md"):
        assert (out / name).stat().st_size > 0
    pooled = (out / "pooled_paper" / "summary.md").read_text()
    assert "| none-n16-m16 | 6 |" in pooled and "- pooled over model.path (--pool)" in pooled  # said
