"""rollout.batch_size=auto and the fast decode by default (pods/rollout/sizing.py): the sizing arithmetic against
hand counts, the budget on a simulated card, what `auto` settles to on a CPU and where the graph loop runs."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch
from transformers import Qwen2Config

from pods.errors import ConfigError
from pods.rollout import sizing
from pods.rollout.hf import HFSettings
from pods.rollout.sizing import bytes_per_row, choose_rows, fast_decode, kv_bytes_per_token, rows_that_fit
from tests.conftest import SMOKE, random_qwen2
from tests.rollout.conftest import HEADLINE, greedy_differences, headline_rollouts

QWEN_3B = Qwen2Config(num_hidden_layers=36, hidden_size=2048, num_attention_heads=16, num_key_value_heads=2,
                      intermediate_size=11008, vocab_size=151936)  # fmt: skip
GIB = 2**30


def test_a_row_costs_its_kv_cache_logits_and_one_layers_prefill():
    # Qwen2.5-3B in bf16: 2 (k, v) x 36 layers x 2 KV heads x 128 dims x 2 bytes = 36,864 bytes a token
    assert kv_bytes_per_token(QWEN_3B, 2) == 36864
    per_row = bytes_per_row(QWEN_3B, cache_len=1024, prompt_len=512, dtype_bytes=2)
    kv, logits = 36864 * 1024, 3 * 4 * 151936
    prefill = 512 * (6 * 2048 + 3 * 11008) * 2
    assert per_row == kv + logits + prefill
    head_dim = Qwen2Config(num_attention_heads=4, num_key_value_heads=4, hidden_size=64, head_dim=32)
    assert kv_bytes_per_token(head_dim, 4) == 2 * head_dim.num_hidden_layers * 4 * 32 * 4  # head_dim wins


@pytest.mark.parametrize(
    "budget,per_row,want",
    [(1023, 1, 512), (1024, 1, 1024), (5, 2, 2), (1, 2, 0), (-5, 2, 0), (1 << 30, 1, 8192)],
)
def test_rows_are_the_largest_power_of_two_that_fits(budget, per_row, want):
    assert rows_that_fit(budget, per_row) == want


def fake_card(monkeypatch, total: int, held: int, free: int, cached: int = 0):
    """A card of `total` bytes on which this process has `held` allocated and `cached` more reserved but unused,
    and the driver reports `free` (the cache counted as taken)."""
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda d: SimpleNamespace(total_memory=total))
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda d: held)
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda d: held + cached)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda d: (free, total))


def test_auto_fills_the_memory_fraction_less_what_is_held_and_the_updates_state(monkeypatch):
    """A simulated 140 GiB card holding 10 GiB: 0.9 x 140 - 10 - the update's state - 1 GiB spare, over the bytes
    of a row; the free memory caps it (another process on the card), and too little for one row is one line."""
    model = torch.nn.Linear(1000, 1000)  # 1,001,000 float32 parameters: 3 x 4 bytes of update state each
    state = 3 * 4 * 1_001_000
    per_row = bytes_per_row(QWEN_3B, 1024, 512, 2)
    fake_card(monkeypatch, 140 * GIB, 10 * GIB, 130 * GIB)
    got = choose_rows(QWEN_3B, "cuda", 1024, 512, 2, model, 0.9)
    budget = int(0.9 * 140 * GIB) - 10 * GIB - state - sizing.RESERVE_BYTES
    assert got.rows == rows_that_fit(budget, per_row) == 1024  # 115 GiB / 82 MiB = 1,436 rows
    assert "rollout.memory_fraction=0.9" in got.why and "1024 rows" in got.why
    fake_card(monkeypatch, 140 * GIB, 10 * GIB, 40 * GIB)  # another run took most of the card
    assert choose_rows(QWEN_3B, "cuda", 1024, 512, 2, model, 0.9).rows == 256  # 39 GiB: 475 rows
    fake_card(monkeypatch, 140 * GIB, 10 * GIB, 30 * GIB, cached=100 * GIB)  # an earlier Trainer's cache
    assert choose_rows(QWEN_3B, "cuda", 1024, 512, 2, model, 0.9).rows == 1024  # reusable: counted as free
    fake_card(monkeypatch, 140 * GIB, 10 * GIB, 130 * GIB)
    assert (
        choose_rows(QWEN_3B, "cuda", 1024, 512, 2, model, 0.25).rows == 256
    )  # 4 runs a card: 24 GiB, 292 rows
    with pytest.raises(ConfigError, match="not one row fits.*raise rollout.memory_fraction"):
        choose_rows(QWEN_3B, "cuda", 1024, 512, 2, model, 0.07)
    assert choose_rows(QWEN_3B, "cpu", 1024, 512, 2, model, 0.9).rows == sizing.CPU_ROWS


def test_fast_decode_is_flex_and_shared_prefill_where_the_graph_loop_runs():
    qwen = Qwen2Config()
    auto = HFSettings()
    assert fast_decode(auto, True, "sdpa", qwen)[:2] == ("flex", True)
    attn, share, why = fast_decode(auto, False, "sdpa", qwen)
    assert (attn, share) == ("sdpa", False) and "no graph loop" in why
    attn, share, why = fast_decode(auto, True, "eager", qwen)
    assert (attn, share) == ("sdpa", True) and "attention 'eager': only sdpa" in why
    windowed = Qwen2Config(use_sliding_window=True, sliding_window=16, max_window_layers=0)
    assert "only full attention" in fast_decode(auto, True, "sdpa", windowed)[2]
    # the graph loop on a CPU (rollout.hf.compile=true) runs flex eagerly: SDPA, the prefill still shared
    attn, share, why = fast_decode(auto, True, "sdpa", qwen, "cpu")
    assert (attn, share) == ("sdpa", True) and "flex's decode kernel is CUDA's" in why
    explicit = HFSettings(decode_attention="sdpa", share_prefill=False)
    assert fast_decode(explicit, True, "sdpa", qwen)[:2] == ("sdpa", False)  # a setting wins


def test_auto_settles_on_a_cpu_to_what_ran_before(make_cfg):
    """CPU: generate() decodes, so the defaults settle to SDPA, no shared prefill and 256 rows a call, the
    values config.yaml and older checkpoints hold (a resume of one compares equal)."""
    from pods.train import preflight

    c = preflight(make_cfg("hardware=cpu"))
    hf = c.rollout.sections["hf"]
    assert (hf.decode_attention, hf.share_prefill, c.rollout.batch_size) == ("sdpa", False, "auto")
    for bad in ("rollout.batch_size=0", "rollout.batch_size=many", "eval.batch_size=-1"):
        with pytest.raises(ConfigError, match="must be auto or a whole number"):
            preflight(make_cfg(bad))
    with pytest.raises(ConfigError, match="rollout.hf.share_prefill"):
        preflight(make_cfg("rollout.hf.share_prefill=sometimes"))


def test_a_run_records_the_rows_it_chose_and_why(tmp_path, make_cfg):
    from pods.train import run

    run(make_cfg(*SMOKE, "max_steps=1", run_dir=tmp_path / "r"))
    decisions = json.loads((tmp_path / "r" / "run_info.json").read_text())["decisions"]
    assert decisions["rollout.batch_size"]["value"] == sizing.CPU_ROWS
    assert decisions["rollout.batch_size"]["why"].startswith("cpu: 256")
    assert decisions["rollout.hf.decode_attention"]["value"] == "sdpa"
    assert "no graph loop" in decisions["rollout.hf.decode_attention"]["why"]


def test_a_direct_build_settles_auto_itself(make_cfg):
    """HFGenerator.from_config (a backend built in code, not through preflight) decides `auto` the same way."""
    from transformers import AutoTokenizer

    from pods.components import checked as settings
    from pods.rollout import RolloutSettings, build_backend

    tok = AutoTokenizer.from_pretrained(HEADLINE)
    model = random_qwen2(vocab=len(tok), hidden=64, heads=4, kv_heads=2)
    rs = RolloutSettings.from_config(settings(make_cfg("hardware=cpu", "rollout.hf.compile=true")))
    gen = build_backend(rs, model, tok, torch.device("cpu"))  # the graph loop, eager on a CPU: no flex
    assert (gen.decode_attention, gen.share_prefill, gen.batch_size) == ("sdpa", True, sizing.CPU_ROWS)


@pytest.mark.gpu
def test_headline_greedy_tokens_with_the_defaults_on_cuda(headline, make_cfg):
    """CUDA: the defaults (flex decode, shared prefill, rows sized from memory) through from_config decode the
    greedy tokens SDPA without sharing decodes, but for near-ties (at most 1%, as each switch alone)."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    from pods.components import checked as settings
    from pods.rollout import RolloutSettings, build_backend
    from tests.rollout.conftest import SUMS

    model, tok = headline
    rs = RolloutSettings.from_config(settings(make_cfg("model=headline", "hardware=gpu", "model.max_prompt_len=128",
                                                       "model.max_completion_len=96")))  # fmt: skip
    gen = build_backend(rs, model.to("cuda"), tok, torch.device("cuda"))
    assert (gen.decode_attention, gen.share_prefill) == ("flex", True) and gen.batch_size >= 1024
    print("rollout.batch_size=auto on CUDA:", gen.decisions["rollout.batch_size"]["why"])
    torch.manual_seed(3)
    got = gen.generate(SUMS, list(range(len(SUMS))), 64, 0.0)
    want = headline_rollouts(headline, "cuda", 0.0, 64)
    print(f"defaults on CUDA: {greedy_differences(want, got, 64)}")
