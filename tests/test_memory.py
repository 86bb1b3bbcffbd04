"""hardware=auto sizes the model from its config before any weights load: full fine-tune when its state fits
the card, else LoRA, else a one-line refusal. The card's memory is faked (no GPU here)."""

from __future__ import annotations

import logging
from dataclasses import replace

import pytest
import torch

import pods.memory
import pods.models
from pods.components import checked
from pods.config import settings
from pods.errors import ConfigError
from pods.memory import GIB, STATE_SHARE, architecture_config, model_size, state_bytes
from pods.rollout import RolloutSettings
from pods.rollout.hf import HFSettings
from pods.train import preflight

CUDA = torch.device("cuda", 0)


def fake_card(monkeypatch, gib: float) -> None:
    monkeypatch.setattr(pods.memory, "card_memory", lambda device: int(gib * GIB))


def choose_finetune(c, device):
    """pods.memory.settle_hardware on typed settings: c with the chosen hardware and update groups."""
    return pods.memory.settle_hardware(c, device)


def kept_bytes(size, c, lora: bool, compiled: bool) -> int:
    return state_bytes(size, RolloutSettings.from_config(c), c.algo.beta, lora, compiled)


@pytest.mark.parametrize(
    "hub_id, billions, non_embedding",  # the model cards' "Number of Parameters" (and non-embedding)
    [
        ("Qwen/Qwen2.5-0.5B-Instruct", 0.49, 0.36),
        ("Qwen/Qwen2.5-1.5B-Instruct", 1.54, 1.31),
        ("Qwen/Qwen2.5-3B-Instruct", 3.09, 2.77),
        ("meta-llama/Llama-3.2-3B-Instruct", 3.21, None),
    ],
)
def test_shipped_hub_configs_give_the_model_cards_parameter_counts(hub_id, billions, non_embedding):
    hf = architecture_config(hub_id)
    size = model_size(hf, 64, ["q_proj", "v_proj"])
    assert round(size.params / 1e9, 2) == billions
    if non_embedding is not None:
        assert round((size.params - hf.vocab_size * hf.hidden_size) / 1e9, 2) == non_embedding
    kv = hf.num_key_value_heads * (getattr(hf, "head_dim", None) or hf.hidden_size // hf.num_attention_heads)
    per_layer = 64 * (hf.hidden_size + hf.hidden_size) + 64 * (hf.hidden_size + kv)  # q, v
    assert size.lora_params == hf.num_hidden_layers * per_layer


def test_the_meta_count_equals_the_loaded_tiny_model(make_cfg):
    cfg = settings(make_cfg("hardware=cpu", "hardware.lora=true"))
    size = model_size(architecture_config(cfg.model.path), cfg.model.lora.r, cfg.model.lora.targets)
    model, _ = pods.models.load_policy(cfg.model, cfg.hardware, torch.device("cpu"))
    base = sum(p.numel() for n, p in model.named_parameters() if "lora_" not in n)
    adapter = sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert (size.params, size.lora_params) == (base, adapter)


def test_full_fine_tune_state_is_16_bytes_a_parameter_plus_the_generation_copy(make_cfg):
    cfg = settings(make_cfg("model=qwen2.5-3b", "hardware=auto"))
    size = pods.memory.ModelSize(params=1000, lora_params=10)
    assert kept_bytes(size, cfg, lora=False, compiled=False) == 16_000
    assert kept_bytes(size, cfg, lora=False, compiled=True) == 18_000  # + bf16 generation copy
    # LoRA: the generation copy decodes from the policy's own bf16 base (rollout.hf.share_weights, the default)
    assert HFSettings().share_weights
    assert kept_bytes(size, cfg, lora=True, compiled=True) == 2_000 + 160  # bf16 base, adapter
    cfg = replace(cfg, rollout=replace(cfg.rollout, sections={"hf": HFSettings(share_weights=False)}))
    assert kept_bytes(size, cfg, lora=True, compiled=True) == 2_000 + 160 + 2_000  # + a copy of its own
    cfg = replace(
        cfg,
        rollout=replace(cfg.rollout, sections={"hf": HFSettings(share_weights=True)}),
        hardware=replace(cfg.hardware, load_in_4bit=True),
    )
    assert kept_bytes(size, cfg, lora=True, compiled=True) == 500 + 160 + 2_000  # 4-bit bases are not shared
    cfg = replace(cfg, hardware=replace(cfg.hardware, load_in_4bit=False), algo=replace(cfg.algo, beta=0.04))
    assert kept_bytes(size, cfg, lora=False, compiled=False) == 20_000  # + float32 reference


def test_3b_on_an_80_gib_card_trains_lora_and_says_why(make_cfg, monkeypatch, caplog):
    fake_card(monkeypatch, 80)
    cfg = settings(make_cfg("selector=max_variance", "model=qwen2.5-3b"))
    assert cfg.hardware.name == "auto" and not cfg.hardware.lora
    with caplog.at_level(logging.INFO, logger="pods"):
        cfg = choose_finetune(cfg, CUDA)
    assert cfg.hardware.lora and cfg.update.gradient_checkpointing
    assert "hardware=auto: LoRA" in caplog.text and "full fine-tune keeps 51.7 GiB" in caplog.text


def test_3b_on_a_141_gib_card_and_smaller_models_on_80_gib_stay_full(make_cfg, monkeypatch, caplog):
    for model, gib in (("qwen2.5-3b", 141), ("qwen2.5-0.5b", 80), ("qwen2.5-1.5b", 80)):
        fake_card(monkeypatch, gib)
        cfg = settings(make_cfg(f"model={model}"))
        with caplog.at_level(logging.INFO, logger="pods"):
            cfg = choose_finetune(cfg, CUDA)
        assert not cfg.hardware.lora, model
    assert caplog.text.count("hardware=auto: full fine-tune") == 3


def test_a_card_too_small_for_lora_too_is_refused_with_a_hint(make_cfg, monkeypatch):
    fake_card(monkeypatch, 8)
    with pytest.raises(ConfigError, match=r"neither fits: .*load_in_4bit=true") as e:
        choose_finetune(settings(make_cfg("model=qwen2.5-3b")), CUDA)
    assert "\n" not in str(e.value)


def test_an_explicit_profile_is_kept_with_a_warning(make_cfg, monkeypatch, caplog):
    fake_card(monkeypatch, 80)
    cfg = settings(make_cfg("model=qwen2.5-3b", "hardware=gpu"))
    with caplog.at_level(logging.INFO, logger="pods"):
        cfg = choose_finetune(cfg, CUDA)
    assert not cfg.hardware.lora and "hardware=gpu may not fit" in caplog.text


def test_vllm_leaves_the_engine_its_share(make_cfg, monkeypatch):
    # 1.5B full state without a generation copy: 1.54e9 x 16 B = 23.0 GiB. 60% of 48 GiB = 28.8 GiB fits;
    # with vLLM holding 35% of the card, 18.7 GiB does not.
    fake_card(monkeypatch, 48)
    hf = settings(make_cfg("model=qwen2.5-1.5b", "rollout.hf.compile=false"))
    hf = choose_finetune(hf, CUDA)
    vllm = checked(make_cfg("model=qwen2.5-1.5b", "rollout=vllm"))  # rollout.vllm's settings typed
    vllm = choose_finetune(vllm, CUDA)
    assert not hf.hardware.lora and vllm.hardware.lora
    assert 48 * STATE_SHARE * (1 - vllm.rollout.own().gpu_memory_utilization) < 23.0 < 48 * STATE_SHARE


def test_preflight_chooses_before_any_weights_load(make_cfg, monkeypatch, caplog):
    """Through preflight, on the shipped tiny model (float32: full state ~16 MB, LoRA ~7 MB) and a 16 MiB card."""
    fake_card(monkeypatch, 16 / 1024)
    monkeypatch.setattr(pods.models, "resolve_device", lambda hardware: CUDA)
    monkeypatch.setattr(pods.models, "load_policy", lambda *a: pytest.fail("weights loaded"))
    with caplog.at_level(logging.INFO, logger="pods"):
        cfg = preflight(make_cfg())
    assert cfg.hardware.lora and "hardware=auto: LoRA" in caplog.text


def test_a_cpu_run_is_not_sized(make_cfg, monkeypatch):
    monkeypatch.setattr(pods.memory, "architecture_config", lambda path: pytest.fail("sized on a CPU"))
    cfg = settings(make_cfg())
    cfg = choose_finetune(cfg, torch.device("cpu"))
    assert not cfg.hardware.lora


@pytest.mark.parametrize(
    "gib, choice",  # 3B: full state 51.7 GiB (with the generation copy), LoRA 7.6 GiB; 60% of the card for them
    [
        (24, "LoRA with gradient checkpointing"),
        (80, "LoRA with gradient checkpointing"),
        (141, "full fine-tune"),
    ],
)
def test_the_users_command_on_a_faked_card_never_starts_a_full_fine_tune_that_cannot_fit(
    make_cfg, monkeypatch, caplog, gib, choice
):
    """`python -m pods.train selector=max_variance model=qwen2.5-3b` (hardware=auto), composed through Hydra and
    run through preflight as pods.train.run does, on a card of `gib` GiB; no weights load."""
    fake_card(monkeypatch, gib)
    monkeypatch.setattr(pods.models, "resolve_device", lambda hardware: CUDA)
    monkeypatch.setattr(pods.models, "check_model_source", lambda *a: None)  # the hub id, without the hub
    monkeypatch.setattr(pods.models, "load_policy", lambda *a: pytest.fail("weights loaded"))
    composed = make_cfg("selector=max_variance", "model=qwen2.5-3b")
    assert composed.hardware.name == "auto"
    with caplog.at_level(logging.INFO, logger="pods"):
        cfg = preflight(composed)
    assert cfg.hardware.lora == (choice != "full fine-tune")
    assert f"hardware=auto: {choice}" in caplog.text and f"this {gib} GiB card" in caplog.text
    size = model_size(architecture_config(cfg.model.path), cfg.model.lora.r, cfg.model.lora.targets)
    kept = kept_bytes(size, cfg, cfg.hardware.lora, compiled=not cfg.hardware.lora)
    assert kept <= gib * GIB * STATE_SHARE


def _resident_bytes(model, optimizer, ref) -> int:
    """Bytes of every parameter, gradient and optimizer state tensor (AdamW's scalar step counters aside)."""
    tensors = [p for p in model.parameters()] + [p.grad for p in model.parameters() if p.grad is not None]
    tensors += [v for s in optimizer.state.values() for k, v in s.items() if k != "step"]
    tensors += list(ref.parameters()) if ref is not None else []
    return sum(t.numel() * t.element_size() for t in tensors)


@pytest.mark.parametrize(
    "overrides",
    [(), ("algo.beta=0.04",), ("hardware.lora=true",), ("hardware.lora=true", "algo.beta=0.04")],
    ids=["full", "full+reference", "lora", "lora+reference"],
)
def test_the_count_equals_what_a_real_step_allocates(make_cfg, overrides):
    """The tiny model after one real forward/backward and AdamW step on the CPU: weights (float32 masters for a
    full fine-tune, the base in the compute dtype under LoRA), gradients, AdamW moments and a reference copy
    when algo.beta > 0 are exactly what state_bytes counts (no generation copy on this path)."""
    from pods.update.optim import build_optimizer

    cfg = settings(make_cfg("hardware=cpu", "model.dtype=float32", *overrides))
    cpu = torch.device("cpu")
    model, ref = pods.models.load_policy(cfg.model, cfg.hardware, cpu, reference=cfg.algo.beta > 0)
    optimizer, _ = build_optimizer(model, cfg.optim, cfg.max_steps, cpu)
    model(input_ids=torch.tensor([[1, 2, 3, 4]]), labels=torch.tensor([[1, 2, 3, 4]])).loss.backward()
    optimizer.step()
    size = model_size(architecture_config(cfg.model.path), cfg.model.lora.r, cfg.model.lora.targets)
    assert _resident_bytes(model, optimizer, ref) == kept_bytes(size, cfg, cfg.hardware.lora, compiled=False)


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_hardware_auto_takes_its_device_update_layout(make_cfg, lora):
    """hardware=auto leaves the update's layout to the device: on a GPU what hardware=gpu (full fine-tune) or
    hardware=gpu_lora sets, on a CPU nothing of it (the CPU default run is unchanged); set fields are kept."""
    from pods.memory import settle_update_layout

    def layout(name):
        return settings(make_cfg(f"hardware={name}")).update

    auto = layout("auto")
    assert (auto.width_bucket, auto.row_bucket, auto.fused_logprobs) == (None, None, None)
    gpu = settle_update_layout(auto, lora, torch.device("cuda", 0))
    want = layout("gpu_lora" if lora else "gpu")
    assert (gpu.width_bucket, gpu.row_bucket, gpu.fused_logprobs) == (
        want.width_bucket,
        want.row_bucket,
        want.fused_logprobs,
    )
    cpu = settle_update_layout(auto, lora, torch.device("cpu"))
    plain = layout("cpu")
    assert (cpu.width_bucket, cpu.row_bucket, cpu.fused_logprobs) == (
        plain.width_bucket,
        plain.row_bucket,
        plain.fused_logprobs,
    )
    mine = settle_update_layout(replace(auto, width_bucket=32), lora, torch.device("cuda", 0))
    assert mine.width_bucket == 32 and mine.fused_logprobs is True
    assert settle_update_layout(plain, lora, torch.device("cuda", 0)) is plain  # all set: unchanged
