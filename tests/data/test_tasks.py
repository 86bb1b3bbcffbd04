import json

import pytest
from omegaconf import OmegaConf

from pods.config import DatasetConfig
from pods.data import DataError, load_examples
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


def write_bytes(path, data: bytes):
    path.write_bytes(data)
    return str(path)


GOOD = b'{"question": "1+1?", "answer": "2"}\n'


@pytest.mark.parametrize("data", [b"", b"\n\n  \n", b"\xef\xbb\xbf"])
def test_empty_file_is_a_clear_error(tmp_path, data):
    path = write_bytes(tmp_path / "d.jsonl", data)
    with pytest.raises(DataError, match=r"dataset.task=.*d.jsonl.*empty"):
        load_examples(dcfg(task=path), "train")


@pytest.mark.parametrize(
    "line, reason",
    [
        (b"\xff\xfe not utf-8", "not UTF-8"),
        (b'{"question": "q", "answer": ', "malformed JSON"),
        (b'["q", "a"]', "not a JSON object"),
        (b"42", "not a JSON object"),
        (b'{"question": "q"}', "no 'answer' field"),
        (b'{"answer": "a"}', "no 'question' field"),
        (b'{"question": 7, "answer": "a"}', "question is not a string"),
        (b'{"question": ["q"], "answer": "a"}', "question is not a string"),
        (b'{"question": "q", "answer": {"v": 1}}', "answer is not a string or a number"),
        (b'{"question": "q", "answer": true}', "answer is not a string or a number"),
        (b'{"question": "q", "answer": null}', "no answer"),
        (b'{"question": "  ", "answer": "1"}', "empty question"),
        (b'{"question": "1+1?", "answer": "2"}', "duplicate question"),
        (
            b'{"question": " 1+1?\\n", "answer": "3"}',
            "duplicate question",
        ),  # surrounding space does not count
    ],
)
def test_bad_lines_are_skipped_and_counted_or_refused(tmp_path, line, reason):
    path = write_bytes(tmp_path / "d.jsonl", GOOD + line + b"\n" + b'{"question": "2+2?", "answer": 4}\n')
    ex, rep = load_examples(dcfg(task=path, train_size=0), "train")
    assert [(e.question, e.answer) for e in ex] == [("1+1?", "2"), ("2+2?", "4")]
    assert rep.rows == 3 and rep.kept == 2 and rep.bad == {reason: 1}
    assert rep.first_bad[reason].endswith("d.jsonl line 2")
    with pytest.raises(DataError, match=r"d.jsonl line 2.*dataset.on_bad_rows=error"):
        load_examples(dcfg(task=path, train_size=0, on_bad_rows="error"), "train")


def test_bom_crlf_and_blank_lines_are_fine(tmp_path):
    data = (
        b"\xef\xbb\xbf" + GOOD.replace(b"\n", b"\r\n") + b"\n  \n" + b'{"question": "2+2?", "answer": 4.5}\n'
    )
    path = write_bytes(tmp_path / "d.jsonl", data)
    ex, rep = load_examples(dcfg(task=path, train_size=0, on_bad_rows="error"), "train")  # blank: not refused
    assert [(e.question, e.answer) for e in ex] == [("1+1?", "2"), ("2+2?", "4.5")]
    assert rep.bad == {"blank line": 2}


def test_many_copies_of_one_question_are_dropped_with_a_warning(tmp_path, caplog):
    rows = [{"question": "same?", "answer": "1"}] * 990 + [
        {"question": f"q{i}", "answer": "1"} for i in range(10)
    ]
    path = write_jsonl(tmp_path / "d.jsonl", rows)
    with caplog.at_level("WARNING", logger="pods"):
        ex, rep = load_examples(dcfg(task=path, train_size=0), "train")
    assert rep.rows == 1000 and rep.kept == len(ex) == 11 and rep.bad == {"duplicate question": 989}
    assert "duplicate question" in caplog.text
    with pytest.raises(DataError, match="duplicate question"):
        load_examples(dcfg(task=path, train_size=0, on_bad_rows="error"), "train")


