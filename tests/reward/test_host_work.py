"""Issue 38's cheaper host work per row gives the verdicts of the work it replaces: a batch graded with its
per-batch memo (each completion's answer extracted once, each text parsed once, each (answer, gold) pair
decided once) against every pair graded alone; parse_number's plain-integer path against its general path;
the format reward scored once per distinct text against every text on its own."""

import pytest

from pods.reward import functions, grading, numbers
from pods.reward.grading import Grader
from pods.reward.numbers import MAX_DIGITS, Number, parse_number

ANSWERS = ["12", "-7", "+12", "012", "-0", "0", "1,012", "1 012", "12.0", "12.", " 12", "−7", "\u200b12",
           "٣", "١٢", "²", "--7", "+-7", "-", "", "12%", "\\frac{24}{2}", "x = 12", "-7-7", "\\boxed{12}",
           "$12$", "12 dollars", "1e1", "۱۲", "12\n"]  # fmt: skip
GOLDS = ["12", "-7", "1012", "0", "1 012", "\\frac{1}{2}", "٣"]


@pytest.fixture(scope="module")
def grader():
    # what these tests check is the verdict, not the bound: a timeout no loaded machine reaches (a correct pair
    # that a descheduled worker takes a second over would read as wrong, or as a timeout)
    g = Grader(timeout_s=30.0).start()
    yield g
    g.close()


@pytest.mark.parametrize("s", ANSWERS + ["9" * MAX_DIGITS, "-" + "9" * MAX_DIGITS, "9" * (MAX_DIGITS + 1)])
def test_plain_integer_path_gives_what_the_general_path_gives(s):
    assert parse_number(s) == numbers._parse(s)
    if s in ("12", "-7", "+12", "012", "-0"):
        assert parse_number(s) == Number(int(s))  # and it took the fast path's value


def test_plain_integer_path_keeps_the_digit_limit():
    assert parse_number("9" * (MAX_DIGITS + 1)) is None  # the general path refuses it too
    assert parse_number("9" * MAX_DIGITS).value == int("9" * MAX_DIGITS)


def _batch():
    """Completions x golds as a PODS step makes them (many repeats), with the edge cases among them."""
    comps, golds = [], []
    for i, g in enumerate(GOLDS):
        for j, a in enumerate(ANSWERS):
            for text in (f"<think>{j}</think><answer>{a}</answer>", f"so \\boxed{{{a}}}", a, ""):
                comps += [text] * (1 + (i + j) % 3)
                golds += [g] * (1 + (i + j) % 3)
    comps += ["<answer>" + "1" * 300 + "</answer>", None, "<answer>12</answer>"]
    golds += ["12", "12", "x" * 5000]  # an answer over max_answer_chars, a non-string, a too-long gold
    return comps, golds


def test_a_batch_scores_as_every_pair_graded_alone(grader):
    comps, golds = _batch()
    t0, e0 = grader.n_timeouts, grader.n_errors
    batch = grader.score_batch(comps, golds)
    counted = (grader.n_timeouts - t0, grader.n_errors - e0)
    alone = []
    for c, g in dict.fromkeys(zip(comps, golds, strict=True)):  # each distinct pair alone, in its own batch
        alone.append(((c, g), grader.score(c, g)))
    assert counted[0] == 0, "a pair timed out: the comparison says nothing (a loaded machine)"
    verdict = dict(alone)
    assert batch == [verdict[(c, g)] for c, g in zip(comps, golds, strict=True)]
    assert counted[1] == 2  # the non-string and the too-long gold, each counted once
    assert 0 < sum(batch) < len(batch)


def test_a_step_that_raises_is_an_error_for_each_row_that_needs_it(grader, monkeypatch):
    real = grading.extract_answer

    def extract(text, boxed=True):
        if "boom" in text:
            raise ValueError("boom")
        return real(text, boxed)

    monkeypatch.setattr(grading, "extract_answer", extract)
    e0 = grader.n_errors
    got = grader.score_batch(
        ["<answer>boom</answer>", "<answer>7</answer>", "<answer>boom</answer>"], ["7"] * 3
    )
    assert got == [0.0, 1.0, 0.0] and grader.n_errors - e0 == 2


def test_format_reward_scores_each_distinct_text_once_as_it_scores_each():
    comps, _ = _batch()
    want = [functions._format_score(c) if isinstance(c, str) else 0.0 for c in comps]
    assert functions.format_reward(comps) == want
    assert {1.0, 0.5, 0.0} <= set(want)


def test_training_with_the_cheaper_host_work_matches_and_resumes_bitwise(make_cfg, tmp_path, monkeypatch):
    """The Trainer, PODS 8/4 on the graph loop (eager on a CPU): 4 steps give the records and weights of 4 steps
    with the host work as it was (batch_decode of every row, every pair parsed anew, every text's format scored),
    and so do 2 steps, a checkpoint and a resume to 4."""
    import torch

    from bench.host_work import GraderBefore
    from pods import checkpoint as ckpt
    from pods.rollout.hf import HFGenerator
    from pods.tracking import read_metrics
    from pods.train import run
    from tests.conftest import SAME_RUN_KEYS, SMOKE

    common = [*SMOKE, "selector=max_variance", "eval.at_end=false", "rollout.hf.compile=true"]
    common += ["reward=accuracy_format"]
    dirs = {k: tmp_path / k for k in ("before", "after", "resumed")}
    with monkeypatch.context() as m:  # the host work as it was
        m.setattr(
            HFGenerator,
            "detokenize",
            lambda self, comp: self.tok.batch_decode(comp, skip_special_tokens=True),
        )
        m.setattr(Grader, "_local", GraderBefore._local)
        m.setattr(functions, "_score_once", lambda scores, text: functions._format_score(text))
        run(make_cfg(*common, "max_steps=4", run_dir=dirs["before"]))
    run(make_cfg(*common, "max_steps=4", run_dir=dirs["after"]))
    run(make_cfg(*common, "max_steps=2", run_dir=dirs["resumed"]))
    run(make_cfg(*common, "max_steps=4", "resume=true", run_dir=dirs["resumed"]))
    recs = {
        k: [r for r in read_metrics(d / "metrics.jsonl") if r["kind"] == "train"] for k, d in dirs.items()
    }
    assert [r["step"] for r in recs["resumed"]] == [1, 2, 3, 4]
    for k in ("after", "resumed"):
        for x, y in zip(recs["before"], recs[k], strict=True):
            assert all(x.get(key) == y.get(key) for key in SAME_RUN_KEYS + ("reward/format",)), (k, x["step"])
    weights = {k: ckpt.read_weights(ckpt.latest_checkpoint(d / "checkpoints")) for k, d in dirs.items()}
    for k in ("after", "resumed"):
        assert all(torch.equal(weights["before"][n], weights[k][n]) for n in weights["before"])


def test_the_benchmark_refuses_arms_that_disagree():
    """bench/host_work.py: an A/B of before and after times only calls that give the same output."""
    from bench.host_work import ab

    same = {f"{p} {a}": (lambda: [1.0, 0.0]) for p in ("detokenize", "reward") for a in ("before", "after")}
    out = ab(same, reps=3)
    assert set(out) == set(same) and all(v["wall_min"] <= v["wall_median"] for v in out.values())
    differ = dict(same, **{"reward after": lambda: [1.0, 1.0]})
    with pytest.raises(AssertionError, match="reward: before and after differ on 1 rows"):
        ab(differ, reps=3)
