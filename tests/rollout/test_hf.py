"""The hf rollout backend: the compiled path (generation copy, static cache, fixed shapes) against the
dynamic one on the tiny model. On a CPU transformers does not compile, so these tests check everything
but the compiler itself: shapes, padding rows, the cache, the copy's weights, the random streams."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from pods.rollout.hf import HFGenerator, bucketed_len, chunk_rows
from pods.timing import PhaseTimer
from tests.conftest import random_qwen2

TINY = Path(__file__).resolve().parents[2] / "pods" / "assets" / "tiny"
PROMPTS = ["12 + 7 =\n", "3 - 45 + 8 =\n", "60 + 1 =\n"]


@pytest.fixture(scope="module")
def tiny():
    tok = AutoTokenizer.from_pretrained(TINY)
    tok.pad_token = tok.pad_token or tok.eos_token
    model = AutoModelForCausalLM.from_pretrained(TINY, dtype=torch.float32).eval()
    return model, tok


def gen(tiny, compiled: bool, batch_size: int = 256, timer=None, **kw) -> HFGenerator:
    """loop="graph-release": the graph loop freeing its caches and graphs after every generate call."""
    model, tok = tiny
    if kw.get("loop") == "graph-release":
        kw.update(loop="graph", release_cache=True)
    return HFGenerator(
        model,
        tok,
        "cpu",
        batch_size,
        24,
        compiled=compiled,
        dtype=torch.float32,
        prompt_bucket=16,
        max_prompt_len=64,
        timer=timer,
        **kw,
    )


def test_shape_helpers():
    assert [bucketed_len(n, 64, 512) for n in (1, 64, 65, 511, 600)] == [64, 64, 128, 512, 600]
    assert [chunk_rows(n, 256) for n in (1, 2, 3, 16, 17, 256, 999)] == [1, 2, 4, 16, 32, 256, 256]


LOOPS = pytest.mark.parametrize("loop", ["generate", "graph", "graph-release"])


@LOOPS
@pytest.mark.parametrize("fit", [False, True], ids=["widest-cache", "cache-fits-prompt"])
def test_greedy_is_token_identical_to_the_dynamic_cache(tiny, fit, loop):
    dyn = gen(tiny, compiled=False).generate(PROMPTS, [0, 1, 2], 1, 0.0)
    g = gen(tiny, compiled=True, size_cache_to_prompt=fit, loop=loop)
    assert g._gen_kwargs(0.0, 1.0, 0, 16)["max_cache_len"] == (16 if fit else 64) + 24
    fast = g.generate(PROMPTS, [0, 1, 2], 1, 0.0)  # 3 rows -> a chunk of 4
    assert fast.texts == dyn.texts
    assert fast.prompt_len == 16 and dyn.prompt_len < 16  # bucketed prompt width
    assert torch.equal(fast.completion_mask, dyn.completion_mask)
    lp_d, lp_f = dyn.prompt_len, fast.prompt_len
    assert torch.equal(fast.input_ids[:, lp_f:], dyn.input_ids[:, lp_d:])  # the same completion tokens
    assert torch.equal(fast.attention_mask[:, lp_f - lp_d :], dyn.attention_mask)  # only more left padding


@LOOPS
@pytest.mark.parametrize("sampling", [(1.0, 1.0, 0), (0.7, 0.9, 5)], ids=["plain", "warped"])
def test_sampled_outputs_match_under_a_fixed_seed(tiny, loop, sampling):
    """Without filler rows both paths draw the same random numbers in the same order: the warm-up of a new
    shape restores the random streams, so it draws nothing."""
    out = []
    t, top_p, top_k = sampling
    for compiled in (False, True):
        torch.manual_seed(123)
        g = gen(tiny, compiled, batch_size=8, loop=loop)
        out.append(g.generate(PROMPTS[:2], [0, 1], 4, t, top_p=top_p, top_k=top_k).texts)
    assert out[0] == out[1]
    assert len(set(out[0])) > 1  # really sampled


@LOOPS
def test_filler_rows_stop_at_once_and_are_dropped(tiny, loop):
    g = gen(tiny, compiled=True, batch_size=8, loop=loop)
    r = g.generate(PROMPTS, [0, 1, 2], 2, 1.0)  # 6 rows -> one chunk of 8
    assert len(r.texts) == 6 and r.input_ids.shape[0] == 6
    assert {k[:2] for k in g.warm_shapes} == {(8, 16)}


@LOOPS
def test_compile_warm_up_is_timed_outside_the_training_clock(tiny, loop):
    timer = PhaseTimer()
    g = gen(tiny, compiled=True, batch_size=4, timer=timer, loop=loop)
    with timer.phase("generation"):
        g.generate(PROMPTS[:1], [0], 4, 1.0)
    times = timer.pop_step()
    # compile_seconds' clock brackets the compile phase's (a few statements apart, whatever the machine's load)
    assert 0 < times["timing/compile"] <= g.compile_seconds
    assert timer.train_clock == pytest.approx(times["timing/generation"])
    assert times["timing/step"] == pytest.approx(times["timing/generation"])
    with timer.phase("generation"):  # same shape: no second warm-up (a released cache is not a new shape)
        g.generate(PROMPTS[1:2], [1], 4, 1.0)
    assert "timing/compile" not in timer.pop_step()
    assert all(d.released == g.release_cache for d in g.step_decoders.values())


def test_nested_phases_count_once(monkeypatch):
    import pods.timing

    clock = SimpleNamespace(now=0.0)  # pods.timing's clock moves only where the test says
    monkeypatch.setattr(pods.timing, "time", SimpleNamespace(perf_counter=lambda: clock.now))
    timer = PhaseTimer()
    with timer.phase("generation"):
        clock.now += 0.02
        with timer.phase("compile"):
            clock.now += 0.05
    t = timer.pop_step()
    assert t["timing/compile"] == pytest.approx(0.05) and t["timing/generation"] == pytest.approx(0.02)
    assert timer.train_clock == pytest.approx(t["timing/generation"])


def test_generation_copy_follows_the_policy(tiny):
    model, tok = tiny
    policy = AutoModelForCausalLM.from_pretrained(TINY, dtype=torch.float32)
    g = HFGenerator(policy, tok, "cpu", 8, 8, compiled=True, dtype=torch.bfloat16, max_prompt_len=64)
    copy = dict(g.decoder.named_parameters())
    assert all(p.dtype == torch.bfloat16 for p in copy.values())
    with torch.no_grad():
        for p in policy.parameters():
            p.add_(0.01)
    g.sync_weights(policy)
    for name, p in policy.named_parameters():
        assert torch.equal(copy[name], p.detach().to(torch.bfloat16)), name
    assert dict(g.decoder.named_parameters())[name].data_ptr() == copy[name].data_ptr()  # updated in place


@pytest.mark.parametrize(
    "lora_kw",
    [
        {"target_modules": ["q_proj", "up_proj"]},
        {"target_modules": ["q_proj", "lm_head"]},  # an adapter on the tied head: the copy unties it
        {"target_modules": ["q_proj"], "modules_to_save": ["input_layernorm"]},
    ],
    ids=["linear", "tied-head", "modules-to-save"],
)
def test_generation_copy_merges_lora(tiny, lora_kw):
    from peft import LoraConfig, get_peft_model

    model, tok = tiny
    base = AutoModelForCausalLM.from_pretrained(TINY, dtype=torch.float32)
    peft_model = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, **lora_kw))
    with torch.no_grad():  # a non-zero adapter (B starts at 0), a changed saved module
        for n, p in peft_model.named_parameters():
            if "lora_B" in n or "modules_to_save" in n:
                p.normal_(1.0 if "modules_to_save" in n else 0.0, 0.05)
    g = HFGenerator(peft_model, tok, "cpu", 8, 8, compiled=True, dtype=torch.float32, max_prompt_len=64)
    ids = tok(PROMPTS[:1], return_tensors="pt")["input_ids"]
    with torch.no_grad():
        want, got = peft_model(input_ids=ids).logits, g.decoder(input_ids=ids).logits
    assert torch.allclose(want, got, atol=1e-4)
    assert not any("lora" in n for n, _ in g.decoder.named_parameters())


def test_compile_auto_is_on_for_cuda_only_and_never_with_a_4bit_base(make_cfg):
    from pods.config import settings
    from pods.rollout import RolloutSettings, use_compiled

    def gen(*overrides):
        return RolloutSettings.from_config(settings(make_cfg(*overrides)))

    cpu, cuda = torch.device("cpu"), torch.device("cuda", 0)
    assert not use_compiled(gen(), cpu) and use_compiled(gen(), cuda)
    assert not use_compiled(gen("hardware=gpu_lora", "hardware.load_in_4bit=true"), cuda)
    assert use_compiled(gen("rollout.hf.compile=true"), cpu)
    assert not use_compiled(gen("rollout.hf.compile=false"), cuda)


@pytest.mark.parametrize(
    "lora_kw",
    [
        {"target_modules": ["q_proj", "up_proj"]},
        {"target_modules": ["q_proj", "lm_head"]},
        {"target_modules": ["q_proj"], "modules_to_save": ["input_layernorm"]},
    ],
    ids=["linear", "tied-head", "modules-to-save"],
)
def test_shared_copy_merges_in_place_and_restores_the_base_exactly(tiny, lora_kw):
    """share_weights: the copy is the policy's own storage; decoding sees base + adapter, and afterwards the
    base is bit-identical to before; greedy tokens equal those of a separate copy."""
    from peft import LoraConfig, get_peft_model

    model, tok = tiny
    peft_model = get_peft_model(
        AutoModelForCausalLM.from_pretrained(TINY, dtype=torch.float32),
        LoraConfig(r=4, lora_alpha=8, **lora_kw),
    )
    with torch.no_grad():
        for n, p in peft_model.named_parameters():
            if "lora_B" in n or "modules_to_save" in n:
                p.normal_(1.0 if "modules_to_save" in n else 0.0, 0.05)
    before = {n: p.detach().clone() for n, p in peft_model.named_parameters()}
    kw = dict(compiled=True, dtype=torch.float32, max_prompt_len=64, prompt_bucket=16)
    shared = HFGenerator(peft_model, tok, "cpu", 8, 12, share_weights=True, **kw)
    separate = HFGenerator(peft_model, tok, "cpu", 8, 12, **kw)
    q = "base_model.model.model.layers.0.self_attn.q_proj.base_layer.weight"
    copy_q = dict(shared.decoder.named_parameters())["model.layers.0.self_attn.q_proj.weight"]
    assert copy_q.data_ptr() == dict(peft_model.named_parameters())[q].data_ptr()  # no second copy
    ids = tok(PROMPTS[:1], return_tensors="pt")["input_ids"]
    shared.copy.merge(peft_model)
    with torch.no_grad():
        want, got = separate.decoder(input_ids=ids).logits, shared.decoder(input_ids=ids).logits
    assert torch.allclose(want, got, atol=1e-5)
    shared.copy.restore()
    assert all(torch.equal(before[n], p) for n, p in peft_model.named_parameters())
    a = shared.generate(PROMPTS, [0, 1, 2], 1, 0.0)
    b = separate.generate(PROMPTS, [0, 1, 2], 1, 0.0)
    assert a.texts == b.texts
    assert all(torch.equal(before[n], p) for n, p in peft_model.named_parameters())


def test_shared_copy_failing_part_way_through_the_merge_leaves_the_base_intact(tiny, monkeypatch):
    """An error after some layers were merged (say out of memory) must not leave the policy's base merged."""
    from peft import LoraConfig, get_peft_model

    from pods.rollout.gen_copy import GenerationCopy

    model, tok = tiny
    peft_model = get_peft_model(
        AutoModelForCausalLM.from_pretrained(TINY, dtype=torch.float32),
        LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "up_proj"]),
    )
    with torch.no_grad():
        for n, p in peft_model.named_parameters():
            if "lora_B" in n:
                p.normal_(0.0, 0.05)
    before = {n: p.detach().clone() for n, p in peft_model.named_parameters()}
    kw = dict(compiled=True, dtype=torch.float32, max_prompt_len=64, prompt_bucket=16)
    shared = HFGenerator(peft_model, tok, "cpu", 8, 12, share_weights=True, **kw)
    merged = GenerationCopy._merged

    def fail_after_one_layer(model, keep=lambda name: True):
        for k, item in enumerate(merged(model, keep)):
            if k == 1:
                raise RuntimeError("out of memory (simulated)")
            yield item

    monkeypatch.setattr(GenerationCopy, "_merged", staticmethod(fail_after_one_layer))
    with pytest.raises(RuntimeError, match="simulated"):
        shared.generate(PROMPTS, [0, 1], 1, 0.0)
    assert all(torch.equal(before[n], p) for n, p in peft_model.named_parameters())
    assert not shared.copy.merged


