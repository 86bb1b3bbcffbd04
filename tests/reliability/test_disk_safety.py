"""What pods leaves on disk can be read back, and it writes nowhere else:

1. a component whose state holds numpy numbers and arrays passes pods.testing, saves, and resumes; a state no
   resume could load (a numpy Generator) is refused by check_state and by the save, before anything is written;
2. a symbolic link in place of a file pods writes in the run directory (run.lock, metrics.jsonl, metrics.tmp,
   history.jsonl, run_info.json's temporary file, a checkpoint's temporary directory, `latest`'s temporary
   file, checkpoints/) is refused in one line and the file it points to is untouched; a run directory that is
   itself under a link is fine;
3. a damaged dataset cache file is rewritten whole when the task is generated again, or removed where the
   rows cannot be cached, so that later runs read it instead of generating again.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest
from omegaconf import OmegaConf

from pods import checkpoint as ckpt
from pods import history, runlock
from pods.config import DatasetConfig
from pods.data import cache, load_examples, tasks
from pods.errors import CheckpointError
from pods.files import LinkRefused
from pods.prefilter import PREFILTERS, NoFilter
from pods.resume import readable
from pods.testing import check_prefilter, check_state
from pods.tracking import MetricsLogger, replace_file, truncate_metrics
from pods.train import run
from tests.conftest import SMOKE

# --- 1. a checkpoint that was written can be read ------------------------------------------------------------


class NumpyCounts(NoFilter):
    """Keeps a prompt until it has been rolled out twice; its counts are numpy's (int64 array, float64 rate)."""

    def __init__(self, seed: int = 0, **knobs):
        self.seen, self.rate = np.zeros(256, dtype=np.int64), np.float64(0.5)

    def keep(self, prompt_ids, epoch):
        return [bool(self.seen[p % 256] < 2) for p in prompt_ids]

    def observe(self, prompt_ids, epoch, correct):
        if not len(prompt_ids):
            return
        np.add.at(self.seen, [p % 256 for p in prompt_ids], 1)
        self.rate = np.float64(0.9) * self.rate + np.float64(0.1 * float(correct.mean()))

    def metrics(self):
        return {"prefilter/rate": float(self.rate)}

    def state_dict(self):
        return {"seen": self.seen.copy(), "rate": self.rate, "rolled": np.int64(self.seen.sum())}

    def load_state_dict(self, state):
        self.seen, self.rate = state["seen"].copy(), state["rate"]


@pytest.fixture
def numpy_prefilter():
    PREFILTERS.register("numpy_counts")(NumpyCounts)
    yield "numpy_counts"
    PREFILTERS.pop("numpy_counts")


def test_numpy_numbers_and_arrays_read_back_from_a_checkpoint():
    state = {"rate": np.float64(0.25), "n": np.int64(3), "ok": np.bool_(True), "seen": np.arange(4.0)}
    back = check_state(state)
    assert back["rate"] == 0.25 and isinstance(back["rate"], np.float64) and back["n"] == 3
    assert np.array_equal(back["seen"], state["seen"]) and back["seen"].dtype == np.float64
    check_prefilter(NumpyCounts)


def test_a_state_no_resume_could_load_is_refused_by_the_check_and_by_the_save(tmp_path):
    state = {"rng": np.random.default_rng(0)}  # pickles, but weights_only refuses the Generator
    with pytest.raises(AssertionError, match="numpy.random._pickle.__generator_ctor.*bit_generator.state"):
        check_state(state, "prefilter: state_dict()")
    full = {"components": {"sampler": {"pos": 1}, "prefilter": state}, "per_rank": [{"rng": {}}]}
    with pytest.raises(CheckpointError) as e:
        readable(full, 4, tmp_path / "checkpoints")
    msg = str(e.value)
    assert msg.startswith(
        "checkpoint of step 4 not saved: a resume could not read back the state of 'prefilter'"
    )
    assert "\n" not in msg and not (tmp_path / "checkpoints").exists()


