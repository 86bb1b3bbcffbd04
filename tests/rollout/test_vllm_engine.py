"""rollout=vllm against the real engine (vLLM's CPU build) and the HF backend, on the tiny policy.

One engine per mode (full fine-tuning, LoRA) for the module; each starts in a few seconds. Skipped where
vLLM is not installed; CI installs it (.ci/run). The tests that build and drop engines of their own are in
test_vllm_own_engines.py: dropping a vLLM engine tears down vLLM's process-wide parallel state, and an engine of
this module still alive then fails its next generate ("pipeline model parallel group is not initialized"; a
shuffled order, scripts/ci_stress.sh --random-order, ran one between this module's tests, 2026-11-28).
"""

import copy
import gc
import math
from dataclasses import replace

import pytest
import torch

pytest.importorskip("vllm")

from pods.config import (
    add_special_tokens,  # noqa: E402
    settings,  # noqa: E402
)
from pods.data.prompts import load_prompt_sets  # noqa: E402
from pods.distributed import Dist  # noqa: E402
from pods.eval import evaluate  # noqa: E402
from pods.models import load_policy, load_tokenizer  # noqa: E402
from pods.reward import build_reward  # noqa: E402
from pods.rollout import RolloutSettings  # noqa: E402
from pods.rollout.hf import HFGenerator, completion_mask_from_eos  # noqa: E402
from pods.rollout.vllm import VLLMGenerator  # noqa: E402
from tests.conftest import compose_cfg  # noqa: E402

CPU = torch.device("cpu")
SAMPLES = 2048  # per backend: 16 prompts x 128 completions
Z_MAX = 4.0  # |difference| / standard error above which two sample means are called different


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    cfg = settings(compose_cfg(["rollout=vllm", "hardware=cpu"], tmp_path_factory.mktemp("run")))
    tok = load_tokenizer(cfg.model)
    _, eval_set = load_prompt_sets(cfg.dataset, cfg.model, tok)
    return cfg, tok, eval_set


@pytest.fixture(scope="module", params=["full", "lora"])
def engine(request, setup):
    """(mode, policy, vLLM generator on it, HF generator on it); the engine is shut down at the end."""
    cfg, tok, _ = setup
    cfg = replace(cfg, hardware=replace(cfg.hardware, lora=request.param == "lora"))
    torch.manual_seed(0)
    model, _ = load_policy(cfg.model, cfg.hardware, CPU)
    gen = VLLMGenerator(RolloutSettings.from_config(cfg), model, tok, CPU)
    yield request.param, model, gen, HFGenerator(model, tok, CPU, 256, cfg.model.max_completion_len)
    del gen
    gc.collect()  # the engine's process group goes with it


def rollouts_equal(a, b) -> None:
    for key in ("input_ids", "attention_mask", "completion_mask"):
        assert torch.equal(getattr(a, key), getattr(b, key)), key
    assert (a.prompt_len, a.texts, a.prompt_ids, a.group_size) == (
        b.prompt_len,
        b.texts,
        b.prompt_ids,
        b.group_size,
    )


# --- parity with the HF backend -------------------------------------------------------------------


@pytest.mark.slow
def test_greedy_rollouts_are_token_identical_to_the_hf_backend(setup, engine):
    _, _, eval_set = setup
    _, _, gen, hf = engine
    prompts = eval_set.prompts  # all 141 held-out questions
    ids = list(range(len(prompts)))
    v = gen.generate(prompts, ids, 1, 0.0, add_special_tokens=True)
    h = hf.generate(prompts, ids, 1, 0.0, add_special_tokens=True)
    rollouts_equal(v, h)
    assert v.completion_mask.sum(1).min() > 0


def test_sampled_rollouts_keep_the_layout(setup, engine):
    _, tok, eval_set = setup
    _, _, gen, hf = engine
    prompts, n = eval_set.prompts[:3], 5
    r = gen.generate(prompts, [7, 8, 9], n, 0.9, add_special_tokens=True)
    ids, mask = hf.tokenize(prompts, add_special_tokens=True)  # (P, Lp) left-padded
    assert torch.equal(r.input_ids[:, : r.prompt_len], ids.repeat_interleave(n, 0))  # group-major rows
    assert torch.equal(r.attention_mask[:, : r.prompt_len], mask.repeat_interleave(n, 0))
    comp = r.input_ids[:, r.prompt_len :]
    assert torch.equal(r.completion_mask, completion_mask_from_eos(comp, gen.eos_ids, gen.pad_id))
    assert (comp[r.completion_mask == 0] == gen.pad_id).all()
    assert r.texts == tok.batch_decode(comp, skip_special_tokens=True)
    assert r.prompt_ids == [7, 8, 9] and r.group_size == n


def z_score(a: torch.Tensor, b: torch.Tensor) -> float:
    """Difference of two sample means over its standard error."""
    se = math.sqrt(a.var() / len(a) + b.var() / len(b))
    return float((a.mean() - b.mean()) / se)


def sample_stats(generator, reward, prompts, answers, temperature: float) -> dict[str, torch.Tensor]:
    """(SAMPLES,) accuracy reward and completion length of samples at `temperature`."""
    n = SAMPLES // len(prompts)
    r = generator.generate(prompts, list(range(len(prompts))), n, temperature, add_special_tokens=True)
    graded = reward(r.texts, [a for a in answers for _ in range(n)])
    return {
        "accuracy": torch.tensor(graded.terms["accuracy"]).float(),
        "length": r.completion_lengths.float(),
    }