def test_grouped_attention_equals_sdpa_with_padding():
    """pods_sdpa (query heads folded into the query length) gives sdpa's logits on a left-padded batch."""
    from pods.rollout.attention import register

    m = random_qwen2(vocab=97, hidden=64, heads=8, kv_heads=2).eval()
    ids = torch.randint(3, 97, (3, 10))
    am = torch.ones_like(ids)
    am[0, :4], am[1, :2] = 0, 0
    pos = (am.cumsum(1) - 1).clamp(min=0)
    want = m(input_ids=ids, attention_mask=am, position_ids=pos).logits
    m.set_attn_implementation(register())
    got = m(input_ids=ids, attention_mask=am, position_ids=pos).logits
    assert torch.allclose(want, got, atol=1e-5)


@pytest.mark.gpu
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_deferred_stop_check_returns_the_same_tokens(tiny, temperature):
    """Reading the stop flag one step late (on by default for CUDA) changes no returned token. CUDA only:
    transformers' DeferredStopCheck records device events, which a CPU does not have."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    model, tok = tiny
    model = AutoModelForCausalLM.from_pretrained(TINY, dtype=torch.float32).cuda().eval()
    out = []
    for defer in (False, True):
        torch.manual_seed(7)
        g = HFGenerator(
            model,
            tok,
            "cuda",
            8,
            24,
            compiled=True,
            dtype=torch.bfloat16,
            prompt_bucket=16,
            max_prompt_len=64,
            defer_stop=defer,
        )
        out.append(g.generate(PROMPTS[:2], [0, 1], 4, temperature))
    assert out[0].texts == out[1].texts
    assert torch.equal(out[0].input_ids, out[1].input_ids)
    assert torch.equal(out[0].completion_mask, out[1].completion_mask)


def test_deferred_stop_check_is_patched_only_inside_the_block():
    from transformers.generation.utils import DeferredStopCheck

    from pods.rollout.hf import deferred_stop_check

    cuda = torch.device("cuda")
    assert not DeferredStopCheck.is_supported(cuda, None, False, False)
    with deferred_stop_check(True):
        assert DeferredStopCheck.is_supported(cuda, None, False, False)
        assert not DeferredStopCheck.is_supported(cuda, None, False, True)  # never for an assistant
    assert not DeferredStopCheck.is_supported(cuda, None, False, False)


@pytest.fixture(scope="module")
def cuda_tiny(tiny):
    """CUDA only: the tiny policy on the GPU, the compiled path's settings, and the generate loop's greedy
    texts for PROMPTS x 2 (what the graph loop must reproduce)."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    _, tok = tiny
    model = AutoModelForCausalLM.from_pretrained(TINY, dtype=torch.float32).cuda().eval()
    kw = dict(compiled=True, dtype=torch.bfloat16, prompt_bucket=16, max_prompt_len=64)
    ref = HFGenerator(model, tok, "cuda", 8, 24, loop="generate", **kw).generate(PROMPTS, [0, 1, 2], 2, 0.0)
    return model, tok, kw, ref.texts


