"""Checkpoint files: model (or adapter) beside trainer_state.pt, which holds the state of every component.

What goes into trainer_state.pt is pods/resume.py's business; here are the files, the `Stateful` interface
every checkpointed component has, and `RngStreams`, the process's random streams as such a component.

Each checkpoint is written into a temporary directory, fsynced, and renamed into place, then `latest` is
replaced atomically: a crash in the middle of a save leaves the previous checkpoint intact and named.
Re-saving a step never deletes the good copy first: the old directory is renamed aside (.old_step_N),
the new one renamed in, and only then the old one removed; `latest_checkpoint` finds an .old_ copy if a
kill landed between the two renames. Pruned checkpoints are renamed to .trash_ before deletion, so a
half-deleted directory never looks like a checkpoint; a temporary directory a kill left behind is removed after
the next save. Each checkpoint has a small meta.json (step, how many metrics.jsonl lines it covers, the config
it was saved under) so a resume can pick one without loading the optimizer state,
and the size and SHA-256 of every file, read back from disk at save time: a resume verifies them
(`verify`) and never loads a damaged or half-written file. A save that fails (a full disk) removes its
temporary directory and raises one line (CheckpointError); the previous checkpoint and `latest` stay.
trainer_state.pt is loaded with weights_only=True: tensors, containers, numpy's numbers and numeric arrays only;
`unreadable(state)` says whether a state would load back (pods.testing and the trainer's saves ask it).
"""

from __future__ import annotations

import errno
import hashlib
import io
import json
import logging
import os
import random
import re
import shutil
from pathlib import Path
from typing import Protocol

import numpy as np
import torch

from pods.errors import CheckpointError
from pods.files import fresh_dir, open_write, refuse_link

LATEST = "latest"
META = "meta.json"
log = logging.getLogger("pods")


class Stateful(Protocol):
    """A component a checkpoint saves and restores (sampler, prefilter, scheduler, clocks, ...)."""

    def state_dict(self) -> dict: ...

    def load_state_dict(self, state: dict) -> None: ...


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


class RngStreams:
    """This process's random streams: python, numpy, torch (and CUDA) global ones, and the selection
    generator (`random` down-sampling draws from it). Generation consumes them differently on each rank,
    so a checkpoint keeps one state per rank."""

    def __init__(self, select: torch.Generator):
        self.select = select

    def state_dict(self) -> dict:
        return {"global": rng_state(), "select": self.select.get_state()}

    def load_state_dict(self, state: dict) -> None:
        set_rng_state(state["global"])
        self.select.set_state(state["select"])


def save_checkpoint(
    ckpt_root: Path,
    step: int,
    model,
    trainer_state: dict,
    keep_last: int,
    model_state: dict | None = None,
    meta: dict | None = None,
) -> Path:
    """Write step_<step>/ atomically. `model_state`: a full state dict to save instead of the model's own
    (FSDP gathers one, since the module holds only this rank's shard). `meta`: small facts saved in
    meta.json beside it (the trainer records how many metrics lines the checkpoint covers)."""
    fresh_dir(ckpt_root)  # a link in place of checkpoints/ (or of any name below) is refused: pods/files.py
    final = ckpt_root / f"step_{step:07d}"
    tmp = ckpt_root / f".tmp_step_{step:07d}"
    try:
        _write(tmp, step, model, trainer_state, model_state, meta)
        _publish(ckpt_root, tmp, final)
    except Exception as e:
        full = _disk_full(e, ckpt_root)  # before the partial copy is removed and frees its space
        shutil.rmtree(tmp, ignore_errors=True)
        if not full:
            raise
        prev = latest_checkpoint(ckpt_root)
        kept = f"{prev.name} and `latest` are intact" if prev else "there is no earlier checkpoint"
        raise CheckpointError(
            f"checkpoint of step {step} not saved: no space left on device in {ckpt_root}; {kept}. Free "
            "space, or copy the run directory to a larger disk and resume there with resume=true"
        ) from None
    _prune(ckpt_root, keep_last)
    return final


def _write(tmp: Path, step: int, model, trainer_state: dict, model_state: dict | None, meta: dict | None):
    refuse_link(tmp)
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(exist_ok=True)  # this save's own directory (not a link): what is written below lands in it
    if model_state is None:
        model.save_pretrained(tmp / "model")  # a peft model saves only its adapter
    else:
        model.save_pretrained(tmp / "model", state_dict=model_state)
    # trainer_state.pt's presence marks a checkpoint complete; meta.json, last, holds every file's checksum
    save_state({**trainer_state, "step": step}, tmp / "trainer_state.pt")
    _fsync_dir(tmp)
    files = {str(p.relative_to(tmp)): _digest(p) for p in sorted(tmp.rglob("*")) if p.is_file()}
    (tmp / META).write_text(json.dumps({**(meta or {}), "step": step, "files": files}))
    _fsync_dir(tmp)


