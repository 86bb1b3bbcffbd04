"""rollout.hf.decode_attention=flex (issue 38): the graph loop's decode steps run flex_attention over the cache
blocks filled so far instead of SDPA over the whole static cache. On a CPU (flex_attention computed densely,
float32) the tokens are SDPA's, greedy and seeded; on a GPU the kernel sums in another order, and the test
there counts the greedy tokens that differ."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from transformers import AutoModelForCausalLM

from pods.errors import ConfigError
from pods.rollout.attention import (
    DecodeBlockMask,
    decode_queries,
    flex_decode_refusal,
    flex_forward,
    register,
)
from pods.rollout.hf import HFGenerator, _raise_recompile_limit
from pods.rollout.step_graph import StepDecoder
from tests.conftest import random_qwen2
from tests.rollout.conftest import HEADLINE, SUMS, greedy_differences, headline_rollouts


@pytest.mark.parametrize("width", [20, 32, 37])  # a last partial block, whole blocks
@pytest.mark.parametrize(
    "h,hkv", [(4, 2), (14, 2), (12, 2), (3, 3)]
)  # grouped by enable_gqa, folded (7, 6), none
def test_block_mask_attends_what_the_tensor_mask_attends(width, h, hkv):
    """Random left padding and holes: flex_forward over the blocks up to the filled width equals SDPA with the
    (B, 1, 1, L) boolean mask, for every filled width, the same block mask updated in place; grouped query heads
    by enable_gqa or folded into the query length (decode_queries)."""
    g = torch.Generator().manual_seed(width)
    b, d = 5, 8
    q = torch.randn(b, h, 1, d, generator=g)
    k, v = torch.randn(2, b, hkv, width, d, generator=g)
    keep = torch.zeros(b, width, dtype=torch.bool)
    bm = DecodeBlockMask(keep, block=16, queries=decode_queries(h, hkv))
    assert bm.mask.seq_lengths == (h // hkv if h // hkv in (6, 7) else 1, width)
    start = torch.tensor([0, 3, 15, 16, 18])  # left padding: none, in the first block, a whole block and more
    bm.start_at(start)
    assert bm.first.flatten().tolist() == [0, 0, 0, 1, 1]
    assert bm.order[3, 0, 0].tolist() == [min(1 + j, bm.nblocks - 1) for j in range(bm.nblocks)]
    for filled in range(19, width + 1):
        keep.zero_()
        for r in range(b):
            keep[r, start[r] : filled] = True
        keep[1, start[1] + 1] = False  # a hole inside the filled part stays masked
        bm.fill_to(torch.tensor([filled]))
        # blocks from the first attendable one to filled - 1: their count, and which the compiled kernel visits
        # (the dense eager path below reads them all)
        want_counts = [-(-filled // 16) - int(s) // 16 for s in start]
        assert bm.counts.flatten().tolist() == want_counts
        visits = bm.mask.to_dense()[:, 0, 0].bool()  # (B, blocks)
        blocks = torch.arange(visits.shape[1])
        want_visits = (blocks >= start[:, None] // 16) & (blocks < -(-filled // 16))
        assert torch.equal(visits, want_visits), (filled, visits)
        got = flex_forward(q, k, v, bm.mask, None)  # (B, 1, H, D)
        want = F.scaled_dot_product_attention(q, k, v, attn_mask=keep[:, None, None, :], enable_gqa=True)
        torch.testing.assert_close(got, want.transpose(1, 2), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("sampling", [(0.0, 1.0, 0), (1.0, 0.9, 5)])
@pytest.mark.parametrize("heads,kv_heads", [(4, 2), (14, 2)])  # a group of 2 (enable_gqa), of 7 (folded)
def test_decoder_with_flex_decodes_the_same_tokens(sampling, heads, kv_heads):
    """Left padding, a finished row, a cache width that is not a multiple of the block: the same tokens as SDPA
    decode steps (greedy, and seeded sampling), run after run on one decoder and after release()."""
    m = random_qwen2(vocab=61, hidden=8 * heads, heads=heads, kv_heads=kv_heads).eval()
    m.config._attn_implementation = register()  # the generation copy's attention
    ids = torch.randint(3, 61, (6, 7), generator=torch.Generator().manual_seed(1))
    ids[0, :2] = 0
    am = (ids != 0).long()
    done = torch.zeros(6, dtype=torch.bool)
    done[5] = True
    plain = StepDecoder(m, rows=6, cache_len=21, eos_ids=[1], pad_id=0, capture=False)
    flex = StepDecoder(m, rows=6, cache_len=21, eos_ids=[1], pad_id=0, capture=False, attention="flex")
    for run in range(2):
        torch.manual_seed(7 + run)
        want = plain.run(ids, am, done, 14, sampling).clone()
        torch.manual_seed(7 + run)
        got = flex.run(ids, am, done, 14, sampling).clone()
        assert torch.equal(got, want)
        flex.release()
    with pytest.raises(ValueError, match="decode attention 'flash'"):
        StepDecoder(m, rows=6, cache_len=21, eos_ids=[1], pad_id=0, capture=False, attention="flash")
    m.config._attn_implementation = "sdpa"  # transformers' own: it would not know the block mask
    with pytest.raises(ValueError, match="runs inside 'pods_sdpa'; this model's attention is 'sdpa'"):
        StepDecoder(m, rows=6, cache_len=21, eos_ids=[1], pad_id=0, capture=False, attention="flex")


def test_flex_forward_refuses_what_the_block_mask_cannot_express():
    """A sliding window or soft-capping reaching the attention with a block mask, or a folded group with more
    than one query a row, is an error rather than another attention."""
    from pods.rollout.attention import grouped_sdpa_forward

    keep = torch.ones(2, 16, dtype=torch.bool)
    q, k, v = torch.randn(2, 4, 1, 8), torch.randn(2, 2, 16, 8), torch.randn(2, 2, 16, 8)
    mod = torch.nn.Module()
    mod.num_key_value_groups = 2
    bm = DecodeBlockMask(keep)
    bm.fill_to(torch.tensor([16]))
    with pytest.raises(ValueError, match="cannot apply {'sliding_window': 8}"):
        grouped_sdpa_forward(mod, q, k, v, bm.mask, sliding_window=8)
    grouped_sdpa_forward(mod, q, k, v, bm.mask, sliding_window=None)  # a full-attention layer's None is fine
    folded = DecodeBlockMask(keep, queries=6)  # a group of 3 heads x 2 queries
    with pytest.raises(ValueError, match="one query a row, got 2"):
        flex_forward(torch.randn(2, 6, 2, 8), k, v, folded.mask, None)


@pytest.mark.parametrize("temperature", [0.0, 0.9])
def test_headline_rollouts_are_the_same_with_flex(headline, temperature):
    """The shipped headline policy through the graph loop (eager on a CPU), 4 prompts x 4 rows, 24 new tokens:
    the same completions with flex decode attention, greedy and at the headline's temperature."""
    want = headline_rollouts(headline, "cpu", temperature, 4, new=24)
    got = headline_rollouts(headline, "cpu", temperature, 4, new=24, decode_attention="flex")
    assert got.texts == want.texts and torch.equal(got.input_ids, want.input_ids)
    assert temperature == 0.0 or len(set(got.texts)) > len(SUMS)  # sampled: the rows of a prompt differ