def test_eval_file_errors_name_dataset_eval_task(tmp_path):
    train = write_jsonl(tmp_path / "t.jsonl", [{"question": "1+1?", "answer": "2"}])
    with pytest.raises(DataError, match=r"dataset.eval_task=.*nope.jsonl.*file not found"):
        load_examples(dcfg(task=train, eval_task=str(tmp_path / "nope.jsonl")), "eval")
    empty = write_bytes(tmp_path / "e.jsonl", b"")
    with pytest.raises(DataError, match=r"dataset.eval_task=.*e.jsonl.*empty"):
        load_examples(dcfg(task=train, eval_task=empty), "eval")
    only_train = write_jsonl(tmp_path / "e2.jsonl", [{"question": "1+1?", "answer": "2"}])
    with pytest.raises(DataError, match=r"dataset.eval_task=.*e2.jsonl.*no usable rows"):
        load_examples(dcfg(task=train, eval_task=only_train), "eval", exclude={"1+1?"})


def test_a_file_of_only_bad_lines_names_the_file(tmp_path):
    path = write_bytes(tmp_path / "d.jsonl", b"{oops\n\xff\n")
    with pytest.raises(DataError, match=r"dataset.task=.*d.jsonl.*no usable rows.*line 1"):
        load_examples(dcfg(task=path), "train")


def test_json_array_and_broken_parquet(tmp_path):
    path = tmp_path / "d.json"
    path.write_text(json.dumps([{"question": "1+1?", "answer": "2"}, "x"]))
    ex, rep = load_examples(dcfg(task=str(path)), "train")
    assert len(ex) == 1 and rep.bad == {"not a JSON object": 1}
    bad = write_bytes(tmp_path / "d.parquet", b"not parquet")
    with pytest.raises(DataError, match=r"dataset.task=.*d.parquet.*parquet"):
        load_examples(dcfg(task=bad), "train")


def word_tokenizer(bos: str | None = None):
    """A tokenizer of one token a word (and a BOS with add_special_tokens), called as a Hugging Face tokenizer
    is: on one text or a list of texts."""

    def tok(text, add_special_tokens=False):
        ids = lambda t: ([bos] if bos and add_special_tokens else []) + t.split()  # noqa: E731
        return {"input_ids": [ids(t) for t in text] if isinstance(text, list) else ids(text)}

    return tok


def test_kept_counts_prompts_left_after_the_length_filter():
    from pods.data.prompts import length_checked
    from pods.data.tasks import DataReport, Example

    tok = word_tokenizer()
    examples = [Example(0, "a b", "1"), Example(1, "a b c d", "2"), Example(2, "a", "3")]
    report = DataReport(split="train", rows=3, kept=3)
    prompts = length_checked(examples, lambda ex: ex.question, tok, 3, report, "skip").prompts
    assert prompts == ["a b", "a"] and report.kept == 2


def test_length_check_counts_the_special_tokens_rollout_adds():
    """Without a chat template rollout tokenizes with the tokenizer's special tokens (a BOS): the prompt
    budget must count them too, or a prompt at the limit overflows it by one."""
    from pods.data.prompts import length_checked
    from pods.data.tasks import DataReport, Example

    tok = word_tokenizer(bos="<bos>")
    examples = [Example(0, "a b c", "1"), Example(1, "a b", "2")]
    kept = length_checked(examples, lambda ex: ex.question, tok, 3, DataReport("train"), "skip", True)
    assert kept.prompts == ["a b"] and kept.report.bad == {"prompt longer than model.max_prompt_len=3": 1}
    plain = length_checked(examples, lambda ex: ex.question, tok, 3, DataReport("train"), "skip", False)
    assert plain.prompts == ["a b c", "a b"]


def test_token_counts_match_the_tokenizer_one_text_at_a_time():
    """The length filter encodes prompts a batch at a time; each count is the one encoding that text alone
    gives, across batch boundaries, with and without special tokens (the tiny policy's real tokenizer)."""
    import pods
    from pods.data.prompts import token_counts

    tok = pytest.importorskip("transformers").AutoTokenizer.from_pretrained(pods.ASSETS / "tiny")
    texts = ["", "1 + 2 =", "Ünïcödé  spaces\n\ttabs", "x" * 300, *(f"{i} * {i + 7} = ?" for i in range(20))]
    for special in (False, True):
        one_by_one = [len(tok(t, add_special_tokens=special)["input_ids"]) for t in texts]
        assert token_counts(texts, tok, special, batch=3) == one_by_one
