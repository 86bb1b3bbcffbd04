"""What pods leaves on disk can be read back: a component whose state holds numpy numbers and arrays passes
pods.testing, saves, and resumes; a state no resume could load (a numpy Generator) is refused by check_state and
by the save, before anything is written.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from pods import checkpoint as ckpt
from pods.errors import CheckpointError
from pods.prefilter import PREFILTERS, NoFilter
from pods.resume import readable
from pods.testing import check_prefilter, check_state
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