def test_a_run_whose_prefilter_holds_numpy_state_resumes(make_cfg, tmp_path, numpy_prefilter):
    d = tmp_path / "run"
    over = [*SMOKE, f"prefilter.name={numpy_prefilter}", "eval.at_start=false", "eval.at_end=false"]
    run(make_cfg(*over, "max_steps=1", run_dir=d))
    saved = ckpt.load_trainer_state(ckpt.latest_checkpoint(d / "checkpoints"))["components"]["prefilter"]
    assert isinstance(saved["rate"], np.float64) and saved["seen"].sum() == 2  # 2 prompts rolled out
    run(make_cfg(*over, "max_steps=2", "resume=true", run_dir=d))
    assert ckpt.latest_checkpoint(d / "checkpoints").name == "step_0000002"
    lines = [json.loads(x) for x in (d / "history.jsonl").read_text().splitlines()]
    assert [x["event"] for x in lines] == ["start", "resume"]


# --- 2. writes stay inside the run directory -----------------------------------------------------------------


@pytest.fixture
def outside(tmp_path) -> Path:
    """A file outside the run directory that a link inside it points to."""
    target = tmp_path / "elsewhere" / "precious.txt"
    target.parent.mkdir()
    target.write_text("keep me\n")
    return target


def refused(e: pytest.ExceptionInfo, link: Path) -> None:
    msg = str(e.value)
    assert msg.startswith(f"{link} is a symbolic link (to ") and "\n" not in msg, msg


class FakeModel:
    def save_pretrained(self, path, state_dict=None):
        Path(path).mkdir(parents=True, exist_ok=True)
        (Path(path) / "model.safetensors").write_bytes(b"weights")


def save(root: Path, step: int = 1) -> Path:
    return ckpt.save_checkpoint(root, step, FakeModel(), {"components": {}}, keep_last=2)


@pytest.mark.parametrize("name", ["run.lock", "metrics.jsonl", "history.jsonl"])
def test_a_link_in_place_of_a_file_pods_appends_to_is_refused(name, tmp_path, outside):
    d = tmp_path / "run"
    d.mkdir()
    (d / name).symlink_to(outside)
    with pytest.raises(LinkRefused) as e:
        if name == "run.lock":
            runlock.acquire(d)
        elif name == "metrics.jsonl":
            MetricsLogger(OmegaConf.create({"backend": "none"}), d, {})
        else:
            history.append(d, "start")
    refused(e, d / name if name != "run.lock" else d.resolve() / name)
    assert outside.read_text() == "keep me\n"
    assert not runlock.held(d)


def test_a_dangling_link_is_refused_too(tmp_path):
    d = tmp_path / "run"
    d.mkdir()
    (d / "history.jsonl").symlink_to(tmp_path / "nowhere.txt")
    with pytest.raises(LinkRefused):
        history.append(d, "start")
    assert not (tmp_path / "nowhere.txt").exists()


def test_the_temporary_files_of_a_rewrite_are_never_followed(tmp_path, outside):
    d = tmp_path / "run"
    d.mkdir()
    (d / "metrics.jsonl").write_text('{"kind": "train", "step": 1}\n')
    (d / "metrics.tmp").symlink_to(outside)
    with pytest.raises(LinkRefused) as e:
        truncate_metrics(d / "metrics.jsonl", 1)
    refused(e, d / "metrics.tmp")
    (d / ".run_info.json.tmp").symlink_to(outside)
    with pytest.raises(LinkRefused):
        replace_file(d / "run_info.json", "{}")
    assert outside.read_text() == "keep me\n" and (d / "metrics.tmp").is_symlink()


def test_a_checkpoint_is_never_written_through_a_link(tmp_path, outside):
    root = tmp_path / "run" / "checkpoints"
    root.mkdir(parents=True)
    (root / ".tmp_step_0000001").symlink_to(outside.parent, target_is_directory=True)
    with pytest.raises(LinkRefused):
        save(root)
    (root / ".tmp_step_0000001").unlink()
    (root / ".latest.tmp").symlink_to(outside)
    with pytest.raises(LinkRefused):
        save(root)
    assert sorted(p.name for p in outside.parent.iterdir()) == ["precious.txt"]
    assert outside.read_text() == "keep me\n"
    elsewhere = tmp_path / "big_disk"
    elsewhere.mkdir()
    (tmp_path / "run2").mkdir()
    (tmp_path / "run2" / "checkpoints").symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(LinkRefused):
        save(tmp_path / "run2" / "checkpoints")
    assert not any(elsewhere.iterdir())


