"""A constructed W&B export of the paper's kind, read the paper's way, answers by hand.

Checkpoints every 120 s (2 min); evals land off the checkpoints, at times that differ
per variant; the budget is 600 s; the runs go on past it. Each variant has two seeds,
s2 = s1 + 0.02 at every eval after t=0, so every mean curve is s1 + 0.01 there.
Run names carry the seed in the middle (GRPO-s1-p8-...), and the export has W&B's
`_step` columns, __MIN/__MAX companions and empty cells.

Mean of the two seeds at each eval (time in s: mean):
  GRPO: 0: .20, 110: .40, 245: .55, 350: .70, 475: .81, 530: .75, 590: .80, 720: .90
  PODS: 0: .20, 125: .60, 238: .81, 290: .70, 365: .82, 470: .83, 605: .83

Nearest read (the paper's), window [0, 600], checkpoints 0 120 240 360 480 600:
  GRPO: .20 (0)  .40 (110)  .55 (245)  .70 (350)  .81 (475, not 530)  .80 (590)
  PODS: .20 (0)  .60 (125)  .81 (238, not 290)  .82 (365)  .83 (470)  .83 (605: past
        the budget by 5 s, but the nearest eval to the 600 s checkpoint)
  threshold = 0.99 * .81 = .8019; GRPO reaches it at 480, PODS at 240: 2.00x.
The old read (snap each eval to its nearest checkpoint, keep the last one there)
took 530 (.75) for GRPO at 480 and 290 (.70) for PODS at 240: GRPO peak .80,
threshold .792, GRPO at 600, PODS at 360: 1.67x.
Without the budget the grid runs to 720: GRPO's peak is .90 (720), threshold .891,
GRPO at 720; PODS's nearest eval to 720 is its last (605, .83), however far (the
authors' read), so PODS never reaches: "not reached". With --max-gap 60 PODS has no
value at 720 at all (115 s from its last eval), and its mean curve ends at 600.
Strict (100%, last eval at or before), window [0, 600]: threshold .81; GRPO at 480
(475, .81); PODS at 240 reads 238 (.81, the same two seed values as GRPO's 475: equal,
so reached): 2.00x. From --x-min 300 on, checkpoints 360 480 600: GRPO's peak is .81
(480) still, PODS first reaches .8019 at 360 (.82): 480/360 = 1.33x.
"""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pods.analysis.curves import build_curves
from pods.analysis.load import load_wandb_csv
from pods.compare import main

M = "eval/accuracy"
GRPO = {0: 0.20, 110: 0.40, 245: 0.55, 350: 0.70, 475: 0.81, 530: 0.75, 590: 0.80, 720: 0.90}
PODS = {0: 0.20, 125: 0.60, 238: 0.81, 290: 0.70, 365: 0.82, 470: 0.83, 605: 0.83}


def seed_evals(mean: dict[int, float], seed: int) -> dict[int, float]:
    """Seed 1 = mean - 0.01, seed 2 = mean + 0.01 (both .20 at t=0)."""
    return {t: a if t == 0 else round(a + 0.02 * seed - 0.03, 4) for t, a in mean.items()}


RUNS = {  # run name -> {time: accuracy}, the seed in the middle of the name
    f"{v}-s{s}-p8-{tail}": seed_evals(mean, s)
    for v, tail, mean in [("GRPO", "n32-m32-ga16", GRPO), ("PODS", "n128-m32-ga4", PODS)]
    for s in (1, 2)
}
BASE, VAR = "GRPO-p8-n32-m32-ga16", "PODS-p8-n128-m32-ga4"


