"""bench/scaling_rank.py: a profiled step's summary (NCCL and kernel device time, top entries)."""

from types import SimpleNamespace

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
