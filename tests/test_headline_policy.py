"""The shipped headline policy (pods/assets/headline): `model=headline` finds it, its bytes are the frozen ones,
and it loads and runs."""

import hashlib
import re
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

import pods

ROOT = Path(__file__).resolve().parents[1]


def frozen_sha256() -> str:
    text = (ROOT / "results/headline_v3/frozen.env").read_text()
    return re.search(r"^POLICY_SHA256=([0-9a-f]{64})$", text, re.M).group(1)


def test_model_headline_points_at_the_shipped_policy(make_cfg):
    cfg = make_cfg("model=headline")
    assert Path(cfg.model.path) == pods.ASSETS / "headline"


def test_shipped_policy_hash_is_the_frozen_one():
    weights = pods.ASSETS / "headline/model.safetensors"
    digest = hashlib.sha256(weights.read_bytes()).hexdigest()
    assert digest == frozen_sha256()
    assert (pods.ASSETS / "headline/model.sha256").read_text().split()[0] == digest


def test_shipped_policy_loads_and_answers():
    path = pods.ASSETS / "headline"
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    assert sum(p.numel() for p in model.parameters()) == 10_746_624
    enc = tok(
        ["State the final answer to the following arithmetic problem: 2 + 3 =\n"],
        return_tensors="pt",
        add_special_tokens=False,
    )
    out = model.generate(**enc, max_new_tokens=40, do_sample=False, pad_token_id=tok.pad_token_id)
    text = tok.decode(out[0, enc["input_ids"].shape[1] :], skip_special_tokens=True)
    assert "<answer>" in text  # the SFT format: worked steps, then the answer
