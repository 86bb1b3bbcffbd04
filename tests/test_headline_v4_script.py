"""scripts/device/headline_v4.sh under SMOKE=1 on the CPU: a confirmatory call as headline v5 makes it
(scripts/device/headline_v5.sh: today's default generate-call sizes), its one-line refusals of bad input before
any run, and (PODS_DECIDED_SMOKE=1 only: v4's pilot is decided and v5 has none) the whole pilot."""

import json
import re
import subprocess
import tarfile
from pathlib import Path

import pytest

from tests.conftest import DECIDED_SMOKE, script_env

ROOT = Path(__file__).resolve().parents[1]
SHA = re.search(r"^POLICY_SHA256=(\w+)$", (ROOT / "results/headline_v3/frozen.env").read_text(), re.M).group(
    1
)


def run(tmp_path: Path, *args: str, script="headline_v4.sh", **env: str) -> subprocess.CompletedProcess:
    work = {"HV4_WORK" if script == "headline_v4.sh" else "HV5_WORK": str(tmp_path / "work")}
    env = script_env(**{"SMOKE": "1", "OUT": str(tmp_path / "out"), **work, **env})
    return subprocess.run(
        ["bash", f"scripts/device/{script}", *args], cwd=ROOT, env=env, capture_output=True, text=True
    )


@pytest.mark.parametrize(
    "args,env,message",
    [
        (["nonsense"], {}, "unknown phase nonsense"),
        (["confirm"], {}, "give --seeds A-B"),
        (["confirm", "--seeds", "7"], {}, "--seeds takes A-B"),
        (["confirm", "--seeds", "1-2"], {"FROZEN": "/nonexistent.env"}, "no frozen setting"),
    ],
)
def test_bad_input_is_refused_in_one_line(tmp_path, args, env, message):
    r = run(tmp_path, *args, **env)
    assert r.returncode != 0
    assert message in r.stdout + r.stderr
    assert not (tmp_path / "work" / "alone").exists()  # refused before any run


def test_a_frozen_setting_naming_another_policy_is_refused(tmp_path):
    frozen = tmp_path / "frozen.env"
    frozen.write_text(f"LR=1e-5\nWARMUP_STEPS=0\nPOLICY_SHA256={'0' * 64}\n")
    r = run(tmp_path, "confirm", "--seeds", "1-2", FROZEN=str(frozen))
    assert r.returncode == 1
    assert f"!= frozen {'0' * 64}" in r.stdout


@pytest.mark.slow
@pytest.mark.long
@DECIDED_SMOKE
def test_smoke_pilot(tmp_path):
    r = run(tmp_path, "pilot", EXTRA="rollout.hf.share_prefill=false")  # an extra override reaches every run
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    out = tmp_path / "out"
    checks = (out / "checks.md").read_text()
    for setting in ("s1-lr1e-5-w0", "s2-lr2e-5-w100"):
        assert f"| {setting} | " in checks
    assert "PODS/GRPO step cost alone" in checks and "Chosen (" in checks
    assert not (out / "chosen.env").exists()  # nothing learns in a few CPU steps, so nothing is chosen
    with tarfile.open(out / "pilot.tgz") as t:
        names = t.getnames()
    assert sum(n.endswith("metrics.jsonl") for n in names) == 6  # 2 settings x (2 GRPO + 1 PODS)
    assert (out / "alone.tgz").is_file()
    with tarfile.open(out / "pilot.tgz") as t:
        cfg = t.extractfile(next(n for n in names if n.endswith("seed-4001/config.yaml"))).read().decode()
    assert "share_prefill: false" in cfg and "extra overrides: rollout.hf.share_prefill=false" in r.stdout


@pytest.mark.slow
@pytest.mark.long
def test_smoke_v5_confirm(tmp_path):
    frozen = tmp_path / "frozen.env"
    # amendment 3's frozen lines: the setting's own overrides, and no step-cost pair alone in the call
    frozen.write_text(
        f'LR=2e-5\nWARMUP_STEPS=100\nPOLICY_SHA256={SHA}\nSETTING_EXTRA="eval.num_samples=2"\nALONE_PAIR=0\n'
    )
    r = run(tmp_path, "confirm", "--seeds", "1-2", script="headline_v5.sh", FROZEN=str(frozen))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    table = (tmp_path / "out" / "table.md").read_text()
    assert "Time to threshold" in table and "| confirm | " in table
    with tarfile.open(tmp_path / "out" / "confirm.tgz") as t:
        runs = [n for n in t.getnames() if n.endswith("config.yaml") and n.count("/") == 2]  # confirm/<run>/
        configs = [t.extractfile(n).read().decode() for n in runs]
        infos = [json.load(t.extractfile(n.replace("config.yaml", "run_info.json"))) for n in runs]
    assert len(configs) == 4 and all("warmup_steps: 100" in c and "lr: 2.0e-05" in c for c in configs)
    assert all("num_samples: 2" in c for c in configs)
    # v5's one change: the generate-call sizes are the defaults' (auto; 256 rows on a CPU), not v4's 512/1024
    assert all(c.count("batch_size: auto") == 2 for c in configs)
    assert all(i["decisions"]["rollout.batch_size"]["value"] == 256 for i in infos)
    assert "no step-cost pair alone" in r.stdout and not (tmp_path / "out" / "alone.tgz").exists()