def _seeded_samples_repeat(g: HFGenerator) -> None:
    sampled = []
    for _ in range(2):
        torch.manual_seed(11)
        sampled.append(g.generate(PROMPTS[:2], [0, 1], 4, 1.0).texts)
    assert sampled[0] == sampled[1] and len(set(sampled[0])) > 1


@pytest.mark.gpu
def test_graph_loop_on_cuda_matches_generate_and_replays_its_draws(cuda_tiny):
    """CUDA only (the compile and the capture): greedy tokens of the graph loop equal generate()'s on the
    compiled path, the second and later calls replay a captured graph, and a fixed seed gives the same
    samples twice."""
    model, tok, kw, ref = cuda_tiny
    g = HFGenerator(model, tok, "cuda", 8, 24, loop="graph", **kw)
    assert g.copy.fused_groups > 0  # q/k/v and gate/up one GEMM each in the compiled step (fused.py)
    assert g.generate(PROMPTS, [0, 1, 2], 2, 0.0).texts == ref
    assert all(d.graphs for d in g.step_decoders.values())  # captured during the warm-up
    _seeded_samples_repeat(g)


@pytest.mark.gpu
def test_released_graph_loop_on_cuda_recaptures_without_recompiling(cuda_tiny):
    """CUDA only: with rollout.hf.release_cache the cache has no storage between calls, the next call allocates
    it again and captures anew without compiling again, and decodes what the generate loop decodes
    (greedy) and the same samples under a fixed seed."""
    from torch._dynamo.utils import counters

    model, tok, kw, ref = cuda_tiny
    g = HFGenerator(model, tok, "cuda", 8, 24, loop="graph", release_cache=True, **kw)
    assert g.generate(PROMPTS, [0, 1, 2], 2, 0.0).texts == ref  # compiles, captures, releases
    decs = list(g.step_decoders.values())
    assert all(d.released and not d.graphs for d in decs)
    assert all(t.untyped_storage().nbytes() == 0 for d in decs for t in d._cache_tensors())
    compiled = dict(counters["stats"])
    assert g.generate(PROMPTS, [0, 1, 2], 2, 0.0).texts == ref
    assert dict(counters["stats"]) == compiled  # a new cache address compiles nothing
    _seeded_samples_repeat(g)


@pytest.mark.gpu
def test_released_graph_loop_recaptures_into_the_retired_graphs_pool(cuda_tiny):
    """CUDA only: a capture after release() shares the memory pool of the graph it replaces (torch 2.11's host
    allocator rejected a separate MemPool at capture), and decodes what the generate loop decodes."""
    model, tok, kw, ref = cuda_tiny
    g = HFGenerator(model, tok, "cuda", 8, 24, loop="graph", release_cache=True, **kw)
    for _ in range(2):  # compile, capture, release; then a recapture into the retired graph's pool
        assert g.generate(PROMPTS, [0, 1, 2], 2, 0.0).texts == ref
    decs = list(g.step_decoders.values())
    pools = {k: gr.pool() for d in decs for k, gr in d.retired.items()}
    assert g.generate(PROMPTS, [0, 1, 2], 2, 0.0).texts == ref
    assert pools and {k: gr.pool() for d in decs for k, gr in d.retired.items()} == pools
    _seeded_samples_repeat(g)
