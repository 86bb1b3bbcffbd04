"""scripts/device/step_cost_v4.sh (issue 38 at headline v4's frozen shape) runs its four parts end to end on the
CPU (SMOKE=1: one prompt, 8 new tokens, a few seconds of training clock): the pair alone at two rollout batch
sizes, the host-work A/B, and the confirm calls' packing (on the device 2 GRPO + 2 PODS runs a GPU at both batch
sizes; under SMOKE one of each at the smaller). The device tool returns at most 8 files, so $OUT must hold only the table and
one archive. Issue 38 is decided, so every part runs with PODS_DECIDED_SMOKE=1 only (tests/conftest.py)."""

import re
import subprocess
import tarfile
from pathlib import Path

import pytest

from tests.conftest import DECIDED_SMOKE, script_env

ROOT = Path(__file__).resolve().parents[1]


def run_script(tmp_path: Path, out: Path, **env: str) -> subprocess.CompletedProcess:
    """The script under SMOKE=1 with this interpreter first on PATH (its `python3`), scratch and output in
    tmp_path (two runs at once never share a folder)."""
    env = script_env(
        SMOKE="1", OUT=str(out), STEP_COST_WORK=str(tmp_path / "work"), HOME=str(tmp_path), **env
    )
    return subprocess.run(["bash", "scripts/device/step_cost_v4.sh"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=900)  # fmt: skip


@pytest.mark.slow
@DECIDED_SMOKE  # issue 38 is decided (results/step_cost/): about 115 CPU-s, not in CI
def test_step_cost_v4_smoke(tmp_path):
    out = tmp_path / "out"
    r = run_script(tmp_path, out)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert sorted(p.name for p in out.iterdir()) == ["step_cost_v4.tgz", "table.md"]
    table = (out / "table.md").read_text()
    for batch in (32, 64):  # SMOKE's two rollout batch sizes
        alone = table.split(f"## Alone on one GPU, rollout batch {batch}")[1].split("##")[0]
        step = next(line for line in alone.splitlines() if line.startswith("| step |"))
        grpo, pods = (float(x) for x in step.split("|")[2:4])
        assert grpo > 0 and pods > 0, step
    # SMOKE packs at the smaller batch only: 1 seed x GRPO 16/16 and PODS 64/16 (on the device 2 seeds, both)
    assert "(1 GRPO 16/16 + 1 PODS 64/16, eval every 2s), rollout batch 32\n" in table, table
    assert "rollout batch 64\n" not in table.split("## Host work")[1], table
    packed = table.split("rollout batch 32\n")[-1].split("Means over seeds")[0]
    runs = [line for line in packed.splitlines() if line.startswith("| seed-")]
    assert len(runs) == 2, packed
    assert all(float(line.split("|")[3]) >= 1 for line in runs), packed  # every run took a step
    assert "| detokenize |" in table and "| reward |" in table  # the host-work A/B
    with tarfile.open(out / "step_cost_v4.tgz") as t:
        names = t.getnames()
    assert sum(n.endswith("metrics.jsonl") for n in names) == 2, names  # every packed run's records


@pytest.mark.slow
@DECIDED_SMOKE
def test_step_cost_v4_cache_part_smoke(tmp_path):
    """PART=cache: the pair alone at the larger batch under each cache variant, every one with its own section;
    SMOKE runs the defaults and the variant with all three overrides (the others say "(not run)")."""
    out = tmp_path / "out"
    r = run_script(tmp_path, out, PART="cache")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert sorted(p.name for p in out.iterdir()) == ["step_cost_v4.tgz", "table.md"]
    table = (out / "table.md").read_text()
    sections = re.split(r"^## ", table, flags=re.M)[1:]
    assert [s.splitlines()[0].split(", ")[-1] for s in sections[:4]] == [
        "today's defaults", "fit", "share_fit", "share_fit_keep"]  # fmt: skip
    for s in (sections[0], sections[3]):
        step = next(line for line in s.splitlines() if line.startswith("| step |"))
        assert all(float(x) > 0 for x in step.split("|")[2:4]), step
    assert all("(not run)" in s for s in sections[1:3])
    with tarfile.open(out / "step_cost_v4.tgz") as t:  # the variant's command names its three overrides
        logs = {n for n in t.getnames() if n.endswith("results.md")}
        keep = t.extractfile(next(n for n in logs if "cache_share_fit_keep" in n)).read().decode()
    assert len(logs) == 2, logs
    assert all(
        o in keep for o in ("share_prefill=true", "size_cache_to_prompt=true", "release_cache=false")
    ), keep


@pytest.mark.slow
@DECIDED_SMOKE
def test_step_cost_v4_flex_part_smoke(tmp_path):
    """PART=flex: SMOKE runs the tiny LoRA pair with rollout.hf.decode_attention=flex and share_prefill on the
    CPU's eager graph loop; its table says the flex decode ran in both runs, and the device-only parts say
    "(not run)". The pair alone runs through `variant`, which PART=cache's smoke runs; PART=flex2's own branch is
    not run on the CPU (it ran on the device twice), to keep CI short."""
    out = tmp_path / "out"
    r = run_script(tmp_path, out, PART="flex")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert sorted(p.name for p in out.iterdir()) == ["step_cost_v4.tgz", "table.md"]
    table = (out / "table.md").read_text()
    sections = {s.splitlines()[0]: s for s in re.split(r"^## ", table, flags=re.M)[1:]}
    for name in ("3B LoRA, share_flex",):
        step = next(line for line in sections[name].splitlines() if line.startswith("| step |"))
        assert all(float(x) > 0 for x in step.split("|")[2:4]), step
        assert "| decode attention | flex | flex |" in sections[name], sections[name]
    assert sum("(not run)" in s for s in sections.values()) == 8, sections.keys()
