"""Fused q/k/v and gate/up projections of the generation copy (pods/rollout/fused.py): the same model under the
same parameter names, the same numbers eagerly, and one GEMM per group once compiled with merge_linears."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from pods.rollout.fused import FusedSlice, fuse_projections, merge_identical_linears, merge_linears
from tests.conftest import random_qwen2


def _model(layers: int = 2):
    return random_qwen2(vocab=64, hidden=32, heads=4, kv_heads=2, layers=layers).eval()


def test_fusing_keeps_names_and_eager_logits_bit_identical():
    model = _model()
    ids = torch.randint(0, 64, (3, 7))
    with torch.no_grad():
        want = model(input_ids=ids).logits
    names = [n for n, _ in model.named_parameters()]
    state = torch.random.get_rng_state()
    assert fuse_projections(model) == 2 * 2  # q/k/v and gate/up in each of 2 layers
    assert torch.equal(torch.random.get_rng_state(), state)  # draws nothing: sampling after it is unchanged
    assert [n for n, _ in model.named_parameters()] == names  # same parameters, same order
    attn = model.model.layers[0].self_attn
    assert isinstance(attn.k_proj, FusedSlice) and attn.k_proj.fused is attn.q_proj.fused
    assert attn.q_proj.fused.weight.shape == (32 + 16 + 16, 32)  # 4 query heads, 2 kv heads of width 8
    with torch.no_grad():
        assert torch.equal(model(input_ids=ids).logits, want)


def test_writing_a_slice_by_name_writes_the_fused_matrix():
    """GenerationCopy.sync writes the copy's weights by name: that must reach what the fused GEMM reads."""
    model = _model(layers=1)
    fuse_projections(model)
    params = dict(model.named_parameters())
    with torch.no_grad():
        params["model.layers.0.self_attn.v_proj.weight"].fill_(3.0)
        params["model.layers.0.mlp.up_proj.weight"].fill_(-2.0)
    attn, mlp = model.model.layers[0].self_attn, model.model.layers[0].mlp
    assert (attn.v_proj.fused.weight[48:] == 3.0).all() and not (attn.v_proj.fused.weight[:48] == 3.0).any()
    assert (mlp.up_proj.fused.weight[64:] == -2.0).all() and not (mlp.up_proj.fused.weight[:64] == -2.0).any()
    assert attn.v_proj.fused.bias.data_ptr() + 48 * 4 == attn.v_proj.bias.data_ptr()  # a view, not a copy


def test_groups_that_differ_are_left_alone():
    parent = torch.nn.Module()
    parent.q_proj, parent.k_proj = torch.nn.Linear(8, 8), torch.nn.Linear(8, 4)
    parent.v_proj = torch.nn.Linear(8, 4, bias=False)  # bias differs from q/k
    parent.gate_proj, parent.up_proj = torch.nn.Linear(8, 16), torch.nn.Linear(6, 16)  # input widths differ
    assert fuse_projections(parent) == 0
    assert all(type(m) is torch.nn.Linear for m in parent.children())


def test_merge_identical_linears_removes_repeats_only():
    class Two(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w, self.w2, self.b = (torch.nn.Parameter(torch.randn(*s)) for s in [(6, 4), (6, 4), (6,)])

        def forward(self, x, y):
            a = F.linear(x, self.w, self.b)[..., :2]
            c = F.linear(x, self.w, self.b)[..., 2:]  # a repeat: merged
            d = F.linear(y, self.w, self.b)  # another input: kept
            e = F.linear(x, self.w2, self.b)  # another weight: kept
            return a.sum() + c.sum() + d.sum() + e.sum()

    gm = torch.fx.symbolic_trace(Two())
    x, y = torch.randn(3, 4), torch.randn(3, 4)
    want = gm(x, y)
    assert sum(n.target is F.linear for n in gm.graph.nodes) == 4
    assert merge_identical_linears(gm.graph) == 1
    gm.recompile()
    assert sum(n.target is F.linear for n in gm.graph.nodes) == 3
    assert torch.equal(gm(x, y), want)


@pytest.mark.slow
def test_compiled_forward_runs_one_gemm_per_group():
    """torch.compile with merge_linears (as the graph loop compiles the decode step): per layer, one product
    for q/k/v, one for o, one for gate/up, one for down; plus the head. Same logits as eager."""
    torch._dynamo.reset()
    model = _model()
    fuse_projections(model)
    ids = torch.randint(0, 64, (4, 1))
    fwd = torch.compile(lambda t: model(input_ids=t).logits, dynamic=False, backend=merge_linears)
    with torch.no_grad():
        want = model(input_ids=ids).logits
        fwd(ids)
        with torch.profiler.profile() as prof:
            got = fwd(ids)
    gemms = sum(e.count for e in prof.key_averages() if e.key in ("aten::mm", "aten::addmm"))
    assert gemms == 2 * 4 + 1
    assert torch.allclose(got, want, atol=1e-5)


def test_the_hf_backend_fuses_only_a_graph_loop_copy_of_its_own():
    """Fused only where merge_linears compiles the step (the graph loop) and the copy owns its weights: the
    generate loop compiles with transformers' own backend, and a shared LoRA copy is the policy's tensors."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoTokenizer

    from pods.rollout.hf import HFGenerator
    from tests.rollout.test_hf import TINY

    tok = AutoTokenizer.from_pretrained(TINY)
    tok.pad_token = tok.pad_token or tok.eos_token
    kw = dict(compiled=True, dtype=torch.float32, max_prompt_len=64)

    def groups(model, **more):
        return HFGenerator(model, tok, "cpu", 8, 8, **kw, **more).copy.fused_groups

    plain = _tiny()
    layers = plain.config.num_hidden_layers
    assert groups(plain, loop="graph") == 2 * layers
    assert groups(plain, loop="graph", fuse_projections=False) == 0
    assert groups(plain, loop="generate") == 0
    lora = get_peft_model(_tiny(), LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj"]))
    assert groups(lora, loop="graph", share_weights=True) == 0
    assert groups(lora, loop="graph", share_weights=False) == 2 * layers


def _tiny():
    from transformers import AutoModelForCausalLM

    from tests.rollout.test_hf import TINY

    return AutoModelForCausalLM.from_pretrained(TINY, dtype=torch.float32).eval()