def _publish(ckpt_root: Path, tmp: Path, final: Path) -> None:
    """Rename the written copy into place and point `latest` at it."""
    old = ckpt_root / f".old_{final.name}"
    checkpoints(ckpt_root)  # finish a swap a kill interrupted (restores an .old_ copy if it is the only one)
    _remove(old, ckpt_root)  # what is left of .old_ now is a stale copy beside a complete `final`
    if final.exists():  # re-saving a step: keep the good copy until the new one is in place
        os.replace(final, old)
        _fsync_dir(ckpt_root, files=False)
    os.replace(tmp, final)
    pointer = ckpt_root / f".{LATEST}.tmp"
    with open_write(pointer, "w") as f:
        f.write(final.name)
        f.flush()
        os.fsync(f.fileno())
    os.replace(pointer, ckpt_root / LATEST)
    _fsync_dir(ckpt_root, files=False)
    _remove(old, ckpt_root)


def _disk_full(e: BaseException, path: Path) -> bool:
    """Did a write fail for want of space? safetensors says so only in its message (SafetensorError) and
    torch.save not at all ("unexpected pos ..."): then the filesystem's free space tells."""
    if getattr(e, "errno", None) in (errno.ENOSPC, errno.EDQUOT) or "No space left on device" in str(e):
        return True
    try:
        return shutil.disk_usage(path).free < (1 << 20)
    except OSError:
        return False


def _digest(path: Path) -> list:
    """[size in bytes, sha256 hex] of a file as it is on disk."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            h.update(chunk)
    return [path.stat().st_size, h.hexdigest()]


def verify(ckpt: Path) -> str | None:
    """What is wrong with a checkpoint's files (a size or checksum that differs from what was saved, a file
    missing, meta.json unreadable or lacking its fields), or None. Checkpoints of older pods have no
    checksums: not checked."""
    try:
        meta = json.loads((ckpt / META).read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError, RecursionError) as e:
        return f"{META} unreadable ({type(e).__name__})"
    bad = meta_problem(meta, ckpt)
    if bad:
        return f"{META} {bad}"
    for name, (size, digest) in (meta.get("files") or {}).items():
        path = ckpt / name
        if not path.is_file():
            return f"{name} missing"
        if path.stat().st_size != size:
            return f"{name} is {path.stat().st_size} bytes, {size} were saved"
        if _digest(path)[1] != digest:
            return f"{name} checksum differs from the one saved"
    return None


def _int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def meta_problem(meta, ckpt: Path) -> str | None:
    """What meta.json lacks or holds of the wrong kind (valid JSON is not enough), or None. `step` is
    required and must be the directory's; the other fields, when present, must have their types."""
    if not isinstance(meta, dict):
        return "is not a JSON object"
    step = meta.get("step")
    if not _int(step) or step < 0:
        return f"has no valid step ({step!r})"
    name = ckpt.name.removeprefix(".old_")
    if name.startswith("step_") and name[5:].isdigit() and int(name[5:]) != step:
        return f"says step {step}, its directory {name}"
    files = meta.get("files")
    if files is not None and not (
        isinstance(files, dict)
        and all(
            isinstance(v, list) and len(v) == 2 and _int(v[0]) and isinstance(v[1], str)
            for v in files.values()
        )
    ):
        return "has a malformed file list"
    for key in ("metrics_lines", "last_eval_step"):
        if meta.get(key) is not None and not _int(meta[key]):
            return f"has a malformed {key} ({meta[key]!r})"
    if meta.get("config") is not None and not isinstance(meta["config"], dict):
        return "has a malformed config"
    data = meta.get("train_data")
    if data is not None and not (
        isinstance(data, dict) and _int(data.get("rows")) and isinstance(data.get("sha256"), str)
    ):
        return "has a malformed train_data"
    return None


def _fsync_dir(path: Path, files: bool = True) -> None:
    for p in [*path.rglob("*")] if files else []:
        if p.is_file():
            with open(p, "rb") as f:
                os.fsync(f.fileno())
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _complete(path: Path) -> bool:
    return (path / "trainer_state.pt").is_file()


def _remove(path: Path, ckpt_root: Path) -> None:
    """Delete a directory so that no kill leaves a half-deleted one under a checkpoint's name."""
    if not path.exists():
        return
    trash = ckpt_root / f".trash_{path.name.lstrip('.')}"
    shutil.rmtree(trash, ignore_errors=True)
    os.replace(path, trash)
    shutil.rmtree(trash, ignore_errors=True)


