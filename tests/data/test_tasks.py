import json

import pytest
from omegaconf import OmegaConf

from pods.config import DatasetConfig
from pods.data import DataError, PromptSampler, load_examples
from pods.data.tasks import gold_answer


def dcfg(**kw):
    return OmegaConf.merge(
        OmegaConf.structured(DatasetConfig), {"name": "t", "source": "local", "task": "x"}, kw
    )


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_gold_answer_formats():
    assert gold_answer("Natalia sold 48/2 = 24 clips.\n#### 1,072", "gsm8k") == "1072"
    assert gold_answer("no marker", "gsm8k") is None
    assert gold_answer(r"so $\boxed{\frac{1}{2}}$ and \boxed{x^{2}}", "boxed") == "x^{2}"
    assert gold_answer(r"\boxed{\frac{a}{b}}", "boxed") == r"\frac{a}{b}"
    assert gold_answer(r"\boxed{unbalanced", "boxed") is None
    assert gold_answer("  7 ", "plain") == "7"


def test_bad_rows_are_counted_and_skipped(tmp_path):
    rows = [
        {"question": "1+1?", "answer": "2"},
        {"question": "", "answer": "3"},
        {"question": "q", "answer": None},
        {"question": "2+2?", "answer": "4"},
    ]
    path = write_jsonl(tmp_path / "d.jsonl", rows)
    ex, rep = load_examples(dcfg(task=path, train_size=0), "train")
    assert [e.answer for e in ex] == ["2", "4"]
    assert rep.rows == 4 and rep.bad == {"empty question": 1, "no answer": 1}


def test_bad_rows_refused_when_configured(tmp_path):
    path = write_jsonl(
        tmp_path / "d.jsonl", [{"question": "", "answer": "3"}, {"question": "a", "answer": "1"}]
    )
    with pytest.raises(DataError, match="on_bad_rows=error"):
        load_examples(dcfg(task=path, on_bad_rows="error", train_size=0), "train")


def test_missing_file_and_missing_fields(tmp_path):
    with pytest.raises(DataError, match="file not found"):
        load_examples(dcfg(task=str(tmp_path / "nope.jsonl")), "train")
    path = write_jsonl(tmp_path / "d.jsonl", [{"problem": "x", "solution": "y"}])
    with pytest.raises(DataError, match="fields present"):
        load_examples(dcfg(task=path), "train")


def test_procedural_eval_is_disjoint_from_train():
    cfg = dcfg(
        source="reasoning_gym",
        task="chain_sum",
        task_kwargs={"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1},
        train_size=300,
        eval_size=50,
    )
    train, _ = load_examples(cfg, "train")
    evals, rep = load_examples(cfg, "eval", exclude={e.question for e in train})
    assert not {e.question for e in train} & {e.question for e in evals}
    assert (
        rep.bad.get("duplicate of a train question", 0) > 0
    )  # 1-digit sums collide often; they were removed


def test_sampler_epochs_and_exact_resume():
    s = PromptSampler(5, seed=3)
    first = s.next(7)
    assert sorted(p for p, e in first[:5]) == list(range(5)) and [e for _, e in first] == [0] * 5 + [1] * 2
    state = s.state_dict()
    tail = s.next(6)
    s2 = PromptSampler(5, seed=3)
    s2.load_state_dict(state)
    assert s2.next(6) == tail
