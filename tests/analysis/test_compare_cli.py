"""`python -m pods.compare` end to end on synthetic sweeps and W&B exports."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from pods.compare import main
from tests.analysis import saved_config

REPO = Path(__file__).resolve().parents[2]
BASE = [0.2, 0.4, 0.6, 0.7, 0.8, 0.78]  # peak 0.8 on the t=100 checkpoint
FAST = [0.2, 0.5, 0.792, 0.8, 0.79, 0.79]  # 0.99 * 0.8 on t=50, 0.8 on t=75


def write_run(d: Path, variant: str, seed: int, accs: list[float], lag: float = 0.0) -> None:
    """A pods run dir; evals land `lag` seconds after each 25 s checkpoint."""
    d.mkdir(parents=True)
    (d / "config.yaml").write_text(saved_config(variant))
    meta = dict(name=f"{variant}-s{seed}", variant=variant, seed=seed, group="cli")
    (d / "run_info.json").write_text(json.dumps(meta))
    with (d / "metrics.jsonl").open("w") as f:
        for k, acc in enumerate(accs):
            t = 25.0 * k + (lag if k else 0.0)
            common = {"step": 10 * k, "train_time": t, "rollouts": 640 * k, "wall_time": 2 * t}
            f.write(json.dumps({"kind": "train", **common, "reward/mean": 0.5}) + "\n")
            f.write(json.dumps({"kind": "eval", **common, "eval/accuracy": acc}) + "\n")


def write_sweep(root: Path, lag_base: float = 0.0, lag_fast: float = 0.0) -> Path:
    for s in (1, 2):
        write_run(root / "multirun" / f"{s}", "none-n16-m16", s, BASE, lag_base)
        write_run(root / "multirun" / f"{s + 2}", "max_variance-n64-m16", s, FAST, lag_fast)
    return root / "multirun"


def speedups(out: Path) -> dict[str, float]:
    table = pd.read_csv(out / "summary.csv")
    return dict(zip(table.variant, table.speedup))


def test_cli_subprocess_end_to_end(tmp_path):
    sweep = write_sweep(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-m", "pods.compare", str(sweep), "--n-boot", "200"]
    res = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "| max_variance-n64-m16 | 2 |" in res.stdout
    assert "2.00x [2.00, 2.00]" in res.stdout and "rule: paper" in res.stdout
    (out,) = tmp_path.glob("compare-*")  # the default --out: a new folder under the cwd
    for name in (
        "summary.md",
        "summary.csv",
        "accuracy_vs_time.png",
        "accuracy_vs_step.png",
        "accuracy_vs_rollouts.png",
    ):
        assert (out / name).stat().st_size > 0, name
    table = pd.read_csv(out / "summary.csv")
    assert table.rule.unique().tolist() == ["paper"]
    assert table.threshold.iat[0] == pytest.approx(0.792)
    assert table.time.tolist() == [100.0, 50.0] and table.speedup.tolist() == [1.0, 2.0]
    assert table.p_perm.iat[1] == pytest.approx(1 / 6)
    assert table.seed_times.tolist() == ["100;100", "50;50"]
    assert "permutation" in table.tests.iat[0]


def test_cli_rules_move_the_headline(tmp_path, capsys):
    sweep = write_sweep(tmp_path)
    for args, expected in [
        ([], 2.0),
        (["--rule", "strict"], 100 / 75),
        (["--threshold", "1.0"], 100 / 75),
        (["--time-read", "interpolate"], 98 / 50),
        (["--reference", "per-seed"], 2.0),
    ]:
        out = tmp_path / "out" / "-".join(args or ["paper"])
        assert main([str(sweep), "--out", str(out), "--n-boot", "0", *args]) == 0
        assert speedups(out)["max_variance-n64-m16"] == pytest.approx(expected), args
    assert "rule: paper+threshold=1.0" in capsys.readouterr().out


def test_cli_async_evals_nearest_vs_at_or_before(tmp_path):
    # evals land 2 s (baseline) and 1 s (variant) after their checkpoint, like the
    # H100 runs: the paper's nearest read says 2.0x, at-or-before says less
    sweep = write_sweep(tmp_path, lag_base=2.0, lag_fast=1.0)
    common = [str(sweep), "--n-boot", "0", "--grid-step", "25"]
    cases = [([], 2.0), (["--time-read", "at-or-before"], 125 / 75), (["--rule", "strict"], 1.25)]
    for args, expected in cases:
        out = tmp_path / "-".join(args or ["paper"])
        main([*common, "--out", str(out), *args])
        assert speedups(out)["max_variance-n64-m16"] == pytest.approx(expected), args


def test_cli_never_reached_single_seed_and_baseline_choice(tmp_path, capsys):
    write_run(tmp_path / "sweep" / "0", "grpo", 1, BASE)
    write_run(tmp_path / "sweep" / "1", "max_reward", 1, [0.1, 0.2, 0.3, 0.3, 0.3, 0.3])
    out = tmp_path / "out"
    assert main([str(tmp_path / "sweep"), "--out", str(out), "--n-boot", "50"]) == 0
    stdout = capsys.readouterr().out
    assert "| max_reward | 1 |" in stdout and "| not reached | 0/1 | not reached |" in stdout
    table = pd.read_csv(out / "summary.csv")
    assert table.baseline.iat[0] == "grpo" and table.variant.tolist() == ["grpo", "max_reward"]
    assert table.speedup_note.iat[1] == "not reached" and pd.isna(table.speedup.iat[1])
    assert pd.isna(table.peak_std.iat[0])  # one seed: no spread
    # per-seed reference: a baseline seed that never reaches leaves no baseline time
    write_run(tmp_path / "sweep" / "2", "grpo", 2, [0.1, 0.2, 0.3, 0.3, 0.3, 0.25])
    main([str(tmp_path / "sweep"), "--out", str(out), "--n-boot", "0", "--reference", "per-seed"])
    table = pd.read_csv(out / "summary.csv")
    assert table.threshold.iat[0] == pytest.approx(0.99 * (0.8 + 0.3) / 2)
    assert table.seeds_reached.tolist() == [1, 0]
    assert table.speedup_note.tolist() == ["baseline not reached"] * 2
    assert "baseline not reached" in capsys.readouterr().out


def test_cli_wandb_csv(tmp_path):
    m = "eval/accuracy"
    cols = ["eval/time"] + [f"{r} - {m}{s}" for r in ("GRPO-s1", "PODS-s1") for s in ("", "__MIN", "__MAX")]
    rows = [
        [0, 0.2, 0.2, 0.2, 0.2, 0.2, 0.2],
        [50, "", "", "", 0.8, 0.8, 0.8],
        [100, 0.8, 0.7, 0.9, 0.8, 0.8, 0.8],
    ]
    csv = tmp_path / "export.csv"
    csv.write_text("\n".join(",".join(map(str, r)) for r in [cols, *rows]) + "\n")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cmd = [
        sys.executable,
        "-m",
        "pods.compare",
        str(csv),
        "--n-boot",
        "100",
        "--rule",
        "strict",
        "--baseline",
        "GRPO",
    ]
    res = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    (out,) = tmp_path.glob("compare-*")
    assert speedups(out) == {"GRPO": 1.0, "PODS": 2.0}
    assert (out / "accuracy_vs_time.png").exists() and not (out / "accuracy_vs_step.png").exists()
    assert "rule: strict" in (out / "summary.md").read_text()
    assert "time to threshold (eval/time)" in res.stdout


def test_cli_mixes_run_dirs_and_csv(tmp_path):
    write_run(tmp_path / "runs" / "0", "grpo", 1, BASE)
    csv = tmp_path / "pods.csv"
    csv.write_text("eval/time,pods-s1 - eval/accuracy\n0,0.2\n25,0.5\n50,0.8\n")
    out = tmp_path / "out"
    main([str(tmp_path / "runs"), str(csv), "--out", str(out), "--n-boot", "0"])
    assert speedups(out) == {"grpo": 1.0, "pods": 2.0}
    assert sorted(p.name for p in out.glob("*.png")) == ["accuracy_vs_time.png"]  # CSV has no step


def write_csv(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


EXPORT = "eval/time,a-s1 - _step,a-s1 - acc,a-s1 - acc__MIN,b-s1 - _step,b-s1 - acc\n0,0,0.1,0.1,0,0.2\n60,1,0.5,0.5,1,0.6\n"
BAD_INPUTS = [  # (name, files to write, extra args, what the one line must say)
    ("missing file", {}, ["nope.csv"], "nope.csv: no such file or directory"),
    ("empty file", {"e.csv": ""}, ["e.csv"], "e.csv is empty"),
    ("header only", {"h.csv": "eval/time,a-s1 - acc\n"}, ["h.csv"], "has a header but no rows"),
    ("unknown metric", {"x.csv": EXPORT}, ["x.csv", "--metric", "loss"], "choose --metric from: _step, acc"),
    (
        "two metrics",
        {"x.csv": EXPORT.replace("b-s1 - _step", "b-s1 - loss")},
        ["x.csv"],
        "choose --metric from: acc, loss",
    ),
    ("only _step", {"s.csv": "Step,a-s1 - _step\n0,0\n"}, ["s.csv"], "no metric to compare (only _step)"),
    ("unknown baseline", {"x.csv": EXPORT}, ["x.csv", "--baseline", "c"], "choose --baseline from: a, b"),
    ("no baseline named", {"x.csv": EXPORT}, ["x.csv"], "which variant is the baseline?"),
    (
        "bad x column",
        {"x.csv": EXPORT},
        ["x.csv", "--x-col", "t", "--baseline", "a"],
        "choose --x-col from: eval/time",
    ),
    ("no runs", {"n.csv": "t,u\n0,1\n"}, ["n.csv"], "no '<run> - <metric>' columns"),
    (
        "empty window",
        {"x.csv": EXPORT},
        ["x.csv", "--baseline", "a", "--x-min", "100"],
        "no checkpoint in the window [100, inf]",
    ),
    (
        "reversed window",
        {"x.csv": EXPORT},
        ["x.csv", "--baseline", "a", "--x-min", "9", "--x-max", "1"],
        "--x-min 9 is after --x-max 1",
    ),
    ("nan window", {"x.csv": EXPORT}, ["x.csv", "--baseline", "a", "--x-max", "nan"], "not nan"),
    (
        "zero grid step",
        {"x.csv": EXPORT},
        ["x.csv", "--baseline", "a", "--grid-step", "0"],
        "give a positive number of units of the x column 'eval/time'",
    ),
    (
        "grid step in minutes",
        {"x.csv": EXPORT},
        ["x.csv", "--baseline", "a", "--grid-step", "2"],
        "--grid-step 2 is in units of the x column 'eval/time', but evals are about 60 apart",
    ),
    ("unknown time read", {"x.csv": EXPORT}, ["x.csv", "--time-read", "grid"], "invalid choice: 'grid'"),
    (
        "bad name pattern",
        {"x.csv": EXPORT},
        ["x.csv", "--name-pattern", "run(\\d+)"],
        "needs a (?P<seed>...) group",
    ),
    (
        "two seeds in a name",
        {"d.csv": "t,a-s1-s2 - acc\n0,1\n"},
        ["d.csv"],
        "has 2 seed tokens ('-s1', '-s2')",
    ),
    (
        "not a table",
        {"j.json": '{"step_10": 0.5}'},
        ["j.json"],
        "convert it to a long table with run, x, value",
    ),
    (
        "unknown file kind",
        {"r.txt": "hi"},
        ["r.txt"],
        "expected a run dir, a sweep dir, a .csv, .jsonl or .json file",
    ),
    ("dir without runs", {"sub/a.txt": "x"}, ["sub"], "no run dir (with metrics.jsonl) in"),
    (
        "run dir metric",
        {},
        ["sweep", "--metric", "eval/pass"],
        "logged 'eval/pass'; choose --metric from: eval/accuracy",
    ),
]


@pytest.mark.parametrize("name,files,args,message", BAD_INPUTS, ids=[b[0] for b in BAD_INPUTS])
def test_cli_refuses_bad_inputs_in_one_line(tmp_path, monkeypatch, capsys, name, files, args, message):
    monkeypatch.chdir(tmp_path)
    write_sweep(tmp_path / "sweep")
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        write_csv(tmp_path / rel, text)
    assert main([*args, "--n-boot", "0"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("python -m pods.compare: error: "), err
    assert message in err, err
    assert not list(tmp_path.glob("compare-*"))  # nothing written


def test_cli_refusal_has_no_traceback(tmp_path):
    csv = write_csv(tmp_path / "x.csv", EXPORT)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-m", "pods.compare", str(csv), "--n-boot", "0"]
    res = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert res.stderr.strip() == (
        "python -m pods.compare: error: which variant is the baseline? no run has a saved config.yaml to tell "
        "it by; choose --baseline from: a, b"
    )
    assert (
        "--grid-step"
        in subprocess.run(
            [sys.executable, "-m", "pods.compare", "--help"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
        ).stdout
    )


def test_cli_one_seed_warning_and_variant_runs(tmp_path, capsys):
    csv = write_csv(tmp_path / "x.csv", EXPORT.replace("a-s1", "grpo-s1").replace("b-s1", "pods_seed3"))
    assert main([str(csv), "--out", str(tmp_path / "o"), "--n-boot", "0", "--baseline", "grpo"]) == 0
    out = capsys.readouterr().out
    assert "- runs (variant <- runs):\n  - grpo <- grpo-s1 (1 seed)\n  - pods <- pods_seed3 (1 seed)" in out
    assert "- warning: variant 'grpo' has one seed (run 'grpo-s1')" in out
    table = pd.read_csv(tmp_path / "o" / "summary.csv")
    assert table.warnings.iat[0].count("has one seed") == 2
    assert table.grid.iat[0].startswith("the union of every eval's x (no --grid-step)")


def test_help_states_the_grid_step_unit(capsys):
    assert main(["--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "--grid-step GRID_STEP checkpoint spacing, in the unit of the x column: seconds" in text


NEW_LAYOUT = """selector: {{name: {sel}, n: {n}, m: {m}}}
prefilter: {{name: {pre}}}
dynamic_sampling: {{enabled: {ds}}}
"""
OLD_LAYOUT = """selector: {{name: {name}, n: {n}, m: {m}, downsample: {sel}, prefilter: {pre}, dynamic_sampling: {ds}}}
"""


def write_configured_sweep(root: Path, configs: dict[str, str]) -> Path:
    """Runs whose baseline only their config.yaml can tell (the names say nothing)."""
    for k, (variant, text) in enumerate(configs.items()):
        for s in (1, 2):
            d = root / f"{variant}-{s}"
            write_run(d, variant, s, BASE if k == 0 else FAST)
            (d / "config.yaml").write_text(text)
    return root


def test_cli_finds_the_baseline_in_the_saved_configs(tmp_path, capsys):
    configs = {  # listed first, the slower one: the baseline
        "arm_a": NEW_LAYOUT.format(sel="none", n=16, m=16, pre="none", ds="false"),
        "arm_b": NEW_LAYOUT.format(sel="max_variance", n=64, m=16, pre="none", ds="false"),
        "arm_c": NEW_LAYOUT.format(sel="none", n=16, m=16, pre="greso", ds="true"),
    }
    sweep = write_configured_sweep(tmp_path / "new", configs)
    assert main([str(sweep), "--out", str(tmp_path / "o"), "--n-boot", "0"]) == 0
    table = pd.read_csv(tmp_path / "o" / "summary.csv")
    assert table.baseline.iat[0] == "arm_a" and table.variant.iat[0] == "arm_a"


def test_cli_reads_the_old_layout_and_refuses_two_baselines(tmp_path, capsys):
    """Runs saved before the stage groups (selector.downsample / prefilter / dynamic_sampling): GRPO 16/16
    and GRPO 64/64 are both plain GRPO, so compare refuses and lists the variants; --baseline decides."""
    configs = {
        "none-n16-m16": OLD_LAYOUT.format(name="none", sel="none", n=16, m=16, pre="none", ds="false"),
        "max_variance-n64-m16": OLD_LAYOUT.format(
            name="max_variance", sel="max_variance", n=64, m=16, pre="none", ds="false"
        ),
        "none-n64-m64": OLD_LAYOUT.format(name="none", sel="none", n=64, m=64, pre="none", ds="false"),
        "greso-n16-m16": OLD_LAYOUT.format(name="greso", sel="none", n=16, m=16, pre="greso", ds="true"),
    }
    sweep = write_configured_sweep(tmp_path / "old", configs)
    assert main([str(sweep), "--out", str(tmp_path / "o"), "--n-boot", "0"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "several are plain GRPO (no prefilter, no dynamic sampling, no down-sampling, n == m): " in err
    assert "none-n16-m16, none-n64-m64; choose --baseline from: " in err
    assert (
        main([str(sweep), "--out", str(tmp_path / "o"), "--n-boot", "0", "--baseline", "none-n16-m16"]) == 0
    )
    assert pd.read_csv(tmp_path / "o" / "summary.csv").baseline.iat[0] == "none-n16-m16"


def test_committed_old_runs_are_told_by_their_configs():
    """results/ holds runs saved by the old layouts; their configs still say which is plain GRPO."""
    import yaml

    from pods.analysis.load import is_plain_grpo

    runs = REPO / "results"
    expect = {"none-n16-m16": True, "max_variance-n64-m16": False, "random-n64-m16": False,
              "max_reward-n64-m16": False, "dynamic_sampling-n16-m16": False, "greso-n16-m16": False,
              "greso_max_variance-n64-m16": False}  # fmt: skip
    seen = set()
    for path in [
        *runs.glob("cpu_rule_ablation/runs/*/config.yaml"),
        *runs.glob("cpu_greso/runs/*/config.yaml"),
    ]:
        variant = path.parent.name.rsplit("-s", 1)[0]
        assert is_plain_grpo(yaml.safe_load(path.read_text())) is expect[variant], path
        seen.add(variant)
    assert seen == set(expect)
