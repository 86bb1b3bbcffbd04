"""The held-out hard eval of headline v4 (data/arithmetic_hard/eval_2k.jsonl): size, disjointness from what
the shipped policy saw or was chosen on, correct answers, and that its command remakes it byte for byte."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EVAL = ROOT / "data/arithmetic_hard/eval_2k.jsonl"
SEEN = (
    "data/arithmetic_hard/train.jsonl",
    "data/arithmetic_hard_sft/train.jsonl",
    "data/arithmetic_hard/eval.jsonl",
)


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_size_and_no_repeats():
    qs = [r["question"] for r in rows(EVAL)]
    assert len(qs) >= 2000
    assert len(set(qs)) == len(qs)


@pytest.mark.parametrize("other", SEEN)
def test_disjoint_from_what_the_policy_saw(other):
    seen = {r["question"] for r in rows(ROOT / other)}
    assert seen, other
    assert not seen & {r["question"] for r in rows(EVAL)}


def test_answers_are_the_sums():
    for r in rows(EVAL):
        expr = r["question"].rsplit(":", 1)[1].rstrip("= ").strip()
        terms = re.findall(r"([+-]?)\s*(\d+)", expr)
        assert 3 <= len(terms) <= 5, expr
        assert int(r["answer"]) == sum(int(n) * (-1 if s == "-" else 1) for s, n in terms), expr


def test_helper_keeps_first_new_unrepeated():
    sys.path.insert(0, str(ROOT))
    from scripts.export_hard_eval import held_out

    drawn = [("a", "1"), ("b", "2"), ("a", "1"), ("c", "3"), ("d", "4")]
    assert held_out(drawn, {"b"}, 2) == [("a", "1"), ("c", "3")]
    with pytest.raises(SystemExit, match="only 3 new questions"):
        held_out(drawn, {"b"}, 4)


def test_command_remakes_the_file(tmp_path):
    pytest.importorskip("reasoning_gym")
    out = tmp_path / "eval.jsonl"
    subprocess.run(
        [sys.executable, "scripts/export_hard_eval.py", "--out", str(out)],
        cwd=ROOT,
        check=True,
        capture_output=True,
    )
    assert out.read_bytes() == EVAL.read_bytes()