def write_export(path: Path) -> Path:
    """W&B panel export: eval/time, then per run _step, metric, __MIN, __MAX; "" = no point."""
    head = ["eval/time"]
    for r in RUNS:
        head += [f"{r} - _step", f"{r} - _step__MIN", f"{r} - {M}", f"{r} - {M}__MIN", f"{r} - {M}__MAX"]
    rows = []
    for t in sorted({t for e in RUNS.values() for t in e}):
        row = [t]
        for e in RUNS.values():
            v = e.get(t, "")
            row += ["" if v == "" else t // 10] * 2 + [v, v, v]
        rows.append(row)
    path.write_text("\n".join(",".join(map(str, r)) for r in [head, *rows]) + "\n")
    return path


def run_cli(tmp_path: Path, *args: str) -> pd.DataFrame:
    out = tmp_path / "out"
    export = str(write_export(tmp_path / "export.csv"))
    assert (
        main([export, "--out", str(out), "--n-boot", "0", "--baseline", "GRPO-p8-n32-m32-ga16", *args]) == 0
    )
    return pd.read_csv(out / "summary.csv")


def test_seed_in_the_middle_of_names_and_step_columns_ignored(tmp_path):
    df = load_wandb_csv(write_export(tmp_path / "export.csv"))  # no --metric: _step is not a candidate
    assert df.attrs["metric"] == M
    assert sorted(df.variant.unique()) == [BASE, VAR]
    assert df.groupby("variant").seed.unique().map(sorted).to_dict() == {BASE: ["1", "2"], VAR: ["1", "2"]}


def test_nearest_read_on_the_checkpoint_grid(tmp_path):
    df = load_wandb_csv(write_export(tmp_path / "export.csv"))
    curves = build_curves(df, time_read="nearest", grid_step=120, x_max=600)
    np.testing.assert_array_equal(curves[BASE].grid, [0, 120, 240, 360, 480, 600])
    np.testing.assert_allclose(curves[BASE].values.mean(0), [0.20, 0.40, 0.55, 0.70, 0.81, 0.80])
    np.testing.assert_allclose(curves[VAR].values.mean(0), [0.20, 0.60, 0.81, 0.82, 0.83, 0.83])


def test_paper_rule_with_the_budget(tmp_path, capsys):
    table = run_cli(tmp_path, "--grid-step", "120", "--x-max", "600")
    assert table.threshold.iat[0] == pytest.approx(0.99 * 0.81)
    assert table.time.tolist() == [480.0, 240.0]
    assert table.speedup.tolist() == pytest.approx([1.0, 2.0])
    assert (table.time_read.iat[0], table.grid_step.iat[0], table.x_max.iat[0]) == ("nearest", 120, 600)
    assert table.x_unit.iat[0] == "units of the x column 'eval/time'"
    assert table.runs.tolist() == [
        "GRPO-s1-p8-n32-m32-ga16;GRPO-s2-p8-n32-m32-ga16",
        "PODS-s1-p8-n128-m32-ga4;PODS-s2-p8-n128-m32-ga4",
    ]
    stdout = capsys.readouterr().out
    assert "checkpoints every 120 units of the x column 'eval/time'" in stdout
    assert "window [-inf, 600]" in stdout and "- time read: nearest" in stdout
    assert f"{BASE} <- GRPO-s1-p8-n32-m32-ga16, GRPO-s2-p8-n32-m32-ga16 (2 seeds)" in stdout
    assert "warning" not in stdout


def test_without_the_budget_a_run_keeps_its_last_eval(tmp_path):
    table = run_cli(tmp_path, "--grid-step", "120")
    assert table.threshold.iat[0] == pytest.approx(0.99 * 0.90)
    assert table.time.iat[0] == 720.0 and np.isnan(table.time.iat[1])
    assert table.speedup_note.iat[1] == "not reached"
    assert table.curve_final.iat[1] == pytest.approx(0.83)  # 605's eval, read at 720
    assert np.isnan(table.max_gap.iat[0])
    cut = run_cli(tmp_path, "--grid-step", "120", "--max-gap", "60")
    assert cut.max_gap.iat[0] == 60 and cut.rule.iat[0] == "paper+max_gap=60"
    assert cut.speedup_note.iat[1] == "not reached"
    df = load_wandb_csv(write_export(tmp_path / "export.csv"))
    pods = build_curves(df, grid_step=120, max_gap=60)[VAR].values  # (2 seeds, 7 checkpoints)
    assert np.isnan(pods[:, -1]).all() and not np.isnan(pods[:, :-1]).any()


def test_x_min_cut_and_strict_rule(tmp_path):
    strict = run_cli(tmp_path, "--grid-step", "120", "--x-max", "600", "--rule", "strict")
    assert strict.threshold.iat[0] == pytest.approx(0.81)
    assert strict.time.tolist() == [480.0, 240.0] and strict.speedup.iat[1] == pytest.approx(2.0)
    late = run_cli(tmp_path, "--grid-step", "120", "--x-min", "300", "--x-max", "600")
    assert late.time.tolist() == [480.0, 360.0] and late.speedup.iat[1] == pytest.approx(480 / 360)


def test_at_or_before_and_interpolate_reads(tmp_path):
    # at-or-before: GRPO 480 reads 475 (.81): 480; PODS 240 reads 238 (.81): 240
    aob = run_cli(tmp_path, "--grid-step", "120", "--x-max", "600", "--time-read", "at-or-before")
    assert aob.time.tolist() == [480.0, 240.0]
    # interpolate: lines between the evals that bracket each checkpoint. GRPO at 360, 480,
    # 600: .70 + .11 * 10/125, .81 - .06 * 5/55, .80 + .10 * 10/130 (the peak, 600);
    # PODS at 120, 240: .20 + .40 * 120/125, .81 - .11 * 2/52. The crossing of the threshold
    # is placed on the line between the checkpoint before the first hit and the hit.
    interp = run_cli(tmp_path, "--grid-step", "120", "--x-max", "600", "--time-read", "interpolate")
    g360, g480, g600 = 0.70 + 0.11 * 10 / 125, 0.81 - 0.06 * 5 / 55, 0.80 + 0.10 * 10 / 130
    p120, p240 = 0.20 + 0.40 * 120 / 125, 0.81 - 0.11 * 2 / 52
    thr = 0.99 * g600
    t_grpo = 360 + (thr - g360) / (g480 - g360) * 120
    t_pods = 120 + (thr - p120) / (p240 - p120) * 120
    assert interp.threshold.iat[0] == pytest.approx(thr)
    assert interp.time.tolist() == pytest.approx([t_grpo, t_pods])
    assert interp.speedup.iat[1] == pytest.approx(t_grpo / t_pods)


def sparse_export(path: Path) -> Path:
    """Two GRPO seeds evaluated on different clocks (seed 1 every 100 s, seed 2 at 250 and
    450 only) and one PODS seed, as exports of long runs with missed evals look."""
    runs = {
        "GRPO-s1": {0: 0.2, 100: 0.4, 200: 0.5, 300: 0.6, 400: 0.7, 500: 0.7},
        "GRPO-s2": {0: 0.2, 250: 0.6, 450: 0.8},
        "PODS-s1": {0: 0.2, 100: 0.5, 200: 0.7, 300: 0.75, 400: 0.75, 500: 0.74},
    }
    head = ["eval/time"] + [f"{r} - {M}" for r in runs]
    times = sorted({t for e in runs.values() for t in e})
    rows = [[t] + [e.get(t, "") for e in runs.values()] for t in times]
    path.write_text("\n".join(",".join(map(str, r)) for r in [head, *rows]) + "\n")
    return path


def test_missed_evals_are_read_at_the_nearest_eval_not_dropped(tmp_path, capsys):
    """The cutoff changes the answer: by hand, checkpoints every 120 s up to 480.
    GRPO-s2 reads 0 (.2), 120 (0: .2; 120 s vs 130 s), 240 (250: .6), 360 (450: .8; 90 s vs
    110 s), 480 (450: .8). GRPO-s1 reads 0 .2, 120 (100) .4, 240 (200) .5, 360 (400) .7, 480 (500) .7.
    GRPO mean: .2 .3 .55 .75 .75 -> peak .75 (T > 0), threshold .7425, first at 360.
    PODS reads .2, .5, .7 (240 -> 200), .75 (360 -> 400), .74 (480 -> 500): first >= .7425 at 360.
    Speedup 1.00x. With --max-gap 60 GRPO-s2 has no value at 120, 240 and 360 (its evals are
    130, 10, 90 s away: only 240 is within 60 s), so GRPO's mean curve exists at 0, 240, 480
    only: .2, .55, .75 -> threshold .7425 first at 480; PODS at 360: 1.33x."""
    export = sparse_export(tmp_path / "sparse.csv")
    out = tmp_path / "o"
    args = [str(export), "--grid-step", "120", "--x-max", "480", "--n-boot", "0", "--baseline", "GRPO"]
    assert main([*args, "--out", str(out)]) == 0
    table = pd.read_csv(out / "summary.csv")
    assert table.threshold.iat[0] == pytest.approx(0.99 * 0.75)
    assert table.time.tolist() == [360.0, 360.0] and table.speedup.iat[1] == pytest.approx(1.0)
    assert main([*args, "--out", str(tmp_path / "g"), "--max-gap", "60"]) == 0
    cut = pd.read_csv(tmp_path / "g" / "summary.csv")
    assert cut.time.tolist() == [480.0, 360.0] and cut.speedup.iat[1] == pytest.approx(480 / 360)
    assert "max gap: 60" in (tmp_path / "g" / "summary.md").read_text()
    assert "max gap: none" in (out / "summary.md").read_text()
