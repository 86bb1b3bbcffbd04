"""The graph decode loop's pieces, on a CPU (no compile, no capture): its sampler draws what
torch.multinomial draws, its masks, and its decode state against transformers' generate()."""

from __future__ import annotations

import pytest
import torch

from pods.rollout.step_graph import StepDecoder, exponential_race, pick, prefill_mask, warp
from tests.conftest import random_qwen2


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_exponential_race_draws_what_multinomial_draws(dtype):
    probs = torch.softmax(torch.randn(32, 500, dtype=dtype) * 3, -1)
    probs[:, :100] = 0  # zero-probability tokens are never drawn
    for seed in range(5):
        torch.manual_seed(seed)
        want = torch.multinomial(probs, 1).squeeze(1)
        torch.manual_seed(seed)
        got = exponential_race(probs)
        assert torch.equal(want, got)
        assert bool((got >= 100).all())


def test_warp_applies_temperature_then_top_k_then_top_p():
    """After top-k 3 the softmax of (4, 3, 2) is (0.665, 0.245, 0.090): top-p 0.5 keeps the first token,
    top-p 0.8 the first two; at temperature 2 it is (0.506, 0.307, 0.186), so top-p 0.85 keeps three (0.506 + 0.307 < 0.85)."""
    logits = torch.tensor([[4.0, 3.0, 2.0, 1.0, 0.0]])
    kept = lambda t, p, k: torch.isfinite(warp(logits, t, p, k))[0].tolist()  # noqa: E731
    assert kept(1.0, 0.5, 3) == [True, False, False, False, False]
    assert kept(1.0, 0.8, 3) == [True, True, False, False, False]
    assert kept(2.0, 0.85, 3) == [True, True, True, False, False]
    assert kept(2.0, 0.8, 3) == [True, True, False, False, False]
    assert kept(1.0, 1.0, 0) == [True] * 5
    assert torch.equal(warp(logits, 2.0, 1.0, 0), logits / 2)


def test_greedy_pick_is_argmax():
    logits = torch.randn(4, 50)
    assert torch.equal(pick(logits, 0.0, 1.0, 0), logits.argmax(-1))


def test_prefill_mask_rows_attend_only_real_earlier_tokens():
    keep = torch.tensor([[0, 0, 1, 1, 0, 0], [1, 1, 1, 1, 0, 0]])  # a cache of 6 columns, prompts of 4
    m = prefill_mask(keep, 4)[:, 0]
    assert m.shape == (2, 4, 6)
    assert m[1].tolist() == torch.ones(4, 6).tril().bool().tolist()
    assert m[0, 3].tolist() == [False, False, True, True, False, False]
    assert m[0, 0].tolist() == [True] + [False] * 5  # padding attends itself only


def test_decoder_matches_generate_and_reuses_its_buffers():
    """Greedy, left padding, one row finished from the start; a second run on the same decoder (buffers and
    cache reset) gives the same tokens."""
    m = random_qwen2(vocab=61, hidden=32, heads=4, kv_heads=2).eval()
    ids = torch.randint(3, 61, (3, 7))
    am = torch.ones_like(ids)
    am[0, :3] = 0
    ids[0, :3] = 0
    want = m.generate(
        input_ids=ids, attention_mask=am, do_sample=False, max_new_tokens=6, pad_token_id=0, eos_token_id=[1],
        temperature=None, top_p=None, top_k=None,
    )[:, 7:]  # fmt: skip
    dec = StepDecoder(m, rows=3, cache_len=16, eos_ids=[1], pad_id=0, capture=False)
    done = torch.zeros(3, dtype=torch.bool)
    for _ in range(2):
        got = dec.run(ids, am, done, 6, (0.0, 1.0, 0)).clone()
        assert torch.equal(got, want[:, : got.shape[1]]) and got.shape[1] == 6
    done[2] = True
    got = dec.run(ids, am, done, 6, (0.0, 1.0, 0))
    assert (got[2] == 0).all() and torch.equal(got[:2], want[:2])
    with pytest.raises(ValueError, match="do not fit"):
        dec.run(ids, am, done, 10, (0.0, 1.0, 0))


