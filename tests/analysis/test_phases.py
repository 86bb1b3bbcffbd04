"""pods.analysis.phases: per-variant means over seeds of per-run totals, from metrics.jsonl."""

from __future__ import annotations

import json
from pathlib import Path

from pods.analysis.phases import main


def _run(d: Path, steps: list[dict]) -> None:
    d.mkdir(parents=True)
    recs = [{"kind": "eval", "step": 0, "train_time": 0.0, "eval/accuracy": 0.5}]
    recs += [{"kind": "train", "step": i + 1, "train_time": float(i + 1), **s} for i, s in enumerate(steps)]
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))


def test_means_over_seeds_of_run_totals(tmp_path, capsys):
    step = {"rollout/rollouts": 16, "prefilter/skipped": 1, "timing/generation": 0.5, "timing/update": 0.25}
    _run(tmp_path / "greso-n16-m16-s1", [step, step])  # totals: 32 rollouts, 2 skipped, 1.0 s gen
    _run(tmp_path / "greso-n16-m16-s2", [step, step, step, step])  # 64 rollouts, 4 skipped, 2.0 s gen
    _run(tmp_path / "none-n16-m16-s1", [{"rollout/rollouts": 16, "timing/generation": 0.25}])
    main([str(tmp_path)])
    out = capsys.readouterr().out
    rows = {
        line.split(" | ")[0].lstrip("| "): line.split(" | ") for line in out.splitlines() if "-n16-" in line
    }
    header = [c.strip() for c in out.splitlines()[0].strip("|").split("|")]
    g = dict(zip(header, [c.strip(" |") for c in rows["greso-n16-m16"]]))
    assert g["seeds"] == "2" and g["steps"] == "3.00" and g["rollouts"] == "48.00"
    assert g["skipped before rollout"] == "3.00" and g["generation s"] == "1.50" and g["update s"] == "0.75"
    assert g["s/step"] == "1.00" and g["generation ms/rollout"] == "31.25"  # 1000 x 0.5 s / 16 rollouts
    n = dict(zip(header, [c.strip(" |") for c in rows["none-n16-m16"]]))
    assert n["seeds"] == "1" and n["rollouts"] == "16.00" and n["skipped before rollout"] == "0.00"


def test_runs_logged_before_one_word_per_stage_read_the_same(tmp_path, capsys):
    """filter/*, the filter and selection timers and rollout/{prompts_drawn, dropped_zero_var} (results/** logged
    them) count as prefilter/*, the prefilter and selector timers and dynamic_sampling/dropped_zero_var."""
    old = {"filter/skipped": 2, "timing/filter": 0.125, "timing/selection": 0.5, "rollout/rollouts": 8,
           "rollout/prompts_drawn": 3, "rollout/dropped_zero_var": 1}  # fmt: skip
    new = {"prefilter/skipped": 2, "timing/prefilter": 0.125, "timing/selector": 0.5, "rollout/rollouts": 8,
           "prefilter/prompts_drawn": 3, "dynamic_sampling/dropped_zero_var": 1}  # fmt: skip
    tables = []
    for name, step in (("old", old), ("new", new)):
        _run(tmp_path / name / "greso-n16-m16-s1", [step])
        main([str(tmp_path / name)])
        tables.append(capsys.readouterr().out)
    assert tables[0] == tables[1] and "| 2.00 |" in tables[0] and "| 0.12 |" in tables[0]
    assert "| 3.00 | 2.00 | 1.00 |" in tables[0]  # prompts drawn, skipped before rollout, zero-var dropped
