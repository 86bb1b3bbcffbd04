"""Checkpoints: model (or adapter), optimizer, scheduler, RNG streams, sampler/selector state, counters.

Each checkpoint is written into a temporary directory and renamed into place, then `latest` is
replaced atomically: a crash in the middle of a save leaves the previous checkpoint intact and named.
"""

from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path

import numpy as np
import torch

LATEST = "latest"


def rng_state() -> dict:
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_checkpoint(
    ckpt_root: Path, step: int, model, trainer_state: dict, keep_last: int, model_state: dict | None = None
) -> Path:
    """Write step_<step>/ atomically. `model_state`: a full state dict to save instead of the model's own
    (FSDP gathers one, since the module holds only this rank's shard)."""
    ckpt_root.mkdir(parents=True, exist_ok=True)
    final = ckpt_root / f"step_{step:07d}"
    tmp = ckpt_root / f".tmp_step_{step:07d}"
    shutil.rmtree(tmp, ignore_errors=True)
    if model_state is None:
        model.save_pretrained(tmp / "model")  # a peft model saves only its adapter
    else:
        model.save_pretrained(tmp / "model", state_dict=model_state)
    torch.save({**trainer_state, "rng": rng_state(), "step": step}, tmp / "trainer_state.pt")
    _fsync_dir(tmp)
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    pointer = ckpt_root / f".{LATEST}.tmp"
    pointer.write_text(final.name)
    os.replace(pointer, ckpt_root / LATEST)
    _fsync_dir(ckpt_root)
    _prune(ckpt_root, keep_last)
    return final


def _fsync_dir(path: Path) -> None:
    for p in [*path.rglob("*"), path]:
        if p.is_file():
            with open(p, "rb") as f:
                os.fsync(f.fileno())
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _prune(ckpt_root: Path, keep_last: int) -> None:
    done = sorted(p for p in ckpt_root.glob("step_*") if p.is_dir())
    for old in done[: max(len(done) - keep_last, 0)]:
        shutil.rmtree(old, ignore_errors=True)


def latest_checkpoint(ckpt_root: Path) -> Path | None:
    """The newest complete checkpoint, or None. Falls back to scanning if the pointer is stale."""
    pointer = ckpt_root / LATEST
    if pointer.exists():
        cand = ckpt_root / pointer.read_text().strip()
        if (cand / "trainer_state.pt").exists():
            return cand
    done = sorted(p for p in ckpt_root.glob("step_*") if (p / "trainer_state.pt").exists())
    return done[-1] if done else None


def load_weights(model, ckpt: Path, lora: bool) -> None:
    """Load saved weights into the already-built model (full weights or the LoRA adapter)."""
    from safetensors.torch import load_file

    src = ckpt / "model"
    if lora:
        from peft import set_peft_model_state_dict

        set_peft_model_state_dict(model, load_file(src / "adapter_model.safetensors"))
        return
    state = read_weights(ckpt)
    missing, unexpected = model.load_state_dict(state, strict=False)
    bad = [k for k in missing if "lm_head" not in k]  # tied embeddings are saved once
    if bad or unexpected:
        raise RuntimeError(
            f"checkpoint {src} does not match the model: missing {bad[:5]}, unexpected {unexpected[:5]}"
        )


def read_weights(ckpt: Path) -> dict:
    """The full weights of a checkpoint as one state dict (all safetensors shards)."""
    from safetensors.torch import load_file

    src = ckpt / "model"
    index = src / "model.safetensors.index.json"
    shards = (
        sorted(set(json.loads(index.read_text())["weight_map"].values()))
        if index.exists()
        else ["model.safetensors"]
    )
    state = {}
    for shard in shards:
        state.update(load_file(src / shard))
    return state


def load_trainer_state(ckpt: Path) -> dict:
    return torch.load(ckpt / "trainer_state.pt", weights_only=False)
