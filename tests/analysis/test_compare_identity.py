"""pods.compare's rows are experiments: runs that differ in anything but the seed are told apart by their
defining config (run_info.json, else config.yaml), and merges, copies, a missing axis and NaN values are
refused or named, never silent."""

import json
import shutil
import tarfile
from pathlib import Path

import pandas as pd
import pytest
import yaml

from pods.analysis.groups import complete, differing, labels
from pods.compare import main
from pods.identity import default_config

REPO = Path(__file__).resolve().parents[2]
RISE = [0.2, 0.4, 0.6, 0.7, 0.8, 0.78]
FAST = [0.2, 0.5, 0.792, 0.8, 0.79, 0.79]
TOKEN = "max_variance-n4-m2 [loss.name=token]"


def flat(**changes) -> dict:
    """Today's default defining config with `changes` (dotted keys as `a__b`)."""
    return {**default_config(), **{k.replace("__", "."): v for k, v in changes.items()}}


def nest(d: dict) -> dict:
    out: dict = {}
    for key, v in d.items():
        *parents, leaf = key.split(".")
        node = out
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = v
    return out


def write_run(d: Path, name: str, variant: str, seed: int, accs, defining=None, config=None, records=None):
    """A pods run dir: run_info.json (with `defining`, as today's runs record it, unless None), config.yaml
    (`config`, nested) and one eval every 25 s of training clock."""
    d.mkdir(parents=True)
    info = {"name": name, "variant": variant, "seed": seed, "wandb_id": f"{d.name}-{seed}"}
    if defining is not None:
        info["defining"] = defining
    (d / "run_info.json").write_text(json.dumps(info))
    if config is not None:
        (d / "config.yaml").write_text(yaml.safe_dump(nest(config)))
    recs = records or [
        {"kind": "eval", "step": 10 * k, "train_time": 25.0 * k, "rollouts": 640 * k, "eval/accuracy": a}
        for k, a in enumerate(accs)
    ]
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    return d


def compare(tmp_path, *args) -> tuple[int, str, pd.DataFrame | None]:
    out = tmp_path / "out"
    shutil.rmtree(out, ignore_errors=True)
    code = main([*map(str, args), "--out", str(out), "--n-boot", "0"])
    md = (out / "summary.md").read_text() if code == 0 else ""
    return code, md, pd.read_csv(out / "summary.csv") if code == 0 else None


def loss_sweep(root: Path, seeds=(0, 1)) -> Path:
    for loss, accs in (("token", RISE), ("sequence", FAST)):
        for s in seeds:
            cfg = flat(selector__n=4, selector__m=2, loss__name=loss)
            write_run(root / f"{loss}{s}", f"x-{loss}-s{s}", "max_variance-n4-m2", s, accs, cfg)
    return root


def test_rows_that_differ_in_a_stage_are_labelled_by_it(tmp_path):
    code, md, table = compare(tmp_path, loss_sweep(tmp_path / "sweep"), "--baseline", TOKEN)
    assert code == 0
    assert dict(zip(table.variant, table.n_seeds)) == {TOKEN: 2, "max_variance-n4-m2 [loss.name=sequence]": 2}
    assert "- rows: runs of one variant with the same defining config, read from run_info.json's" in md


def test_old_runs_of_one_name_are_told_apart_by_their_config_yaml(tmp_path, capsys):
    """Runs of an older pods: the token and the sequence loss both named max_variance-n4-m2-s0, no defining
    config recorded; their config.yaml tells them apart (they were read as two seeds of one variant)."""
    for loss in ("token", "sequence"):
        cfg = flat(selector__n=4, selector__m=2, loss__name=loss)
        write_run(tmp_path / "old" / loss, "max_variance-n4-m2-s0", "max_variance-n4-m2", 0, RISE, config=cfg)
    code, md, table = compare(tmp_path, tmp_path / "old", "--baseline", TOKEN)
    assert code == 0
    assert sorted(table.variant) == ["max_variance-n4-m2 [loss.name=sequence]", TOKEN]
    assert set(table.n_seeds) == {1}
    assert "read from each run's config.yaml (2 run(s) record no defining config" in md