def test_sampled_completions_match_the_hf_backend_in_distribution(setup, engine):
    """Mean accuracy and mean length over 2,048 samples per backend at the rollout temperature agree
    within Z_MAX standard errors; the same statistic tells a temperature change apart (the test has power)."""
    mode, _, gen, hf = engine
    if mode == "lora":
        pytest.skip("the sampler is the same with an adapter; one mode is enough")
    cfg, _, eval_set = setup
    reward, prompts, answers = build_reward(cfg.reward), eval_set.prompts[:16], eval_set.answers[:16]
    torch.manual_seed(0)
    h = sample_stats(hf, reward, prompts, answers, 0.9)
    v = sample_stats(gen, reward, prompts, answers, 0.9)
    hot = sample_stats(gen, reward, prompts, answers, 1.5)
    for key in ("accuracy", "length"):
        print(f"{key}: hf {h[key].mean():.4f} vllm {v[key].mean():.4f} z {z_score(v[key], h[key]):.2f}")
        assert abs(z_score(v[key], h[key])) < Z_MAX, key
    assert abs(z_score(hot["accuracy"], h["accuracy"])) > Z_MAX


def test_eval_accuracy_through_vllm_equals_hf(setup, engine):
    cfg, _, eval_set = setup
    mode, _, gen, hf = engine
    if mode == "lora":
        pytest.skip("a fresh adapter is a no-op: the same policy as the full mode's")
    reward, dist = build_reward(cfg.reward), Dist(cfg.hardware, CPU)
    stage = (cfg.eval, cfg.sampling, add_special_tokens(cfg.model), dist)
    v, _ = evaluate(gen, reward, eval_set, *stage)
    h, _ = evaluate(hf, reward, eval_set, *stage)
    assert v["eval/accuracy"] == h["eval/accuracy"] and 0 < h["eval/accuracy"] < 1


# --- weight sync ----------------------------------------------------------------------------------


def engine_greedy(gen, prompts) -> tuple[list[list[int]], list[torch.Tensor]]:
    """The engine's greedy completions and the logprob of each of their tokens."""
    ids, mask = gen.tokenize(prompts, add_special_tokens=True)
    requests = [{"prompt_token_ids": row[m.bool()].tolist()} for row, m in zip(ids, mask)]
    params = gen.SamplingParams(
        temperature=0.0, max_tokens=gen.max_tokens, stop_token_ids=gen.eos_ids, logprobs=0
    )
    outs = gen.llm.generate(requests, params, use_tqdm=False, lora_request=gen.lora_request)
    tokens = [list(o.outputs[0].token_ids) for o in outs]
    logprobs = [
        torch.tensor([step[t].logprob for t, step in zip(o.outputs[0].token_ids, o.outputs[0].logprobs)])
        for o in outs
    ]
    return tokens, logprobs


@torch.no_grad()
def policy_greedy(model, gen, prompts) -> tuple[list[list[int]], list[torch.Tensor]]:
    """The same from the training policy: HF greedy decoding, then its logprobs of those tokens. A LoRA
    policy is merged into a copy first (the same function to float rounding; peft decodes slowly)."""
    if hasattr(model, "merge_and_unload"):
        model = copy.deepcopy(model).merge_and_unload()
    hf = HFGenerator(model, gen.tok, CPU, 256, gen.max_tokens)
    r = hf.generate(prompts, list(range(len(prompts))), 1, 0.0, add_special_tokens=True)
    model.eval()
    logits = model(input_ids=r.input_ids, attention_mask=r.attention_mask).logits[:, r.prompt_len - 1 : -1]
    lp = torch.log_softmax(logits.float(), -1).gather(2, r.input_ids[:, r.prompt_len :, None])[..., 0]
    lengths = r.completion_lengths.tolist()
    tokens = [row[:k].tolist() for row, k in zip(r.input_ids[:, r.prompt_len :], lengths)]
    return tokens, [row[:k] for row, k in zip(lp, lengths)]


def engine_matches(gen, model, prompts) -> bool:
    """The engine decodes the policy: same greedy tokens, logprobs within 1e-4."""
    et, elp = engine_greedy(gen, prompts)
    pt, plp = policy_greedy(model, gen, prompts)
    return et == pt and all(torch.allclose(a, b, atol=1e-4) for a, b in zip(elp, plp))


def train_a_little(model, tok, prompts, steps: int = 5) -> None:
    """A few Adam steps of likelihood on fixed text: enough to move every greedy logprob."""
    batch = tok([p + " 42" for p in prompts], return_tensors="pt", padding=True)
    opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=3e-3)
    model.train()
    for _ in range(steps):
        loss = model(**batch, labels=batch["input_ids"].masked_fill(batch["attention_mask"] == 0, -100)).loss
        opt.zero_grad()
        loss.backward()
        opt.step()


def test_weight_sync_makes_the_engine_decode_the_trained_policy(setup, engine):
    _, tok, eval_set = setup
    mode, model, gen, _ = engine
    prompts = eval_set.prompts[:8]
    assert engine_matches(gen, model, prompts)
    trained = copy.deepcopy(model)
    train_a_little(trained, tok, prompts)
    assert not engine_matches(gen, trained, prompts)  # what a skipped sync would leave
    gen.sync_weights(trained)
    assert engine_matches(gen, trained, prompts)
    gen.sync_weights(model)  # and back: later tests see the policy the fixture made
    assert engine_matches(gen, model, prompts)
    if mode == "lora":  # each sync serves a fresh adapter id; the old ones leave the engine and the disk
        assert gen.llm.llm_engine.list_loras() == {gen.lora_request.lora_int_id}
        assert [p.name for p in gen.adapter_root.iterdir()] == [f"v{gen.version}"]
