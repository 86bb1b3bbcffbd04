"""bench/scaling_rank.py: a profiled step's summary (NCCL and kernel device time, top entries)."""

from types import SimpleNamespace

from bench.scaling_rank import summarize


def ev(key, device_us, cpu_us, count=1):
    return SimpleNamespace(key=key, self_device_time_total=device_us, self_cpu_time_total=cpu_us, count=count)


def test_summary_sums_nccl_kernels_apart_from_the_rest():
    events = [
        ev("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 3000.0, 10.0, 2),
        ev("ncclKernel_AllGather_RING_LL_Sum_int8_t", 500.0, 5.0, 1),
        ev("ampere_bf16_s16816gemm", 8000.0, 0.0, 40),
        ev("aten::mm", 0.0, 900.0, 40),
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


def fe(name, kernels=(), children=()):
    """A stand-in profiler FunctionEvent: its own kernels (name, duration in us) and its CPU children."""
    ks = [SimpleNamespace(name=n, duration=us) for n, us in kernels]
    return SimpleNamespace(name=name, kernels=ks, cpu_children=list(children))


def test_phase_device_time_sums_the_kernels_launched_inside_each_phase_range():
    from bench.scaling_rank import phase_device_ms

    compile_ = fe("phase/compile", children=[fe("aten::mm", [("gemm", 4000.0)])])
    gen = fe("phase/generation", children=[fe("aten::mm", [("gemm", 1000.0)]), compile_])
    update = fe(
        "phase/update",
        children=[
            fe("aten::mm", [("gemm", 2000.0)], [fe("aten::copy_", [("copy", 500.0)])]),
            fe("c10d::reduce_scatter", [("ncclDevKernel_ReduceScatter_Sum_f32", 3000.0)]),
        ],
    )
    events = [
        gen,
        compile_,
        update,
        *update.cpu_children,
        fe("aten::add", [("add", 9e6)]),
    ]  # flat, as events()
    out = phase_device_ms(events)
    assert out == {
        "generation": {"kernels_ms": 1.0, "nccl_ms": 0.0},  # compile's kernels are its own
        "compile": {"kernels_ms": 4.0, "nccl_ms": 0.0},
        "update": {"kernels_ms": 5.5, "nccl_ms": 3.0},
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