def _prune(ckpt_root: Path, keep_last: int) -> None:
    for trash in ckpt_root.glob(".trash_*"):  # a deletion a kill interrupted: finish it
        shutil.rmtree(trash, ignore_errors=True)
    for torn in ckpt_root.glob(".tmp_step_*"):  # saves a kill (or a second Ctrl-C) cut short; the run dir's
        shutil.rmtree(torn, ignore_errors=True)  # lock (pods/runlock.py) says no other process is writing one
    done = sorted(p for p in ckpt_root.glob("step_*") if p.is_dir())
    for old in done[: max(len(done) - max(keep_last, 1), 0)]:  # the newest is always kept
        _remove(old, ckpt_root)


def checkpoints(ckpt_root: Path) -> list[Path]:
    """Complete checkpoints, newest first. A step whose directory is missing but whose .old_ copy is
    complete (a kill between the two renames of a re-save) is restored first."""
    if not ckpt_root.is_dir():
        return []
    for old in ckpt_root.glob(".old_step_*"):
        final = ckpt_root / old.name[len(".old_") :]
        if _complete(old) and not _complete(final):
            shutil.rmtree(final, ignore_errors=True)
            os.replace(old, final)
    return sorted((p for p in ckpt_root.glob("step_*") if _complete(p)), reverse=True)


def latest_checkpoint(ckpt_root: Path) -> Path | None:
    """The newest complete checkpoint, or None. Falls back to scanning if the pointer is stale."""
    done = checkpoints(ckpt_root)
    pointer = ckpt_root / LATEST
    if pointer.exists():
        name = pointer.read_bytes()[:64].decode("utf-8", "replace").strip()
        cand = ckpt_root / name
        if name.startswith("step_") and cand in done:
            return cand
        if done:
            log.warning("%s names %r, not a complete checkpoint; using %s", pointer, name, done[0].name)
    return done[0] if done else None


def read_meta(ckpt: Path) -> dict:
    """meta.json of a checkpoint ({"step", "metrics_lines", ...}); older checkpoints have only their step."""
    path = ckpt / META
    if path.is_file():
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError):
            pass
    return {"step": int(load_trainer_state(ckpt)["step"])}


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


# What trainer_state.pt may hold besides tensors and containers: numpy's numbers and numeric arrays (its RNG
# state is one; a component's state may hold more), rebuilt from their dtype and bytes. weights_only=True
# refuses anything else (an object array, a numpy Generator, a class of a plugin's), so a foreign checkpoint
# directory cannot run code on load.
try:
    _multiarray = np._core.multiarray  # numpy >= 2
except AttributeError:
    _multiarray = np.core.multiarray
_NUMERIC = "?bBhHiIlLqQefdgFDG"  # bool, the integers, the floats and complex numbers (numpy's type codes)
_SAFE_GLOBALS = [
    np.ndarray,
    np.dtype,
    _multiarray._reconstruct,  # an array
    _multiarray.scalar,  # a number: np.float64(0.5), np.int64(3)
    *dict.fromkeys(type(np.dtype(code)) for code in _NUMERIC),  # Float64DType, ...: the dtypes themselves
]


def save_state(state: dict, f) -> None:
    """torch.save, as trainer_state.pt is written (`f`: a path or a binary file)."""
    torch.save(state, f)


def load_state(f) -> dict:
    """torch.load with weights_only=True and numpy's numbers and arrays allowed, as a resume reads it."""
    with torch.serialization.safe_globals(_SAFE_GLOBALS):
        return torch.load(f, weights_only=True)


def round_trip(state):
    """`state` saved and loaded back as a checkpoint holds it; raises what the load raises."""
    buf = io.BytesIO()
    save_state(state, buf)
    buf.seek(0)
    return load_state(buf)


def unreadable(state) -> str | None:
    """Why `state` could be saved in a checkpoint but not read back by a resume (one line), or None."""
    try:
        round_trip(state)
    except Exception as e:  # noqa: BLE001 - pickle and the weights_only unpickler raise many types
        return load_failure(e)
    return None


def load_failure(e: BaseException) -> str:
    """torch.save's or a weights_only load's error in one line: the type it met, else its first line."""
    text = str(e)
    what = re.search(r"Unsupported global: GLOBAL (\S+)|but got <class '([^']+)'>", text)
    if what:
        return f"it holds a {what.group(1) or what.group(2)}, which a weights_only load refuses"
    return f"{type(e).__name__}: {(text.strip().splitlines() or [''])[0][:200]}"


def load_trainer_state(ckpt: Path) -> dict:
    return load_state(ckpt / "trainer_state.pt")