def test_flex_refuses_what_its_mask_cannot_express(headline, make_cfg):
    """A policy on another attention, or with sliding-window layers, cannot take the flex decode: said when the
    config is checked, and by the generator before it copies the policy."""
    from transformers import MistralConfig, Qwen2Config

    from pods.train import preflight

    with pytest.raises(ConfigError, match="hardware.attn_implementation=eager"):
        preflight(make_cfg("rollout.hf.decode_attention=flex", "hardware.attn_implementation=eager"))
    with pytest.raises(ConfigError, match="rollout.hf.decode_attention"):
        preflight(make_cfg("rollout.hf.decode_attention=fast"))
    with pytest.raises(ConfigError, match="use rollout.hf.loop=graph"):
        preflight(make_cfg("rollout.hf.decode_attention=flex", "rollout.hf.loop=generate"))
    model, tok = headline
    eager = AutoModelForCausalLM.from_pretrained(HEADLINE, dtype=torch.float32, attn_implementation="eager")
    with pytest.raises(ConfigError, match="cannot decode this policy: attention 'eager': only sdpa"):
        HFGenerator(eager, tok, "cpu", 8, 4, compiled=True, max_prompt_len=128, decode_attention="flex")
    own = {k: v for k, v in model.config.to_dict().items() if k != "layer_types"}
    cfg = Qwen2Config(**{**own, "use_sliding_window": True, "sliding_window": 16, "max_window_layers": 0})
    assert cfg.layer_types == ["sliding_attention"] * 6  # transformers derives the layers' types
    windowed = AutoModelForCausalLM.from_config(cfg)
    with pytest.raises(ConfigError, match="layer types \\['sliding_attention'\\]: only full attention"):
        HFGenerator(windowed, tok, "cpu", 8, 4, compiled=True, max_prompt_len=128, decode_attention="flex")
    HFGenerator(windowed, tok, "cpu", 8, 4, compiled=True, max_prompt_len=128)  # SDPA decodes it
    mistral_like = MistralConfig(sliding_window=16, attn_implementation="sdpa")  # a window, no layer types
    assert flex_decode_refusal(mistral_like) == "sliding_window=16: only full attention"