def test_two_learning_rates_are_two_rows_not_two_seeds(tmp_path):
    for s, lr in ((0, 1e-5), (1, 2e-5)):
        write_run(tmp_path / "lr" / str(s), f"pods-s{s}", "none-n16-m16", s, RISE, flat(optim__lr=lr))
    code, _, table = compare(tmp_path, tmp_path / "lr", "--baseline", "none-n16-m16 [optim.lr=1e-05]")
    assert code == 0
    assert sorted(table.variant) == ["none-n16-m16 [optim.lr=1e-05]", "none-n16-m16 [optim.lr=2e-05]"]
    # --pool reads them as one experiment, and says so
    code, md, table = compare(tmp_path, tmp_path / "lr", "--pool", "optim.lr")
    assert code == 0 and list(table.variant) == ["none-n16-m16"] and list(table.n_seeds) == [2]
    assert (
        "- pooled over optim.lr (--pool): runs that differ in it alone are seeds of one row; its values: 1e-05, "
        "2e-05" in md
    )


def test_rows_on_different_eval_sets_are_refused_unless_pooled(tmp_path, capsys):
    write_run(tmp_path / "e" / "g", "g-s0", "none-n16-m16", 0, RISE, flat(dataset__eval_size=200))
    write_run(tmp_path / "e" / "p", "p-s0", "max_variance-n64-m16", 0, FAST, flat(dataset__eval_size=100))
    code, _, _ = compare(tmp_path, tmp_path / "e", "--baseline", "none-n16-m16")
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert "on different eval sets: dataset.eval_size=200 (none-n16-m16); dataset.eval_size=100" in err
    assert "or pass --pool dataset.eval_size" in err
    pool = ["--pool", "dataset.eval_size"]
    code, md, _ = compare(tmp_path, tmp_path / "e", "--baseline", "none-n16-m16", *pool)
    assert code == 0 and "pooled over dataset.eval_size (--pool)" in md


def test_a_copied_run_dir_is_refused_unless_allowed(tmp_path, capsys):
    sweep = loss_sweep(tmp_path / "sweep", seeds=(0,))
    shutil.copytree(sweep / "token0", tmp_path / "copy" / "token0")
    code, _, _ = compare(tmp_path, sweep, tmp_path / "copy", "--baseline", TOKEN)
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert "are copies of one run (row 'max_variance-n4-m2 [loss.name=token]', seed 0)" in err
    assert "pass --allow-copies to keep both" in err
    code, md, table = compare(tmp_path, sweep, tmp_path / "copy", "--baseline", TOKEN, "--allow-copies")
    assert code == 0 and dict(zip(table.variant, table.n_seeds))[TOKEN] == 2
    assert "- warning: --allow-copies: runs x-token-s0 (" in md and "are copies of one run, both kept" in md


def test_one_seed_run_twice_is_refused(tmp_path, capsys):
    for k, accs in enumerate((RISE, FAST)):
        write_run(tmp_path / "twice" / str(k), "none-n16-m16-s0", "none-n16-m16", 0, accs, flat())
    code, _, _ = compare(tmp_path, tmp_path / "twice")
    assert code == 2 and "are one experiment's seed 0 twice" in capsys.readouterr().err


def test_an_eval_without_train_time_is_refused_not_read_by_step(tmp_path, capsys):
    """An eval appended by another script (no train_time) made the whole table 'vs step', unsaid."""
    sweep = loss_sweep(tmp_path / "sweep")
    with (sweep / "token1" / "metrics.jsonl").open("a") as f:
        f.write(json.dumps({"kind": "eval", "step": 60, "eval/accuracy": 0.7}) + "\n")
    code, _, _ = compare(tmp_path, sweep, "--baseline", TOKEN)
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert "1 eval record(s) have no train_time: runs 'x-token-s1' (1 of 7); pass --x step" in err
    code, md, _ = compare(tmp_path, sweep, "--baseline", TOKEN, "--x", "step")
    assert code == 0 and md.startswith("## Time to threshold: eval/accuracy vs step")