def test_release_frees_the_cache_and_the_next_run_decodes_the_same():
    """release() leaves the cache tensors with no storage; the next run gives it back (zeroed by the reset)
    and decodes exactly what a decoder that never released does, greedy and seeded."""
    m = random_qwen2(vocab=61, hidden=32, heads=4, kv_heads=2).eval()
    ids = torch.randint(3, 61, (2, 5))
    am = torch.ones_like(ids)
    done = torch.zeros(2, dtype=torch.bool)
    kept = StepDecoder(m, rows=2, cache_len=12, eos_ids=[1], pad_id=0, capture=False)
    freed = StepDecoder(m, rows=2, cache_len=12, eos_ids=[1], pad_id=0, capture=False)
    for sampling in [(0.0, 1.0, 0), (1.0, 0.9, 0), (0.0, 1.0, 0)]:
        torch.manual_seed(3)
        want = kept.run(ids, am, done, 6, sampling).clone()
        torch.manual_seed(3)
        got = freed.run(ids, am, done, 6, sampling).clone()
        assert torch.equal(got, want)
        tensors = freed._cache_tensors()
        assert tensors and all(t.untyped_storage().nbytes() > 0 for t in tensors)
        freed.release()
        assert freed.released and all(t.untyped_storage().nbytes() == 0 for t in tensors)
        assert not freed.graphs


def test_release_before_any_run_is_harmless():
    m = random_qwen2(vocab=61, hidden=32, heads=4, kv_heads=2).eval()
    dec = StepDecoder(m, rows=1, cache_len=8, eos_ids=[1], pad_id=0, capture=False)
    dec.release()  # no cache tensors yet (made at the first prefill)
    ids = torch.randint(3, 61, (1, 3))
    assert dec.run(ids, torch.ones_like(ids), torch.zeros(1, dtype=torch.bool), 4, (0.0, 1.0, 0)).shape == (
        1,
        4,
    )


def test_phase_seconds_split_a_run_and_change_no_token():
    """With phase_seconds on, run() records its parts and the tokens decoded; the tokens are those of a run
    without it (the timing only adds device synchronisation)."""
    m = random_qwen2(vocab=61, hidden=32, heads=4, kv_heads=2).eval()
    ids = torch.randint(3, 61, (2, 5))
    am, done = torch.ones_like(ids), torch.zeros(2, dtype=torch.bool)
    dec = StepDecoder(m, rows=2, cache_len=12, eos_ids=[1], pad_id=0, capture=False)
    torch.manual_seed(5)
    want = dec.run(ids, am, done, 6, (1.0, 1.0, 0)).clone()
    assert dec.phase_seconds is None
    dec.release()
    dec.phase_seconds = {}
    torch.manual_seed(5)
    got = dec.run(ids, am, done, 6, (1.0, 1.0, 0))
    assert torch.equal(got, want)
    parts = dec.phase_seconds
    assert parts["steps"] == got.shape[1] == 6
    assert {"reclaim", "prefill", "eager", "replay"} <= set(parts) and "capture" not in parts  # no CUDA
    assert all(v >= 0 for v in parts.values()) and parts["prefill"] > 0 and parts["eager"] > 0


def test_release_retires_the_last_runs_graphs_only():
    """release() keeps the graphs the last run used (their pools, for the next capture of the same sampling
    setting to share; stand-ins here: a CPU captures nothing) and lets graphs retired earlier go; a run that
    captured nothing keeps what was retired."""
    torch.manual_seed(0)
    m = random_qwen2(vocab=32, layers=1, hidden=16, heads=2, kv_heads=1).eval()
    dec = StepDecoder(m, rows=1, cache_len=8, eos_ids=[1], pad_id=0, capture=False)
    train, evaluate = object(), object()
    dec.graphs = {(1.0, 1.0, 0): train}
    dec.release()
    assert dec.graphs == {} and dec.retired == {(1.0, 1.0, 0): train}
    dec.graphs = {(0.0, 1.0, 0): evaluate}  # the next run sampled otherwise
    dec.release()
    assert dec.retired == {(0.0, 1.0, 0): evaluate}  # the train graph's pool is no longer held
    dec.release()  # nothing captured since
    assert dec.retired == {(0.0, 1.0, 0): evaluate}