def test_a_run_directory_under_a_link_is_fine(tmp_path):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    (tmp_path / "outputs").symlink_to(scratch, target_is_directory=True)
    d = tmp_path / "outputs" / "run"
    runlock.acquire(d)
    try:
        logger = MetricsLogger(OmegaConf.create({"backend": "none"}), d, {})
        logger.log({"kind": "train", "step": 1, "train_time": 0.0})
        history.append(d, "start")
        save(d / "checkpoints")
    finally:
        runlock.release(d)
    assert {p.name for p in (scratch / "run").iterdir()} == {
        "run.lock",
        "metrics.jsonl",
        "history.jsonl",
        "checkpoints",
    }
    assert ckpt.latest_checkpoint(scratch / "run" / "checkpoints").name == "step_0000001"


@pytest.mark.parametrize("name", ["run.lock", "checkpoints"])
def test_a_run_refuses_a_link_in_one_line_before_the_model_loads(name, make_cfg, tmp_path, outside):
    from pods.errors import RunError

    d = tmp_path / "run"
    d.mkdir()
    (d / name).symlink_to(outside if name == "run.lock" else outside.parent)
    with pytest.raises(RunError) as e:
        run(make_cfg(*SMOKE, run_dir=d))
    refused(e, d / name)
    assert sorted(p.name for p in outside.parent.iterdir()) == ["precious.txt"]
    assert outside.read_text() == "keep me\n"


# --- 3. a damaged dataset cache file is repaired -------------------------------------------------------------


def rg(**kw):
    base = {"name": "t", "source": "reasoning_gym", "task": "chain_sum", "train_size": 16, "eval_size": 4}
    return OmegaConf.merge(OmegaConf.structured(DatasetConfig), base, kw)


def test_a_cache_file_found_short_is_rewritten_and_read_by_the_next_run(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("PODS_CACHE_DIR", str(tmp_path / "cache"))
    cfg = rg()
    rows = load_examples(cfg, "train")[0]
    path = tasks.task_cache_path(cfg, "train")
    entry = json.loads(path.read_text())
    path.write_text(json.dumps({**entry, "data": entry["data"][:5]}))  # cut short, its count left
    with caplog.at_level(logging.WARNING, logger="pods"):
        assert load_examples(cfg, "train")[0] == rows
        assert json.loads(path.read_text()) == entry  # rewritten whole
        assert load_examples(cfg, "train")[0] == rows  # the next run reads it back
    assert sum("task cache" in r.getMessage() for r in caplog.records) == 1
    assert not list(path.parent.glob(".*.tmp"))  # no temporary file left


def test_a_damaged_cache_file_whose_rows_cannot_be_kept_is_removed(tmp_path, caplog):
    path = tmp_path / "entry.json"
    path.write_text('{"pods_task_cache": 2, "rows": 9, "data": []}')  # damaged
    rows = [("item 0", {"question": "q", "answer": "1", "metadata": {"seen": {1, 2}}})]  # a set: not kept
    with caplog.at_level(logging.INFO, logger="pods"):
        assert cache.write_task_cache(path, rows) is False
    assert not path.exists() and "removed: these rows would not read back equal" in caplog.text


def test_a_damaged_cache_file_that_cannot_be_replaced_is_named(tmp_path, monkeypatch, caplog):
    path = tmp_path / "entry.json"
    path.write_text("[")

    def fail(*a, **kw):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(cache.os, "replace", fail)
    monkeypatch.setattr(Path, "unlink", lambda self, missing_ok=False: fail() if self == path else None)
    with caplog.at_level(logging.WARNING, logger="pods"):
        assert cache.write_task_cache(path, [("item 0", {"question": "q", "answer": "1"})]) is False
    assert path.read_text() == "["
    assert "is left in place (it cannot be rewritten (Permission denied)" in caplog.text
