"""scripts/bench_gpu.py's summary: per-phase peaks (largest over the measured steps) and the update's
per-step diagnostics reach results.json and the markdown."""

from __future__ import annotations

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