def test_nan_values_and_runs_without_evals_are_named(tmp_path):
    sweep = loss_sweep(tmp_path / "sweep")
    lines = (sweep / "token1" / "metrics.jsonl").read_text().splitlines()
    lines[2] = lines[2].replace('"eval/accuracy": 0.6', '"eval/accuracy": null')  # metrics.jsonl's NaN
    (sweep / "token1" / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    write_run(sweep / "noeval", "x-none-s5", "max_variance-n4-m2", 5, [], flat(), records=[{"kind": "train"}])
    code, md, _ = compare(tmp_path, sweep, "--baseline", TOKEN)
    assert code == 0
    assert (
        "- warning: run 'x-token-s1': 1 eval record(s) of eval/accuracy are NaN or null (train_time 50),"
        in md
    )
    assert f"- warning: run 'x-none-s5' ({sweep / 'noeval'}) left out: no eval of eval/accuracy" in md


def test_runs_without_a_config_are_grouped_by_name_and_said(tmp_path):
    for v, accs in (("none-n16-m16", RISE), ("max_variance-n64-m16", FAST)):
        d = write_run(tmp_path / "bare" / v, f"{v}-s0", v, 0, accs)
        (d / "run_info.json").unlink()
    code, md, table = compare(tmp_path, tmp_path / "bare", "--baseline", "none-n16-m16")
    assert code == 0 and sorted(table.variant) == ["max_variance-n64-m16", "none-n16-m16"]
    assert "- rows by name: 2 run(s) have no saved config (run_info.json, config.yaml)" in md


def test_a_wandb_export_is_grouped_by_name_and_said(tmp_path):
    csv = tmp_path / "export.csv"
    csv.write_text("eval/time,grpo-s1 - eval/accuracy,pods-s1 - eval/accuracy\n0,0.2,0.2\n60,0.5,0.7\n")
    code, md, _ = compare(tmp_path, csv, "--baseline", "grpo")
    assert code == 0
    assert f"- rows by name: {csv} is a W&B export, which holds no config: its runs are grouped by" in md


def test_labels_name_only_the_keys_rows_of_one_variant_differ_in():
    a, b, c = {"k": 1, "lr": 1}, {"k": 1, "lr": 2}, {"k": 3, "lr": 2}
    groups = {"ga": ("v", a), "gb": ("v", b), "gc": ("w", c), "gd": ("v", None)}
    assert labels(groups) == {"ga": "v [lr=1]", "gb": "v [lr=2]", "gc": "w", "gd": "v [no config]"}
    assert differing([a, b, c]) == ["k", "lr"] and differing([a]) == []


def test_a_field_an_older_config_lacks_is_at_its_default_and_pooled_keys_drop():
    defaults = {"optim.lr": 5e-6, "reward.weights.format": 0.1}
    fields = frozenset({"optim.lr"})  # reward.weights.* is a dict's entries: no default stands for them
    assert complete({"x": 1}, (), defaults, fields) == {"x": 1, "optim.lr": 5e-6}
    assert complete({"x": 1, "optim.lr": 1.0}, ("optim",), defaults, fields) == {"x": 1}


@pytest.mark.slow
def test_a_committed_archive_of_old_runs_reads_as_before(tmp_path):
    """headline_v4's confirm call A (runs of an older pods, config.yaml only): one row per variant of 4 seeds
    and the table its call printed (table.md), number for number."""
    call = REPO / "results/headline_v4/confirm_A"
    with tarfile.open(call / "confirm.tgz") as t:
        t.extractall(tmp_path, filter="data")
    out = tmp_path / "out"
    read = ["--rule", "paper", "--baseline", "none-n16-m16", "--x-min", "0", "--grid-step", "10", "--x-max"]
    assert main([str(tmp_path / "confirm"), *read, "360", "--out", str(out)]) == 0
    rows = lambda text: [x for x in text.splitlines() if x.startswith(("| none-n", "| max_var", "  - "))]  # noqa: E731
    then = (call / "table.md").read_text().split("\n\n| setting |")[0]
    assert rows((out / "summary.md").read_text()) == rows(then) and len(rows(then)) == 4
