"""scripts/bench_gpu.py's summary: per-phase peaks (largest over the measured steps) and the update's
per-step diagnostics reach results.json and the markdown."""

from __future__ import annotations

from bench.harness import frame_key, peak_breakdown
from scripts.bench_gpu import UPDATE_DIAGNOSTICS, markdown, summarize


def _record(step: int, gen_peak: float) -> dict:
    rec = {"kind": "train", "step": step, "timing/step": 1.0, "timing/generation": 0.6, "timing/update": 0.4}
    rec.update({"rollout/tokens": 100.0, "update/tokens": 50.0, "update/prompt_tokens": 10.0})
    rec.update({f"update/{k}": float(step) for k in UPDATE_DIAGNOSTICS})
    rec.update({"memory/peak_generation_gib": gen_peak, "memory/peak_update_gib": 2.0})
    return rec


def test_phase_peaks_and_update_diagnostics_are_reported():
    run = {
        "records": [_record(1, 9.0), _record(2, 3.0), _record(3, 4.0)],  # the first is warm-up: dropped
        "wall_steps": [1.0, 1.0, 1.0],
        "peak_mem_gib": 5.0,
        "trainable_params": 10,
        "frozen_params": 0,
    }
    s = summarize(run, peak_flops=1e12)
    assert s["phase_peak_gib"] == {"generation": 4.0, "update": 2.0}
    assert s["per_step_update_diagnostics"]["cuda_mallocs"] == [2.0, 3.0]
    assert s["per_step_update_diagnostics"]["gc_s"] == [2.0, 3.0]
    md = markdown(
        {"settings": {"grpo16": s}, "ratios": {}, "device_name": "fake", "peak_flops": 1e12, "args": {}}
    )
    assert "| setting | generation | update |" in md and "| grpo16 | 4.00 | 2.00 |" in md


def _event(action: str, addr: int, size: int, where: str = "/site/pods/update/step.py") -> dict:
    return {
        "action": action,
        "addr": addr,
        "size": size,
        "frames": [{"filename": where, "line": 7, "name": "f"}],
    }


def test_peak_breakdown_finds_the_peak_and_what_was_live():
    """A trace that begins with 100 bytes already allocated: the peak (100 + 10 + 5 + 8 - 4 = 119) is reached
    before the later frees; a block allocated before the trace and freed in it leaves 'before the trace'."""
    trace = [
        _event("alloc", 1, 10),
        _event("alloc", 2, 5, "/torch/nn/functional.py"),
        _event("free_completed", 9, 4),  # allocated before the trace
        _event("alloc", 3, 8, "/site/trl/trainer/grpo.py"),
        _event("free_requested", 3, 8),  # only free_completed changes the allocated bytes
        _event("free_completed", 3, 8),
        _event("free_completed", 1, 10),
    ]
    end = 100 + 10 + 5 + 8 - 4 - 8 - 10
    out = peak_breakdown(trace, end_bytes=end)
    assert out["peak_bytes"] == 119
    assert out["groups"] == {
        "before the trace": 96,
        "pods/update/step.py:7 f": 10,
        "trl/trainer/grpo.py:7 f": 8,
        "nn/functional.py:7 f": 5,
    }


def test_frame_key_prefers_the_innermost_application_frame():
    frames = [
        {"filename": "/x/torch/autograd/graph.py", "line": 1, "name": "backward"},
        {
            "filename": "/x/site-packages/transformers/models/qwen2/modeling_qwen2.py",
            "line": 80,
            "name": "fwd",
        },
        {"filename": "/repo/pods/update/step.py", "line": 9, "name": "_micro_step"},
    ]
    assert frame_key(frames) == "transformers/models/qwen2/modeling_qwen2.py:80 fwd"
    assert frame_key(frames[:1]) == "autograd/graph.py:1 backward"
    assert frame_key([]) == "?"
