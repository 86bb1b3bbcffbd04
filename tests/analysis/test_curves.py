"""Loading run dirs and W&B exports, and reading runs onto the grid."""

import json
from pathlib import Path

import numpy as np
import pytest

from pods.analysis.curves import (
    DEFAULT_NAME_PATTERN,
    CompareError,
    axis_for_column,
    build_curves,
    find_run_dirs,
    load_runs,
    load_wandb_csv,
    make_grid,
    parse_run_name,
    sample_run,
    summarize,
)
from pods.analysis.load import load_file
from tests.analysis import saved_config

BASE = [0.2, 0.4, 0.6, 0.7, 0.8, 0.78]  # peak 0.8 at t=100
FAST = [0.2, 0.5, 0.792, 0.8, 0.79, 0.79]  # 0.99 * 0.8 at t=50, 0.8 at t=75


def write_run(
    d: Path, variant: str, seed: int, accs: list[float], dt: float = 25.0, info: bool = True
) -> Path:
    """A pods run dir: train and eval lines interleaved, evals every `dt` seconds."""
    d.mkdir(parents=True)
    (d / "config.yaml").write_text(saved_config(variant))
    if info:
        meta = dict(name=f"{variant}-s{seed}", variant=variant, seed=seed, group="test")
        (d / "run_info.json").write_text(json.dumps(meta))
    lines = []
    for k, acc in enumerate(accs):
        common = {"step": 10 * k, "train_time": dt * k, "rollouts": 640 * k, "wall_time": 2 * dt * k}
        lines.append({"kind": "train", **common, "timing/step": 1.0, "reward/mean": 0.5})
        lines.append({"kind": "eval", **common, "eval/accuracy": acc, "eval/n": 100})
    (d / "metrics.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    return d


def test_parse_run_name():
    assert parse_run_name("max_variance-n64-m16-s3") == ("max_variance-n64-m16", "3")
    assert parse_run_name("grpo_baseline") == ("grpo_baseline", "0")  # its own variant
    assert parse_run_name("seed7_pods", r"seed(?P<seed>\d+)_") == ("pods", "7")


@pytest.mark.parametrize(
    "name,variant,seed",
    [
        ("GRPO-s25-p8-n128-m32-ga4", "GRPO-p8-n128-m32-ga4", "25"),  # the seed in the middle
        ("seed7_pods-n64", "pods-n64", "7"),  # at the start
        ("pods_seed3", "pods", "3"),
        ("grpo-seed-2-n16", "grpo-n16", "2"),
        ("PODS S04 8xH100", "PODS 8xH100", "4"),  # spaces, upper case, leading zero
        ("dynamic_sampling-n16-m16", "dynamic_sampling-n16-m16", "0"),  # "_sampling" is no seed
        ("grpo-steps100-s1", "grpo-steps100", "1"),
    ],
)
def test_parse_run_name_finds_the_seed_anywhere(name, variant, seed):
    assert parse_run_name(name) == (variant, seed)


def test_parse_run_name_refuses_two_seeds_and_takes_a_variant_group():
    with pytest.raises(CompareError, match="2 seed tokens"):
        parse_run_name("grpo-s1-s2")
    assert parse_run_name("x1-grpo", r"x(?P<seed>\d+)-(?P<variant>.+)") == ("grpo", "1")


def test_load_runs_finds_nested_runs_and_skips_train_lines(tmp_path):
    write_run(tmp_path / "sweep" / "0", "none-n16-m16", 1, BASE)
    write_run(tmp_path / "sweep" / "a" / "b" / "c", "none-n16-m16", 2, BASE)
    write_run(tmp_path / "sweep" / "a" / "b" / "c" / "d", "too-deep", 1, BASE)  # inside a run
    write_run(tmp_path / "other", "max_variance-n64-m16", 1, FAST)
    assert len(find_run_dirs(tmp_path / "sweep")) == 2
    df = load_runs([tmp_path / "sweep", tmp_path / "other"])
    assert sorted(df.run.unique()) == [
        "max_variance-n64-m16-s1",
        "none-n16-m16-s1",
        "none-n16-m16-s2",
    ]
    assert list(df.columns) == ["run", "variant", "seed", "train_time", "step", "rollouts", "value"]
    assert len(df) == 18  # 3 runs x 6 evals, no train lines
    fast = df[df.variant == "max_variance-n64-m16"]
    assert fast.value.tolist() == FAST and fast.rollouts.tolist() == [640.0 * k for k in range(6)]
    assert df.attrs["metric"] == "eval/accuracy"


def test_load_runs_without_run_info_torn_line_and_resume(tmp_path):
    d = write_run(tmp_path / "pods-s4", "x", 0, [0.1, 0.2], info=False)
    with (d / "metrics.jsonl").open("a") as f:  # a resumed run re-logs step 10, then dies
        f.write(
            json.dumps(
                {
                    "kind": "eval",
                    "step": 10,
                    "train_time": 25.0,
                    "rollouts": 640,
                    "wall_time": 0,
                    "eval/accuracy": 0.3,
                }
            )
            + "\n"
        )
        f.write('{"kind": "eval", "step": 20, "train_ti')
    df = load_runs(tmp_path / "pods-s4")
    assert (df.variant.iat[0], df.seed.iat[0]) == ("pods", "4")
    c = build_curves(df)["pods"]
    np.testing.assert_array_equal(c.values, [[0.1, 0.3]])  # the later eval wins


def test_load_runs_errors(tmp_path):
    with pytest.raises(CompareError, match="no run dir"):
        load_runs(tmp_path)
    write_run(tmp_path / "r", "v", 1, BASE)
    with pytest.raises(CompareError, match="'eval/pass_at_5'; choose --metric from: eval/accuracy, eval/n"):
        load_runs(tmp_path, metric="eval/pass_at_5")


def test_make_grid():
    np.testing.assert_array_equal(make_grid(np.array([50.0, 0, 25, 50])), [0, 25, 50])
    np.testing.assert_array_equal(make_grid(np.array([1.5, 77.0]), 25.0), [0, 25, 50, 75])


def test_sample_run_three_time_reads():
    # asynchronous evals around a 25 s checkpoint grid
    x, y, grid = np.array([1.5, 26, 49, 77]), np.array([0.1, 0.2, 0.3, 0.4]), make_grid(77.0, 25)
    interp = [0.1, 0.1 + 0.1 * 23.5 / 24.5, 0.3 + 0.1 / 28, 0.3 + 0.1 * 26 / 28]
    # the authors' read (no max gap): every checkpoint reads an eval, however far
    np.testing.assert_allclose(sample_run(x, y, grid, "nearest"), [0.1, 0.2, 0.3, 0.4])
    np.testing.assert_allclose(sample_run(x, y, grid, "at-or-before"), [np.nan, 0.1, 0.3, 0.3])
    np.testing.assert_allclose(sample_run(x, y, grid, "interpolate"), interp)
    # max gap 12.5: at-or-before loses t=25 (its eval is 23.5 back) and t=75 (26 back)
    np.testing.assert_allclose(sample_run(x, y, grid, "nearest", 12.5), [0.1, 0.2, 0.3, 0.4])
    np.testing.assert_allclose(sample_run(x, y, grid, "at-or-before", 12.5), [np.nan, np.nan, 0.3, np.nan])
    np.testing.assert_allclose(sample_run(x, y, grid, "interpolate", 12.5), interp)


def test_sample_run_nearest_ties_and_max_gap():
    grid = np.array([0.0, 10, 20, 30, 40])
    x, y = np.array([10.0, 30]), np.array([0.5, 0.7])
    # no max gap: t=20 is 10 from both evals, the earlier one wins; t=0 and t=40 read the end evals
    np.testing.assert_allclose(sample_run(x, y, grid, "nearest"), [0.5, 0.5, 0.5, 0.7, 0.7])
    # max gap 5: t=20 (10 from any eval) and t=0, 40 get no value
    np.testing.assert_allclose(sample_run(x, y, grid, "nearest", 5.0), [np.nan, 0.5, np.nan, 0.7, np.nan])
    np.testing.assert_allclose(sample_run(x, y, grid, "nearest", 10.0), [0.5, 0.5, 0.5, 0.7, 0.7])
    # exactly half-way between two evals, at distance == max gap: counts, earlier eval wins
    x2, y2 = np.array([9.0, 11.0]), np.array([0.1, 0.9])
    np.testing.assert_allclose(sample_run(x2, y2, np.array([10.0]), "nearest", 1.0), [0.1])
    # a tie on an inexact grid (0.1 + 0.2 != 0.3) still goes to the earlier eval
    x3, y3 = np.array([0.2, 0.4]), np.array([0.1, 0.9])
    np.testing.assert_allclose(sample_run(x3, y3, make_grid(x3, 0.1), "nearest"), [0.1, 0.1, 0.1, 0.1, 0.9])
    # a far eval still counts without a max gap (a run that stopped early keeps its last eval)
    np.testing.assert_allclose(sample_run(x, y, np.array([500.0]), "nearest"), [0.7])


def test_build_curves_shorter_run_keeps_its_last_eval(tmp_path):
    write_run(tmp_path / "a", "v", 1, [0.1, 0.2, 0.3])
    write_run(tmp_path / "b", "v", 2, [0.3, 0.4])  # evals at 0 and 25 only
    c = build_curves(load_runs(tmp_path))["v"]
    np.testing.assert_array_equal(c.grid, [0, 25, 50])
    np.testing.assert_allclose(c.values.mean(axis=0), [0.2, 0.3, 0.35])  # b's 0.4 read at t=50
    assert c.peaks.tolist() == [0.3, 0.4] and c.finals.tolist() == [0.3, 0.4]
    # with a max gap the mean curve ends with the shorter run
    cut = build_curves(load_runs(tmp_path), grid_step=25, max_gap=12.5)["v"]
    np.testing.assert_allclose(cut.values.mean(axis=0), [0.2, 0.3, np.nan])


def test_start_is_plotted_but_never_scored(tmp_path):
    # the baseline's best value is at T = 0 (training made it worse); the authors' rule
    # takes the peak over T > 0 and never reports a time of 0
    for s in (1, 2):
        write_run(tmp_path / f"b{s}", "none", s, [0.9, 0.5, 0.6, 0.7])
        write_run(tmp_path / f"p{s}", "pods", s, [0.9, 0.7, 0.6, 0.6])
    summary = summarize(load_runs(tmp_path), n_boot=0)
    assert summary.threshold == pytest.approx(0.99 * 0.7)
    assert [r["time"] for r in summary.rows] == [75.0, 25.0]
    assert summary.rows[1]["speedup"] == 3.0
    assert summary.rows[0]["peak_mean"] == pytest.approx(0.7)
    assert summary.curves["none"].values[0, 0] == 0.9  # the plots keep the start


def test_summarize_runs_paper_vs_strict(tmp_path):
    for s in (1, 2):
        write_run(tmp_path / f"b{s}", "none-n16-m16", s, BASE)
        write_run(tmp_path / f"f{s}", "max_variance-n64-m16", s, FAST)
    df = load_runs(tmp_path)
    paper = summarize(df, n_boot=100)
    assert paper.baseline == "none-n16-m16" and paper.x == "train_time"
    assert paper.rows[1]["speedup"] == 2.0
    assert summarize(df, rule="strict", n_boot=0).rows[1]["speedup"] == pytest.approx(100 / 75)
    by_step = summarize(df, x="step", n_boot=0)
    assert (by_step.rows[0]["time"], by_step.rows[1]["time"]) == (40.0, 20.0)
    with pytest.raises(CompareError, match="train_time"):
        summarize(df, x="tokens")


def write_wandb_csv(path: Path) -> Path:
    """W&B panel export: runs on different rows, __MIN/__MAX companions, empty cells."""
    m = "eval/accuracy"
    head = ["eval/time"]
    for run in ("grpo-s1", "grpo-s2", "pods-n64-s1"):
        head += [f"{run} - {m}", f"{run} - {m}__MIN", f"{run} - {m}__MAX"]
    rows = [  # time, then (value, min, max) per run; "" = no point
        [0, 0.2, 0.2, 0.2, 0.2, 0.2, 0.2, 0.2, 0.2, 0.2],
        [50, 0.6, 0.5, 0.7, "", "", "", 0.792, 0.7, 0.8],
        [60, "", "", "", 0.6, 0.6, 0.6, "", "", ""],
        [100, 0.8, 0.8, 0.8, 0.8, 0.8, 0.8, 0.8, 0.8, 0.8],
    ]
    path.write_text("\n".join(",".join(map(str, r)) for r in [head, *rows]) + "\n")
    return path


def test_load_wandb_csv(tmp_path):
    df = load_wandb_csv(write_wandb_csv(tmp_path / "export.csv"))
    assert df.attrs["metric"] == "eval/accuracy" and df.attrs["x_labels"] == {"train_time": "eval/time"}
    assert df.attrs["grouping"][0].endswith("export.csv is a W&B export, which holds no config: its runs are "
                                            "grouped by the variant their name gives")  # fmt: skip
    assert list(df.columns) == ["run", "variant", "seed", "train_time", "value"]
    s2 = df[df.run == "grpo-s2"]
    assert s2.train_time.tolist() == [0, 60, 100] and s2.value.tolist() == [0.2, 0.6, 0.8]
    assert sorted(df.variant.unique()) == ["grpo", "pods-n64"]
    with pytest.raises(CompareError, match="no run has a saved config.yaml"):  # a CSV names no stages
        summarize(df, n_boot=0)
    summary = summarize(df, n_boot=0, baseline="grpo")
    # grid = union {0, 50, 60, 100}; grpo-s2 reads its nearest eval at t=50 (t=60, 0.6):
    # the mean curve (0.6 at t=50) never reaches 0.792 before t=100, pods reaches it at t=50
    assert (summary.rows[0]["time"], summary.rows[1]["time"]) == (100.0, 50.0)
    assert summary.x_label == "eval/time"


def test_load_wandb_csv_metric_and_x_col(tmp_path):
    path = tmp_path / "two.csv"
    path.write_text("Step,a-s1 - acc,a-s1 - loss,b - acc\n1,0.5,2.0,0.4\n2,0.6,1.0,\n")
    with pytest.raises(ValueError, match="acc.*loss"):
        load_wandb_csv(path)
    df = load_wandb_csv(path, metric="acc", x_col="Step")
    assert df.attrs["x_labels"] == {"step": "Step"}
    assert df.groupby("variant").value.count().to_dict() == {"a": 2, "b": 1}
    assert axis_for_column("train/global_step") == "step"
    assert axis_for_column("rollouts") == "rollouts" and axis_for_column("eval/time") == "train_time"


def test_load_long_table_csv_jsonl_and_json(tmp_path):
    # run, x, value; a metric column with two metrics; variant + seed instead of run
    (tmp_path / "long.csv").write_text(
        "run,x,metric,value\ngrpo-s1,0,acc,0.2\ngrpo-s1,60,acc,0.5\ngrpo-s1,60,loss,3\npods-s1,0,acc,0.3\n"
    )
    with pytest.raises(CompareError, match="choose --metric from: acc, loss"):
        load_file(tmp_path / "long.csv", None, None, DEFAULT_NAME_PATTERN)
    df = load_file(tmp_path / "long.csv", "acc", None, DEFAULT_NAME_PATTERN)
    assert df.attrs["metric"] == "acc" and df.attrs["x_labels"] == {"train_time": "x"}
    assert "long.csv is a long table, which holds no config" in df.attrs["grouping"][0]
    assert df[["run", "variant", "seed", "train_time", "value"]].values.tolist() == [
        ["grpo-s1", "grpo", "1", 0.0, 0.2],
        ["grpo-s1", "grpo", "1", 60.0, 0.5],
        ["pods-s1", "pods", "1", 0.0, 0.3],
    ]
    lines = [{"variant": "pods", "seed": 2, "step": 10 * k, "value": v} for k, v in enumerate([0.1, 0.4])]
    (tmp_path / "long.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    df = load_file(tmp_path / "long.jsonl", None, None, DEFAULT_NAME_PATTERN)
    assert df.run.unique().tolist() == ["pods-s2"] and df.step.tolist() == [0.0, 10.0]
    (tmp_path / "long.json").write_text(json.dumps(lines))
    assert load_file(tmp_path / "long.json", None, None, DEFAULT_NAME_PATTERN).value.tolist() == [0.1, 0.4]


def test_readme_conversion_of_per_checkpoint_json(tmp_path, monkeypatch):
    # one JSON file per run, one entry per checkpoint, as the README's snippet expects
    evals = tmp_path / "evals"
    evals.mkdir()
    for run, accs in {"grpo-s1": [0.2, 0.6], "pods-s1": [0.2, 0.7]}.items():
        entries = [{"checkpoint": f"step_{k}", "time_s": 120 * k, "accuracy": a} for k, a in enumerate(accs)]
        (evals / f"{run}.json").write_text(json.dumps(entries))
    monkeypatch.chdir(tmp_path)
    # -- the README's conversion --
    with open("evals.jsonl", "w") as f:
        for path in sorted(Path("evals").glob("*.json")):  # evals/GRPO-s1.json, evals/PODS-s1.json, ...
            for entry in json.loads(path.read_text()):
                row = {"run": path.stem, "x": entry["time_s"], "value": entry["accuracy"]}
                f.write(json.dumps(row) + "\n")
    # --
    df = load_file(tmp_path / "evals.jsonl", None, None, DEFAULT_NAME_PATTERN)
    assert sorted(df.variant.unique()) == ["grpo", "pods"] and len(df) == 4
