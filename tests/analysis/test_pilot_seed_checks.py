"""scripts/pilot_seed_checks.py on fabricated pilot runs: one setting per sub-directory, the per-seed table,
the chosen setting's env lines, and runs stopped before the window's end named."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
T = np.arange(0, 310, 10.0)


def write_run(d: Path, variant: str, seed: int, lr: float, warm: int, accs, step_s: float):
    d.mkdir(parents=True)
    (d / "run_info.json").write_text(
        json.dumps({"name": f"{variant}-s{seed}", "variant": variant, "seed": seed})
    )
    (d / "config.yaml").write_text(f"optim:\n  lr: {lr}\n  warmup_steps: {warm}\n")
    recs = [
        {"kind": "train", "step": k, "train_time": k, "rollouts": k, "timing/step": step_s} for k in range(6)
    ]
    recs += [
        {"kind": "eval", "step": k, "train_time": float(t), "rollouts": k, "eval/accuracy": float(a)}
        for k, (t, a) in enumerate(zip(T[: len(accs)], accs))
    ]
    (d / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in recs) + "\n")


def gradual(rise, seed):
    y = 0.41 + rise * T / T[-1] + np.random.default_rng(seed).normal(0, 0.004, len(T))
    y[0] = 0.41
    return y


def pilot(tmp_path: Path) -> Path:
    root = tmp_path / "pilot"
    for s in (4001, 4002, 4003):
        write_run(root / "s1" / f"g{s}", "none-n16-m16", s, 1e-5, 0, gradual(0.03, s), 0.2)  # too small
        write_run(root / "s2" / f"g{s}", "none-n16-m16", s, 2e-5, 100, gradual(0.10, s), 0.2)  # passes
        jumpy = 0.41 + 0.25 * (100 * (s - 4000) <= T)  # take-offs at 100, 200, 300 s
        write_run(root / "s3" / f"g{s}", "none-n16-m16", s, 4e-5, 100, jumpy, 0.2)
    for name, lr, warm in (("s1", 1e-5, 0), ("s2", 2e-5, 100), ("s3", 4e-5, 100)):
        write_run(root / name / "p4001", "max_variance-n64-m16", 4001, lr, warm, gradual(0.1, 9), 0.3)
    # the setting's own overrides, as headline_v4.sh writes them at launch
    (root / "s2" / "setting_extra.txt").write_text("algo.prompts_per_step=16\n")
    return root


def checks(*args) -> subprocess.CompletedProcess:
    cmd = [
        sys.executable,
        "scripts/pilot_seed_checks.py",
        *map(str, args),
        "--grid-step",
        "10",
        "--x-max",
        "300",
    ]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=True)


def test_table_choice_and_env(tmp_path):
    env = tmp_path / "chosen.env"
    out = checks(pilot(tmp_path), "--chosen-env", env).stdout
    rows: dict[str, str] = {}
    for line in out.splitlines():  # the settings' table comes before the per-seed one
        if line.startswith("| s"):
            rows.setdefault(line.split(" | ")[0].strip("| "), line)
    assert (
        rows["s1"].endswith("| **no** |")
        and rows["s2"].endswith("| yes |")
        and rows["s3"].endswith("| **no** |")
    )
    assert "| 1.500 |" in rows["s2"]  # the shared PODS/GRPO step ratio is 0.3 / 0.2
    assert "Chosen (largest GRPO rise over median seed noise among passing settings): s2" in out
    assert (
        env.read_text()
        == 'LR=2e-05\nWARMUP_STEPS=100\nSETTING=s2\nSETTING_EXTRA="algo.prompts_per_step=16"\n'
    )

    assert "| s3 | none-n16-m16-s4001 |" in out and out.count("**yes** |") >= 2  # take-offs named per seed


def test_no_setting_passes_writes_no_env(tmp_path):
    env = tmp_path / "chosen.env"
    out = checks(pilot(tmp_path) / "s1", "--chosen-env", env).stdout  # a directory of runs is one setting
    assert "| s1 | 1e-05 | 0 | 3/1 |" in out
    assert "none passes" in out and not env.exists()


def test_runs_cut_short_are_named(tmp_path):
    root = tmp_path / "calls"
    for s in (1, 2):
        write_run(root / f"g{s}", "none-n16-m16", s, 2e-5, 100, gradual(0.1, s), 0.2)
    write_run(root / "g3", "none-n16-m16", 3, 2e-5, 100, gradual(0.1, 3)[:20], 0.2)  # stopped at 190 s
    out = checks(root).stdout
    assert "runs stopped before the window's end:** g3" in out
