"""rollout.hf.share_prefill (issue 38): each distinct prompt of a chunk is prefilled once and its keys and values
copied to the rows that repeat it. On a CPU the tokens are those of a prefill per row, greedy and seeded; on a GPU
the prompt's forward runs at another batch size, and the test there counts the greedy tokens that differ."""

from __future__ import annotations

import pytest
import torch

from pods.rollout.step_graph import StepDecoder, shared_prompts
from tests.conftest import random_qwen2
from tests.rollout.conftest import SUMS, greedy_differences, headline_rollouts


def test_shared_prompts_finds_runs_of_identical_rows():
    ids = torch.tensor([[0, 5, 6], [0, 5, 6], [7, 5, 6], [7, 5, 6], [0, 5, 6]])
    am = torch.tensor([[0, 1, 1], [0, 1, 1], [1, 1, 1], [1, 1, 1], [0, 1, 1]])
    firsts, src = shared_prompts(ids, am)
    assert firsts.tolist() == [0, 2, 4] and src.tolist() == [0, 0, 1, 1, 2]  # runs only: row 4 is its own
    am[1, 0] = 1  # same ids, another mask: another prompt
    assert shared_prompts(ids, am)[1].tolist() == [0, 1, 2, 2, 3]
    assert shared_prompts(ids[:1], am[:1]) is None and shared_prompts(ids[1:3], am[1:3]) is None


@pytest.mark.parametrize("sampling", [(0.0, 1.0, 0), (1.0, 0.9, 5)])
def test_decoder_with_a_shared_prefill_decodes_the_same_tokens(sampling):
    """Left padding, a finished row, prompts repeated 3 times: the same tokens (greedy, and seeded sampling:
    the prefill's draw is still one per row) as a prefill of every row, run after run on one decoder."""
    m = random_qwen2(vocab=61, hidden=32, heads=4, kv_heads=2).eval()
    base = torch.randint(3, 61, (2, 7))
    base[0, :2] = 0
    ids = base.repeat_interleave(3, 0)
    am = (ids != 0).long()
    done = torch.zeros(6, dtype=torch.bool)
    done[5] = True
    plain = StepDecoder(m, rows=6, cache_len=20, eos_ids=[1], pad_id=0, capture=False)
    shared = StepDecoder(m, rows=6, cache_len=20, eos_ids=[1], pad_id=0, capture=False)
    for run in range(2):
        torch.manual_seed(7 + run)
        want = plain.run(ids, am, done, 10, sampling).clone()
        torch.manual_seed(7 + run)
        got = shared.run(ids, am, done, 10, sampling, shared=shared_prompts(ids, am)).clone()
        assert torch.equal(got, want)
        for a, b in zip(plain._cache_tensors(), shared._cache_tensors()):
            assert torch.equal(a, b)  # the same cache after decoding, prompt columns included
        shared.release()  # and again after the cache was freed


@pytest.mark.parametrize("temperature", [0.0, 0.9])
def test_headline_rollouts_are_the_same_with_a_shared_prefill(headline, temperature):
    """The shipped headline policy through the graph loop (eager on a CPU), 4 prompts x 4 rows in one chunk,
    24 new tokens: the same completions, greedy and at the headline's temperature under a fixed seed."""
    want = headline_rollouts(headline, "cpu", temperature, 4, new=24)
    got = headline_rollouts(headline, "cpu", temperature, 4, new=24, share_prefill=True)
    assert got.texts == want.texts and torch.equal(got.input_ids, want.input_ids)
    assert temperature == 0.0 or len(set(got.texts)) > len(SUMS)  # sampled: the rows of a prompt differ


@pytest.mark.gpu
def test_headline_greedy_tokens_with_a_shared_prefill_on_cuda(headline):
    """CUDA (bf16, compiled, captured): the prompt's forward at 4 rows instead of 256 may round differently.
    Greedy rows of one prompt must stay identical to each other (the shared cache is one cache), and the
    printed count says how many greedy tokens differ from a prefill per row."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    want = headline_rollouts(headline, "cuda", 0.0, 64)
    got = headline_rollouts(headline, "cuda", 0.0, 64, share_prefill=True)
    print(f"share_prefill on CUDA: {greedy_differences(want, got, 64)}")


def test_training_with_a_shared_prefill_matches_and_resumes_bitwise(make_cfg, tmp_path):
    """The Trainer on the graph loop (rollout.hf.compile=true, eager on a CPU), PODS 8/4: 4 steps with the
    prefill shared give the records and weights of 4 steps without it, and so do 2 steps, a checkpoint and a
    resume to 4."""
    from pods import checkpoint as ckpt
    from pods.tracking import read_metrics
    from pods.train import run
    from tests.conftest import SAME_RUN_KEYS, SMOKE

    common = [*SMOKE, "selector=max_variance", "eval.at_end=false", "rollout.hf.compile=true"]
    on = "rollout.hf.share_prefill=true"
    dirs = {k: tmp_path / k for k in ("off", "on", "resumed")}
    run(make_cfg(*common, "max_steps=4", run_dir=dirs["off"]))
    run(make_cfg(*common, on, "max_steps=4", run_dir=dirs["on"]))
    run(make_cfg(*common, on, "max_steps=2", run_dir=dirs["resumed"]))
    run(make_cfg(*common, on, "max_steps=4", "resume=true", run_dir=dirs["resumed"]))
    recs = {
        k: [r for r in read_metrics(d / "metrics.jsonl") if r["kind"] == "train"] for k, d in dirs.items()
    }
    assert [r["step"] for r in recs["resumed"]] == [1, 2, 3, 4]
    for k in ("on", "resumed"):
        for x, y in zip(recs["off"], recs[k], strict=True):
            assert all(x.get(key) == y.get(key) for key in SAME_RUN_KEYS), (k, x["step"])
    weights = {k: ckpt.read_weights(ckpt.latest_checkpoint(d / "checkpoints")) for k, d in dirs.items()}
    for k in ("on", "resumed"):
        assert all(torch.equal(weights["off"][n], weights[k][n]) for n in weights["off"])
