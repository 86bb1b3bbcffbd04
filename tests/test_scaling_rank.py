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
