"""Issue 38: the HF backend's detokenize (pods/rollout/hf.py: decode_completions) gives exactly the texts of
`tokenizer.batch_decode(completions, skip_special_tokens=True)`, which it replaces: on edge-case batches (empty
completions, no stop token, unicode cut mid-character, repeated rows, special tokens inside, no columns), on
random ids, through its fallback, and on the rollouts of the shipped headline policy, greedy and sampled."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from pods.rollout import hf
from pods.rollout.hf import HFGenerator, decode_completions

ASSETS = Path(__file__).resolve().parents[2] / "pods" / "assets"
TEXTS = ["<think>12+7=19</think><answer>19</answer>", "<answer>-1,000</answer>", "<answer> 1 000 </answer>",
         "héllo − ∑ 😀 中文", "\n\n  spaces  ", "<answer>−7</answer>"]  # fmt: skip


@pytest.fixture(scope="module", params=["tiny", "headline"])
def tok(request):
    return AutoTokenizer.from_pretrained(ASSETS / request.param)


def edge_batch(tok) -> torch.Tensor:
    """(B, L) completions padded after their stop, as HFGenerator.generate hands them to detokenize."""
    eos, pad = tok.eos_token_id, tok.pad_token_id
    rows = [tok.encode(t, add_special_tokens=False) for t in TEXTS]
    emoji = tok.encode("😀", add_special_tokens=False)
    rows += [
        [eos],  # an empty completion: the first token is the stop
        rows[0] + [eos],  # a stop after text
        rows[3],  # no stop: the whole width
        rows[3][:-1],  # cut inside a character
        emoji[:1] + [eos],  # only the first byte of a four-byte character
        rows[1][:2] + [pad] + rows[1][2:],  # a special token inside a completion
        [],  # nothing at all (all padding)
    ]
    rows += [rows[0] + [eos]] * 5 + [rows[6]] * 3  # n samples of a prompt repeat
    width = max(len(r) for r in rows)
    return torch.tensor([r + [pad] * (width - len(r)) for r in rows])


def test_edge_cases_decode_as_batch_decode(tok):
    comp = edge_batch(tok)
    want = tok.batch_decode(comp, skip_special_tokens=True)
    assert hf._rust_decoder(tok) is not None  # the fast path is what this test checks
    assert decode_completions(tok, comp) == want
    assert "�" in "".join(want) and "" in want and "😀" in "".join(want)  # the batch holds what it says


def test_random_ids_decode_as_batch_decode(tok):
    gen = torch.Generator().manual_seed(0)
    comp = torch.randint(0, len(tok), (64, 40), generator=gen)
    comp[32:] = comp[:32]  # repeats
    assert decode_completions(tok, comp) == tok.batch_decode(comp, skip_special_tokens=True)


def test_no_columns_and_the_fallback_decode_as_batch_decode(tok):
    empty = torch.zeros(3, 0, dtype=torch.long)
    assert decode_completions(tok, empty) == tok.batch_decode(empty, skip_special_tokens=True) == [""] * 3
    other = copy.deepcopy(tok)
    other.clean_up_tokenization_spaces = True  # transformers may post-process: the fallback path
    assert hf._rust_decoder(other) is None
    comp = edge_batch(other)
    assert decode_completions(other, comp) == other.batch_decode(comp, skip_special_tokens=True)


@pytest.mark.parametrize("temperature", [0.0, 0.9])
def test_headline_rollouts_are_the_texts_of_their_tokens(temperature):
    """The shipped headline policy on hard sums (4 prompts x 8, seeded): the texts of generate() are
    batch_decode's of its tokens, and its tokens those of a generator that detokenizes as before."""
    path = ASSETS / "headline"
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    root = Path(__file__).resolve().parents[2]
    rows = [json.loads(x) for x in (root / "data/arithmetic_hard/train.jsonl").read_text().splitlines()[:4]]
    prompts = [r["question"] + "\n" for r in rows]
    out = []
    for before in (False, True):
        g = HFGenerator(model, tok, "cpu", 32, 48)
        if before:  # the detokenize issue 38 replaced
            g.detokenize = lambda comp: tok.batch_decode(comp, skip_special_tokens=True)
        torch.manual_seed(0)
        out.append(g.generate(prompts, [0, 1, 2, 3], 8, temperature))
    new, old = out
    assert torch.equal(new.input_ids, old.input_ids) and new.texts == old.texts
    comp = new.input_ids[:, new.prompt_len :]
    assert new.texts == tok.batch_decode(comp, skip_special_tokens=True)
    assert len(set(new.texts)) < len(new.texts)  # repeats, which are decoded once
