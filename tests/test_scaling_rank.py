"""bench/scaling_rank.py: a profiled step's summary (NCCL and kernel device time, top entries)."""

from types import SimpleNamespace

import pytest

from bench.scaling_rank import summarize


def ev(key, device_us, cpu_us, count=1, device="CUDA", annotation=False):
    return SimpleNamespace(key=key, self_device_time_total=device_us, self_cpu_time_total=cpu_us, count=count,
                           device_type=SimpleNamespace(name=device), is_user_annotation=annotation)  # fmt: skip


def test_summary_sums_nccl_kernels_apart_from_the_rest():
    events = [
        ev("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 3000.0, 10.0, 2),
        ev("ncclKernel_AllGather_RING_LL_Sum_int8_t", 500.0, 5.0, 1),
        ev("ampere_bf16_s16816gemm", 8000.0, 0.0, 40),
        ev("aten::mm", 0.0, 900.0, 40, device="CPU"),
        # the same time again: the CPU op that launched a collective, and the ranges' spans on the GPU
        ev("nccl:all_reduce", 3000.0, 40.0, 2, device="CPU"),
        ev("nccl:all_reduce", 3000.0, 0.0, 2, annotation=True),
        ev("record_param_comms", 3500.0, 0.0, 3, annotation=True),
        ev("phase/update", 11500.0, 0.0, 1, annotation=True),
    ]
    out = summarize(events, rank=1, step=7)
    assert (out["rank"], out["step"]) == (1, 7)
    assert out["nccl_ms"] == 3.5 and out["nccl_kernels"] == 3
    assert out["kernels_ms"] == 11.5  # host-only ops carry no device time
    assert [k for k, _, _ in out["top_device"]] == [
        "ampere_bf16_s16816gemm",
        "ncclDevKernel_AllReduce_Sum_f32_RING_LL",
        "ncclKernel_AllGather_RING_LL_Sum_int8_t",
    ]
    assert out["top_host"][0] == ["aten::mm", 0.9, 40]


def fe(name, start, end, device="CPU", annotation=False):
    """A stand-in profiler FunctionEvent: a name, a time range (us), where it ran, whether it is a range."""
    rng = SimpleNamespace(start=start, end=end, elapsed_us=lambda: end - start)
    return SimpleNamespace(name=name, time_range=rng, device_type=SimpleNamespace(name=device),
                           is_user_annotation=annotation)  # fmt: skip


def test_phase_device_time_sums_the_kernels_that_start_inside_each_phase_range():
    from bench.scaling_rank import phase_device_ms

    events = [
        fe("phase/generation", 0, 100), fe("phase/compile", 10, 40), fe("phase/update", 100, 200),
        fe("phase/update", 100, 200, "CUDA", True),  # the range's own span on the GPU: not a kernel
        fe("nccl:_reduce_scatter_base", 150, 3150, "CUDA", True),  # nor a collective's range
        fe("aten::mm", 1, 2),  # host ops carry no device time here
        fe("gemm", 5, 6000, "CUDA"), fe("gemm", 20, 3020, "CUDA"),  # generation; compile (innermost)
        fe("gemm", 120, 2120, "CUDA"),  # update, launched by autograd's thread: counted by its time
        fe("ncclDevKernel_ReduceScatter_Sum_f32", 150, 3150, "CUDA"),
        fe("gemm", 250, 9e6, "CUDA"),  # outside every phase
    ]  # fmt: skip
    assert phase_device_ms(events) == {
        "generation": {"kernels_ms": 5.995, "nccl_ms": 0.0},
        "compile": {"kernels_ms": 3.0, "nccl_ms": 0.0},
        "update": {"kernels_ms": 5.0, "nccl_ms": 3.0},
    }


def test_the_phase_timer_names_its_phases_in_a_profile():
    import torch

    from bench.scaling_rank import phase_device_ms
    from pods.timing import PhaseTimer

    t = PhaseTimer()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        with t.phase("update"):
            torch.ones(4) @ torch.ones(4)
        with t.phase("generation"), t.phase("compile"):
            pass
    assert set(phase_device_ms(prof.events())) == {"update", "generation", "compile"}


def test_decode_parts_split_a_real_graph_loop_generation_and_the_bench_reads_them(tmp_path):
    """DecodeParts on the graph loop (eager on a CPU: no capture) with the tiny policy: the parts and `other`
    add up to the step's generation and compile time with `other` not negative (a new width's warm-up decodes
    inside compile), a step that makes a decoder is not timed, and bench_scaling merges rank 0's timed lines
    into the read records and tables them."""
    import json
    from pathlib import Path
    from types import SimpleNamespace

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from bench.scaling_rank import DECODE_PARTS, DecodeParts
    from pods.rollout.hf import HFGenerator
    from pods.timing import PhaseTimer
    from scripts.bench_scaling import decode_table, merge_decode_parts

    tiny = Path(__file__).resolve().parents[1] / "pods" / "assets" / "tiny"
    tok = AutoTokenizer.from_pretrained(tiny)
    tok.pad_token = tok.pad_token or tok.eos_token
    model = AutoModelForCausalLM.from_pretrained(tiny, dtype=torch.float32).eval()
    timer = PhaseTimer()
    g = HFGenerator(model, tok, "cpu", 4, 12, compiled=True, dtype=torch.float32, prompt_bucket=16,
                    max_prompt_len=64, timer=timer, loop="graph")  # fmt: skip
    trainer = SimpleNamespace(backend=g, run_dir=tmp_path, dist=SimpleNamespace(rank=0), step=0)
    cb, records = DecodeParts(), []
    # step 1 makes the decoder; step 2 is timed; step 3 a longer prompt: a new width, whose warm-up decodes
    # (timed as compile) fall in the parts; step 4 a new row count: a decoder made in the step, not timed
    prompts = {1: ["12 + 7 ="], 2: ["12 + 7 ="], 3: [" + ".join(map(str, range(10))) + " ="], 4: ["5 + 5 ="]}
    for step, n in ((1, 4), (2, 4), (3, 4), (4, 2)):
        cb.on_step_start(trainer)
        with timer.phase("generation"):
            g.generate(prompts[step], [0], n, 1.0)
        trainer.step = step
        rec = {"kind": "train", "step": step, **timer.pop_step()}
        cb.on_step_end(trainer, rec)
        records.append(rec)
    lines = [json.loads(x) for x in (tmp_path / "decode_parts_rank0.jsonl").read_text().splitlines()]
    assert [(x["step"], x["timed"]) for x in lines] == [(1, False), (2, True), (3, True), (4, False)]
    for line, rec in zip(lines[1:3], records[1:3]):
        assert line["tokens"] >= 1 and line["eager"] > 0 and all(line[k] >= 0 for k in DECODE_PARTS)
        spent = rec["timing/generation"] + rec.get("timing/compile", 0.0)
        assert sum(line[k] for k in DECODE_PARTS) + line["other"] == pytest.approx(spent)
    assert records[2].get("timing/compile", 0.0) > 0 and "timing/compile" not in records[1]
    assert lines[2]["other"] >= -1e-3  # the warm-up's decodes are inside compile's seconds, not beyond them
    assert lines[3]["other"] == 0.0 and lines[3]["tokens"] == 0
    merge_decode_parts(records, tmp_path / "decode_parts_rank0.jsonl")
    assert "decode/eager" not in records[0] and "decode/eager" not in records[3]
    assert records[1]["decode/eager"] == lines[1]["eager"]
    md = decode_table([("ddp", 1, records)])
    assert md.count("| ddp | 1 |") == 1 and "generation + compile s" in md
    assert decode_table([("ddp", 1, [records[0], records[3]])]) == ""  # nothing timed: no table
