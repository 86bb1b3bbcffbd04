"""metrics.jsonl after resumes: every step's train record once, eval records once per eval step, no silent gap;
checkpoint re-saves that never delete the good copy first."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from pods import checkpoint as ckpt
from pods.tracking import MetricsGapError, check_metrics, read_metrics, truncate_metrics
from pods.train import run
from tests.conftest import SMOKE

# --- metrics.jsonl: torn and corrupt lines ------------------------------------------------------------


def _write(p: Path, recs: list[dict], tail: str = "") -> list[str]:
    lines = [json.dumps(r) for r in recs]
    p.write_text("".join(x + "\n" for x in lines) + tail)
    return lines


def _run_records(last: int, evals=(0, 4, 8)) -> list[dict]:
    out = [{"kind": "eval", "step": 0}] if 0 in evals else []
    for s in range(1, last + 1):
        out.append(
            {"kind": "train", "step": s, "train_time": float(s), "reward/mean": 0.5, "update/loss": 0.1}
        )
        if s in evals:
            out.append({"kind": "eval", "step": s, "train_time": float(s), "eval/accuracy": 0.25})
    return out


def test_torn_last_line_after_the_checkpoint_is_dropped(tmp_path):
    p = tmp_path / "metrics.jsonl"
    _write(p, _run_records(8), tail='{"kind": "train", "step": 9, "train_ti')
    truncate_metrics(p, 8)
    assert [(r["kind"], r["step"]) for r in read_metrics(p)] == [
        (r["kind"], r["step"]) for r in _run_records(8)
    ]


def test_torn_line_the_checkpoint_covers_is_refused_with_file_and_line(tmp_path):
    p = tmp_path / "metrics.jsonl"
    lines = _write(p, _run_records(8))
    before = p.read_text()
    p.write_text(
        before[: len(before) - len(lines[-1]) // 2 - 1]
    )  # cut the last line (eval of step 8) mid-way
    with pytest.raises(MetricsGapError, match=rf"{p}: line {len(lines)} does not parse.*step 8") as e:
        truncate_metrics(p, 8)
    assert e.value.step == 8
    assert p.read_text() == before[: len(before) - len(lines[-1]) // 2 - 1]  # refused: nothing changed
    # cut so short that its step is lost: the checkpoint's line count (meta.json) still knows it is covered
    p.write_text(before[: len(before) - len(lines[-1]) + 10])
    assert check_metrics(p, 8)  # without the count: indistinguishable from a line torn after the checkpoint
    with pytest.raises(MetricsGapError, match=f"line {len(lines)} does not parse"):
        check_metrics(p, 8, covered_lines=len(lines))


def test_file_cut_in_line_5_names_the_missing_steps(tmp_path):
    p = tmp_path / "metrics.jsonl"
    lines = _write(p, _run_records(8))
    p.write_text("".join(x + "\n" for x in lines[:4]) + lines[4][:10])  # the "cut line 5"
    with pytest.raises(MetricsGapError) as e:
        truncate_metrics(p, 8)
    msg = str(e.value)
    assert "line 5 does not parse" in msg and "no train record for steps 4-8" in msg and str(p) in msg
    assert e.value.step == 4  # the earliest step lost: a checkpoint before it (<= 3) recomputes it all


def test_corrupt_middle_line_is_refused_and_later_lines_after_checkpoint_are_not(tmp_path):
    p = tmp_path / "metrics.jsonl"
    lines = _write(p, _run_records(8))
    lines[6] = lines[6].replace('"train"', '"tr\x00ain"')[:-3] + "@@"
    p.write_text("".join(x + "\n" for x in lines))
    with pytest.raises(MetricsGapError, match="line 7 does not parse"):
        check_metrics(p, 8)
    assert check_metrics(p, 4)  # the corrupt line is after a checkpoint at step 4: recomputed from it


def test_duplicates_from_older_versions_are_dropped(tmp_path):
    p = tmp_path / "metrics.jsonl"
    _write(p, _run_records(4) + [{"kind": "eval", "step": 4}, {"kind": "eval", "step": 4}])
    truncate_metrics(p, 4)
    keys = [(r["kind"], r["step"]) for r in read_metrics(p)]
    assert len(keys) == len(set(keys)) and keys.count(("eval", 4)) == 1


def test_missing_metrics_file_with_a_checkpoint_is_a_gap(tmp_path):
    with pytest.raises(MetricsGapError, match="no train record for steps 1-3"):
        truncate_metrics(tmp_path / "metrics.jsonl", 3)
    truncate_metrics(tmp_path / "metrics.jsonl", -1)  # no checkpoint: nothing to keep, nothing to refuse


# --- checkpoints: re-saving a step ------------------------------------------------------------------


class _Model(torch.nn.Linear):
    def save_pretrained(self, d, state_dict=None):
        Path(d).mkdir(parents=True, exist_ok=True)
        torch.save(self.state_dict(), Path(d) / "w.pt")


@pytest.mark.parametrize("fail_at", [1, 2])  # which rename of the swap the kill lands before
def test_resave_never_deletes_the_good_copy_first(tmp_path, monkeypatch, fail_at):
    root, model = tmp_path / "checkpoints", _Model(2, 2)
    ckpt.save_checkpoint(root, 5, model, {"x": "old"}, keep_last=2)
    real, calls = os.replace, []

    def replace(a, b):
        if Path(a).name.startswith((".tmp_step", "step_")) and Path(b).parent == root:
            calls.append((a, b))
            if len(calls) == fail_at:
                raise KeyboardInterrupt("killed")
        return real(a, b)

    monkeypatch.setattr(ckpt.os, "replace", replace)
    with pytest.raises(KeyboardInterrupt):
        ckpt.save_checkpoint(root, 5, model, {"x": "new"}, keep_last=2)
    monkeypatch.undo()
    latest = ckpt.latest_checkpoint(root)  # `latest` names step_5, and step_5 loads
    assert latest.name == "step_0000005" and (root / "latest").read_text() == latest.name
    assert ckpt.load_trainer_state(latest)["x"] == "old"
    ckpt.save_checkpoint(root, 5, model, {"x": "new"}, keep_last=2)  # the next save completes the swap
    assert ckpt.load_trainer_state(ckpt.latest_checkpoint(root))["x"] == "new"
    assert sorted(p.name for p in root.iterdir()) == ["latest", "step_0000005"]


def test_prune_keeps_newest_and_half_deleted_dirs_are_never_checkpoints(tmp_path):
    root, model = tmp_path / "checkpoints", _Model(2, 2)
    for s in (1, 2, 3):
        ckpt.save_checkpoint(
            root, s, model, {"s": s}, keep_last=0
        )  # refused by validate; here: keep the newest
    assert [p.name for p in ckpt.checkpoints(root)] == ["step_0000003"]
    assert ckpt.read_meta(root / "step_0000003")["step"] == 3


# --- the trainer: eval records exactly once, resume of a finished run, rollback over a gap -----------


def _records(run_dir: Path) -> list[tuple[str, int]]:
    return [(r["kind"], r["step"]) for r in read_metrics(run_dir / "metrics.jsonl")]


def _assert_once(recs, steps, evals):
    assert [s for k, s in recs if k == "train"] == list(steps)
    assert [s for k, s in recs if k == "eval"] == list(evals)


COMMON = [*SMOKE, "max_steps=4", "checkpoint.every_steps=1", "eval.every_steps=2"]


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    from tests.conftest import compose_cfg

    d = tmp_path_factory.mktemp("finished") / "run"
    run(compose_cfg(COMMON, d))
    return d


def test_resume_of_a_finished_run_adds_nothing(make_cfg, finished_run, tmp_path):
    import shutil

    d = tmp_path / "run"
    shutil.copytree(finished_run, d)
    before = (d / "metrics.jsonl").read_text()
    _assert_once(_records(d), range(1, 5), [0, 2, 4])
    stamp = (d / "checkpoints" / "step_0000004" / "trainer_state.pt").stat().st_mtime_ns
    for _ in range(2):
        run(make_cfg(*COMMON, "resume=true", run_dir=d))
    assert (d / "metrics.jsonl").read_text() == before  # no second final eval record
    assert (
        d / "checkpoints" / "step_0000004" / "trainer_state.pt"
    ).stat().st_mtime_ns == stamp  # not re-saved


def test_final_eval_after_the_last_checkpoint_is_recomputed_once(make_cfg, tmp_path):
    # eval.every_steps=3: the final eval at step 4 comes after the step-4 checkpoint; kill before save_final
    d = tmp_path / "run"
    over = [*COMMON, "eval.every_steps=3", "checkpoint.save_final=false"]
    run(make_cfg(*over, run_dir=d))
    _assert_once(_records(d), range(1, 5), [0, 3, 4])
    run(make_cfg(*over, "resume=true", run_dir=d))
    _assert_once(_records(d), range(1, 5), [0, 3, 4])


def test_torn_covered_line_rolls_back_to_an_older_checkpoint(make_cfg, finished_run, tmp_path):
    import shutil

    d = tmp_path / "run"
    shutil.copytree(finished_run, d)
    text = (d / "metrics.jsonl").read_text()
    (d / "metrics.jsonl").write_text(text[: len(text) - 200])  # cut the last line (eval of step 4) mid-way
    run(make_cfg(*COMMON, "resume=true", run_dir=d))  # step-3 checkpoint: step 4 and its eval recomputed
    _assert_once(_records(d), range(1, 5), [0, 2, 4])


def test_gap_without_an_older_checkpoint_is_refused_before_the_model_loads(
    make_cfg, finished_run, tmp_path, monkeypatch
):
    import shutil

    d = tmp_path / "run"
    shutil.copytree(finished_run, d)
    lines = (d / "metrics.jsonl").read_text().splitlines()
    (d / "metrics.jsonl").write_text("\n".join(lines[:2]) + "\n" + lines[2][:15])  # cut in line 3
    import pods.trainer

    monkeypatch.setattr(pods.trainer, "load_policy", lambda *a: pytest.fail("model loaded"))
    with pytest.raises(
        MetricsGapError, match=r"metrics.jsonl: line 3 does not parse.*no train record for steps 2-4"
    ):
        run(make_cfg(*COMMON, "resume=true", "checkpoint.keep_last=2", run_dir=d))
