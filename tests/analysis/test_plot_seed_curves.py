"""scripts/plot_seed_curves.py draws every seed of every arm from one or more calls' runs."""

import subprocess
import sys
from pathlib import Path

from tests.analysis.test_pilot_seed_checks import ROOT, gradual, write_run

sys.path.insert(0, str(ROOT))
from scripts.plot_seed_curves import arm_curves  # noqa: E402


def calls(tmp_path: Path) -> list[Path]:
    out = []
    for c in ("A", "B"):
        for s in (1, 2):
            write_run(tmp_path / c / f"g{s}", "none-n16-m16", s, 2e-5, 100, gradual(0.1, s), 0.2)
            write_run(
                tmp_path / c / f"p{s}", "max_variance-n64-m16", s, 2e-5, 100, gradual(0.12, s + 10), 0.3
            )
        out.append(tmp_path / c)
    return out


def test_curves_per_arm_and_call(tmp_path):
    got = arm_curves(calls(tmp_path), 10, 300)
    assert sorted(got) == ["max_variance-n64-m16", "none-n16-m16"]
    assert [(i, v.shape) for i, _, v in got["none-n16-m16"]] == [(0, (2, 31)), (1, (2, 31))]


def test_writes_a_png(tmp_path):
    out = tmp_path / "fig" / "seed_curves.png"
    cmd = [sys.executable, "scripts/plot_seed_curves.py", *map(str, calls(tmp_path))]
    subprocess.run([*cmd, "--grid-step", "10", "--x-max", "300", "--out", str(out)], cwd=ROOT, check=True)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
