"""scripts/device/greso_probe.sh under SMOKE=1 on the CPU: the three arms run, the archive holds their records,
and the table reads them (the pre-rollout filter's columns included). The probe ran and decided nothing registered,
so this runs with PODS_DECIDED_SMOKE=1 only."""

import subprocess
import tarfile
from pathlib import Path

import pytest

from tests.conftest import DECIDED_SMOKE, script_env

ROOT = Path(__file__).resolve().parents[1]


@DECIDED_SMOKE  # the probe is done (results/greso_probe/): about 80 CPU-s, not in CI
@pytest.mark.slow
def test_greso_probe_smoke(tmp_path):
    out = tmp_path / "out"
    env = script_env(SMOKE="1", OUT=str(out), PROBE_WORK=str(tmp_path / "work"))
    r = subprocess.run(["bash", "scripts/device/greso_probe.sh"], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=600)  # fmt: skip
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert sorted(p.name for p in out.iterdir()) == ["probe.tgz", "table.md"]
    table = (out / "table.md").read_text()
    assert "Time to threshold" in table and "skipped before rollout" in table, table
    for arm in ("none-n16-m16", "dynamic_sampling+none-n16-m16", "greso+dynamic_sampling+none-n16-m16"):
        assert f"| seed-1_arm-{arm} |" in table, table
    with tarfile.open(out / "probe.tgz") as t:
        assert sum(n.endswith("metrics.jsonl") for n in t.getnames()) == 3
