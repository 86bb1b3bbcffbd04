"""Shared by the rollout tests that compare two graph-loop settings on the shipped headline policy
(test_share_prefill.py, test_decode_attention.py): the policy, its rollouts under a setting, and how many greedy
tokens two CUDA runs disagree on."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

HEADLINE = Path(__file__).resolve().parents[2] / "pods" / "assets" / "headline"
SUMS = ["12 + 7 + 301 =\n", "3 + 45 + 8 + 990 =\n", "60 + 1 =\n", "512 + 77 + 6 =\n"]


@pytest.fixture(scope="module")
def headline():
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(HEADLINE)
    model = AutoModelForCausalLM.from_pretrained(HEADLINE, dtype=torch.float32).eval()
    return model, tok


def headline_rollouts(
    headline, device: str, temperature: float, n: int, seed: int = 3, new: int = 96, **knobs
):
    """SUMS x n rollouts of the headline policy through the graph loop (compiled and captured on CUDA in bf16,
    eager on a CPU in float32), with the HFGenerator knobs given (e.g. share_prefill=True)."""
    from pods.rollout.hf import HFGenerator

    model, tok = headline
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    g = HFGenerator(
        model.to(device), tok, device, 512, new, compiled=True, dtype=dtype, max_prompt_len=128,
        release_cache=True, **knobs,
    )  # fmt: skip
    torch.manual_seed(seed)
    return g.generate(SUMS, list(range(len(SUMS))), n, temperature)


def greedy_differences(want, got, n: int, at_most: float = 0.01) -> str:
    """Two greedy rollouts of SUMS x n -> "D of T greedy tokens differ, in R of B rows" (completion tokens of
    either run). Asserts that the n rows of each prompt are identical within each run, as greedy rows must be,
    and that at most `at_most` of the tokens differ: a change of rounding flips a near-tie now and then (the
    trained headline policy: 0 of 7,616 on an H200), a wrong attention makes most rows differ."""
    mask = want.completion_mask.bool() | got.completion_mask.bool()
    differ, total = (
        int(((want.input_ids != got.input_ids)[:, want.prompt_len :] & mask).sum()),
        int(mask.sum()),
    )
    rows = int(((want.input_ids != got.input_ids).any(1)).sum())
    for texts in (got.texts, want.texts):
        assert all(len(set(texts[i : i + n])) == 1 for i in range(0, len(texts), n))
    said = f"{differ} of {total} greedy tokens differ, in {rows} of {len(want.texts)} rows"
    assert differ <= at_most * total, said
    return said