def test_flex_without_the_graph_loop_says_it_does_nothing(headline, caplog):
    """rollout.hf.compile=auto on a CPU decodes with generate(): the switch is inert there, and says so."""
    model, tok = headline
    with caplog.at_level("WARNING", logger="pods.rollout.hf"):
        HFGenerator(model, tok, "cpu", 8, 4, compiled=False, max_prompt_len=128, decode_attention="flex")
    assert "rollout.hf.decode_attention=flex has no effect here" in caplog.text


@pytest.mark.gpu
def test_headline_greedy_tokens_with_flex_on_cuda(headline):
    """CUDA (bf16, compiled, captured): flex_attention sums in another order than cuDNN's SDPA. Greedy rows of one
    prompt must stay identical to each other, and the printed count says how many greedy tokens differ."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    want = headline_rollouts(headline, "cuda", 0.0, 64)
    got = headline_rollouts(headline, "cuda", 0.0, 64, decode_attention="flex")
    print(f"decode_attention=flex on CUDA: {greedy_differences(want, got, 64)}")


@pytest.mark.gpu
@pytest.mark.parametrize("heads,kv_heads,head_dim", [(14, 2, 64), (12, 2, 128), (28, 4, 128)])
def test_flex_decode_on_cuda_at_hub_attention_shapes(heads, kv_heads, head_dim):
    """The attention shapes of Qwen2.5-0.5B, 1.5B and 7B (2 random layers each; 3B's and the headline's run in
    the benchmarks): the compiled flex kernel equals SDPA within bf16 rounding on a block mask like the
    decoder's, and the graph loop with it compiles, captures and decodes; the printed count says how many greedy
    tokens differ from SDPA decode steps (a random model's logits are nearly flat: ties break either way)."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    _raise_recompile_limit(64)  # every decoder here compiles StepDecoder._forward again (as HFGenerator does)
    g = torch.Generator(device="cuda").manual_seed(heads)
    rows, width, lp, new = 64, 80, 24, 48
    q = torch.randn(rows, heads, 1, head_dim, device="cuda", dtype=torch.bfloat16, generator=g)
    k, v = torch.randn(2, rows, kv_heads, width, head_dim, device="cuda", dtype=torch.bfloat16, generator=g)
    keep = torch.zeros(rows, width, dtype=torch.bool, device="cuda")
    keep[:, 20:57] = True  # left padding: 20 columns, and 37 in every third row (blocks 0, and 0-1, skipped)
    keep[::3, 20:37] = False
    bm = DecodeBlockMask(keep, queries=decode_queries(heads, kv_heads))  # as the decoder makes it
    bm.start_at(keep.long().argmax(1))
    bm.fill_to(torch.tensor([57], device="cuda"))
    got = torch.compile(flex_forward, dynamic=False)(q, k, v, bm.mask, None)
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=keep[:, None, None, :], enable_gqa=True)
    torch.testing.assert_close(got, want.transpose(1, 2), rtol=2e-2, atol=2e-2)

    m = random_qwen2(vocab=512, hidden=heads * head_dim, heads=heads, kv_heads=kv_heads)
    m = m.to("cuda", torch.bfloat16).eval()
    m.config._attn_implementation = register()
    ids = torch.randint(3, 512, (rows, lp), device="cuda", generator=g)
    ids[::3, :6] = 0
    am = (ids != 0).long()
    done = torch.zeros(rows, dtype=torch.bool, device="cuda")
    out = {}
    for attention in ("sdpa", "flex"):
        dec = StepDecoder(m, rows, lp + new, eos_ids=[1], pad_id=0, capture=True, attention=attention)
        out[attention] = dec.run(ids, am, done, new, (0.0, 1.0, 0), check_every=16).clone()
    assert out["flex"].shape == out["sdpa"].shape == (rows, new)
    assert torch.equal(out["flex"][:, 0], out["sdpa"][:, 0])  # the prefill's token: SDPA in both
    differ = int((out["flex"] != out["sdpa"]).sum())
    print(f"flex decode at {heads}/{kv_heads} heads x {head_dim}: {differ} of {out['flex'].numel()} greedy tokens "
          f"differ from SDPA's, in {int((out['flex'] != out['sdpa']).any(1).sum())} of {rows} rows")  # fmt: skip
