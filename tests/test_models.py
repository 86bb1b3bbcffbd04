"""Policy loading: where the model comes from, device and dtype, full fine-tune vs LoRA, the reference."""

from __future__ import annotations

import pytest
import torch

from pods.config import settings
from pods.errors import ConfigError
from pods.models import (
    AdapterDisabledRef,
    check_model_source,
    load_policy,
    load_tokenizer,
    reference_policy,
    resolve_device,
    resolve_dtype,
    skip_adapter_input_cast,
)

CPU = torch.device("cpu")


def test_gpu_profile_without_gpu_fails(make_cfg):
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    with pytest.raises(ConfigError, match="hardware=gpu needs a CUDA GPU"):
        resolve_device(settings(make_cfg("hardware=gpu")).hardware)


@pytest.mark.parametrize("where", ["{tmp}/nope/", "outputs/models/nope"])
def test_missing_local_model_dir(make_cfg, tmp_path, where):
    """A missing folder, absolute or relative, is named as such (a relative `a/b/c` is no hub id)."""
    with pytest.raises(ConfigError, match="model.path=.*no config.json there"):
        c = settings(make_cfg(f"model.path={where.format(tmp=tmp_path)}"))
        check_model_source(c.model, c.hardware)


def test_hub_model_offline_and_uncached_fails_fast(make_cfg, monkeypatch, tmp_path):
    from pods.hub import OfflineError, hub_reachable

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # an empty cache
    hub_reachable.cache_clear()
    with pytest.raises(OfflineError, match=r"Qwen/Qwen2.5-3B-Instruct' \(model.path\).*unreachable"):
        c = settings(make_cfg("model=qwen2.5-3b", "hardware=cpu"))
        check_model_source(c.model, c.hardware)
    hub_reachable.cache_clear()


def test_half_precision_is_float32_on_a_cpu(make_cfg):
    cfg = settings(make_cfg("hardware=gpu_lora", "model.dtype=bfloat16"))
    assert resolve_dtype(cfg.model, cfg.hardware, CPU) == torch.float32
    assert resolve_dtype(cfg.model, cfg.hardware, torch.device("cuda")) == torch.bfloat16


def test_tokenizer_pads_on_the_left_with_a_pad_token(make_cfg):
    tok = load_tokenizer(settings(make_cfg()).model)
    assert tok.padding_side == "left" and tok.pad_token is not None


def test_full_fine_tune_trains_every_float32_weight_and_copies_a_frozen_reference(make_cfg):
    cfg = settings(make_cfg("hardware=cpu"))
    model, ref = load_policy(cfg.model, cfg.hardware, CPU, reference=cfg.algo.beta > 0)
    params = list(model.parameters())
    assert all(p.requires_grad and p.dtype == torch.float32 for p in params) and ref is None  # beta = 0
    cfg = settings(make_cfg("hardware=cpu", "algo.beta=0.04"))
    model, ref = load_policy(cfg.model, cfg.hardware, CPU, reference=cfg.algo.beta > 0)
    assert reference_policy(model, ref, cfg.algo.beta, cfg.hardware.lora) is ref and not any(
        p.requires_grad for p in ref.parameters()
    )
    with torch.no_grad():
        next(model.parameters()).add_(1.0)  # training the policy leaves the reference where it was
    assert not torch.equal(next(model.parameters()), next(ref.parameters()))


def test_lora_trains_only_the_adapter_and_its_reference_is_the_base(make_cfg):
    cfg = settings(make_cfg("hardware=cpu", "hardware.lora=true", "algo.beta=0.04"))
    model, ref = load_policy(cfg.model, cfg.hardware, CPU, reference=cfg.algo.beta > 0)
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert ref is None and trainable and all("lora_" in n for n in trainable)
    assert {n.split(".")[-4] for n in trainable if "lora_A" in n} == set(cfg.model.lora.targets)
    base = reference_policy(model, ref, cfg.algo.beta, cfg.hardware.lora)
    assert isinstance(base, AdapterDisabledRef)
    ids = torch.tensor([[5, 6, 7, 8]])
    with torch.no_grad():
        before = model(input_ids=ids).logits  # B = 0 at init: policy == base
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.add_(0.1)
        assert torch.allclose(base(input_ids=ids).logits, before)  # the base ignores the adapter
        assert not torch.allclose(model(input_ids=ids).logits, before)


def test_skipping_the_adapter_input_cast_changes_nothing_under_autocast():
    """A bf16 base with float32 LoRA adapters under bf16 autocast (on a CPU here; the GPU case is the same
    code): with peft's cast of the inputs to float32 switched off the logits and the adapter gradients are
    bit-identical, and no float32 copy of an adapted layer's input is made."""
    import copy

    from peft import LoraConfig, get_peft_model

    from tests.conftest import random_qwen2

    base = random_qwen2(vocab=61, hidden=32, heads=4, kv_heads=2).to(torch.bfloat16)
    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "up_proj", "down_proj"])
    peft_model = get_peft_model(base, lora)
    for n, p in peft_model.named_parameters():
        if "lora_B" in n:  # B starts at zero: make the adapters do something
            torch.nn.init.normal_(p, std=0.1)
    ids = torch.randint(0, 61, (3, 9))
    out = []
    for skip in (False, True):
        m = copy.deepcopy(peft_model)
        if skip:
            assert skip_adapter_input_cast(m) == 4 * 2  # 4 targets x 2 layers
        casts = []  # did an adapted layer's input change dtype?

        def watched(orig, casts=casts):
            def cast(x, dtype):
                y = orig(x, dtype)
                casts.append(y.dtype != x.dtype)
                return y

            return cast

        for mod in m.modules():
            if hasattr(mod, "_cast_input_dtype"):
                mod._cast_input_dtype = watched(mod._cast_input_dtype)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = m(input_ids=ids).logits
        logits.float().pow(2).mean().backward()
        grads = [p.grad.clone() for n, p in m.named_parameters() if p.requires_grad]
        out.append((logits.detach(), grads, any(casts)))
    assert out[0][2] and not out[1][2]  # a cast happened only without the switch...
    assert torch.equal(out[0][0], out[1][0])  # ...and changed nothing
    assert all(torch.equal(a, b) for a, b in zip(out[0][1], out[1][1]))


def test_canonical_device_names_the_cuda_index(monkeypatch):
    """torch.device("cuda") never equals a tensor's device (cuda:0): a copy that shares weights only where the
    devices are equal would silently share nothing (issue 18, call 18)."""
    from pods.models import canonical_device

    assert torch.device("cuda") != torch.device("cuda", 0)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)
    assert canonical_device("cuda") == torch.device("cuda", 1)
    assert canonical_device("cuda:0") == torch.device("cuda", 0)
    assert canonical_device(torch.device("cpu")) == torch.device("cpu")
