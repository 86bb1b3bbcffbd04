"""One process of a scaling point (scripts/bench_scaling.py), launched by torchrun: `pods.train.run` on the
composed config, the real Trainer, with one step profiled by torch.profiler.

    torchrun --nproc_per_node 4 -m bench.scaling_rank --profile-step 6 -- run_dir=/tmp/x model=... plugins=[bench.harness]

The profiled step (take the last: the profiler slows it) writes `profile_rank<r>.json` into the run dir: the
step's device time in NCCL kernels and in all kernels, and the top kernels and host ops by self time.
With `--decode-parts` every step's generation is also split by the graph loop's parts (StepDecoder.phase_seconds:
reclaim, prefill, eager, capture, replay, with a device sync at each part's edges) into
`decode_parts_rank<r>.jsonl`, the rest of generation (and of a warm-up's compile) as `other` (rows' bookkeeping,
LoRA merge, copies out).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from pods.callbacks import Callback

TOP = 12


def _self_device_us(e) -> float:
    return float(getattr(e, "self_device_time_total", None) or getattr(e, "self_cuda_time_total", 0.0))


def _kernel(e) -> bool:
    """A device-side event that is a kernel (or copy): not a CPU op, whose self device time repeats the
    kernels it launched, nor a user annotation (a record_function range's span on the GPU, `nccl:*` and
    `phase/*` among them). Counting either would count a kernel twice (torch's own total skips both)."""
    return _on_device(e) and not getattr(e, "is_user_annotation", False)


def summarize(events, rank: int, step: int) -> dict:
    """profiler.key_averages() -> the step's NCCL and kernel device time (ms, kernels only) and the top
    entries. Pure on its input, so a CPU test can feed it stand-in events."""
    dev = sorted(((e.key, _self_device_us(e) / 1e3, e.count) for e in events if _kernel(e) and _self_device_us(e) > 0),
                 key=lambda x: -x[1])  # fmt: skip
    host = sorted(((e.key, e.self_cpu_time_total / 1e3, e.count) for e in events), key=lambda x: -x[1])
    nccl = [d for d in dev if _is_nccl(d[0])]
    return {
        "rank": rank,
        "step": step,
        "nccl_ms": sum(d[1] for d in nccl),
        "nccl_kernels": sum(d[2] for d in nccl),
        "kernels_ms": sum(d[1] for d in dev),
        "top_device": [list(d) for d in dev[:TOP]],
        "top_host": [list(h) for h in host[:TOP]],
    }


def phase_device_ms(events, prefix: str = "phase/") -> dict[str, dict[str, float]]:
    """profiler.events() -> per pods phase (PhaseTimer's `phase/<name>` ranges), the device ms of the kernels
    that started inside the phase's time range, all of them and NCCL's; a kernel inside a nested phase
    (compile in generation) counts for the innermost. By time, not by the CPU op that launched a kernel: the
    backward's kernels (DDP's all-reduce, FSDP's reduce-scatter among them) are launched from autograd's own
    thread, outside the main thread's ranges. The phases synchronise the GPU at both ends, so a kernel runs
    within the phase that launched it. An NCCL kernel's time includes its wait for the slowest rank."""
    ranges = sorted(
        (e.time_range.start, e.time_range.end, e.name[len(prefix) :])
        for e in events
        if e.name.startswith(prefix) and not _on_device(e)
    )
    out = {name: {"kernels_ms": 0.0, "nccl_ms": 0.0} for *_, name in ranges}
    for e in events:
        if not _kernel(e):
            continue
        t = e.time_range.start
        inside = [r for r in ranges if r[0] <= t < r[1]]
        if inside:
            d = out[inside[-1][2]]  # the latest-starting range that holds it: the innermost
            d["kernels_ms"] += e.time_range.elapsed_us() / 1e3
            if _is_nccl(e.name):
                d["nccl_ms"] += e.time_range.elapsed_us() / 1e3
    return out


def _is_nccl(name: str) -> bool:
    """A collective's kernel (its name says NCCL), as the NCCL columns count it."""
    return "nccl" in name.lower()


def _on_device(e) -> bool:
    return getattr(e.device_type, "name", str(e.device_type)) != "CPU"


class ProfileStep(Callback):
    """Profile one optimizer step (CPU and, on a GPU, CUDA activity) and write its summary per rank."""

    def __init__(self, step: int):
        self.step, self.prof = step, None

    def on_step_start(self, trainer) -> None:
        if trainer.step + 1 == self.step:
            acts = [torch.profiler.ProfilerActivity.CPU]
            if torch.cuda.is_available():
                acts.append(torch.profiler.ProfilerActivity.CUDA)
            self.prof = torch.profiler.profile(activities=acts)
            self.prof.__enter__()

    def on_step_end(self, trainer, record: dict) -> None:
        if self.prof is None or trainer.step != self.step:
            return
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        self.prof.__exit__(None, None, None)
        out = summarize(self.prof.key_averages(), trainer.dist.rank, self.step)
        out["phases"] = phase_device_ms(self.prof.events())
        (trainer.run_dir / f"profile_rank{trainer.dist.rank}.json").write_text(json.dumps(out, indent=1))
        self.prof = None


DECODE_PARTS = ("reclaim", "prefill", "eager", "capture", "replay")


class DecodeParts(Callback):
    """Each step's generation split by the graph loop's parts (seconds, summed over the step's generate calls),
    one line per step in `decode_parts_rank<r>.jsonl`; `other` is the step's timing/generation (plus
    timing/compile: a new shape's warm-up decodes inside it) minus the parts, `tokens` the decode steps run.
    A step in which a decoder was made (a new row count) is not timed (`timed: false`): that decoder ran
    without its clock; decoders are timed from the next step on."""

    def on_step_start(self, trainer) -> None:
        for dec in getattr(trainer.backend, "step_decoders", {}).values():
            dec.phase_seconds = {}

    def on_step_end(self, trainer, record: dict) -> None:
        parts = dict.fromkeys(DECODE_PARTS, 0.0)
        decs = list(getattr(trainer.backend, "step_decoders", {}).values())
        # a decoder made during the step decoded untimed: its seconds would all read as `other`
        timed = bool(decs) and all(d.phase_seconds is not None for d in decs)
        tokens = 0
        for dec in decs if timed else []:
            for k, v in dec.phase_seconds.items():
                if k == "steps":
                    tokens += int(v)
                elif k in parts:
                    parts[k] += v
        # a new prompt width's warm-up decodes too, timed as `compile` outside generation's clock
        spent = record.get("timing/generation", 0.0) + record.get("timing/compile", 0.0)
        line = {"step": trainer.step, "timed": timed, "tokens": tokens, **parts}
        line["other"] = spent - sum(parts.values()) if timed else 0.0
        with open(trainer.run_dir / f"decode_parts_rank{trainer.dist.rank}.jsonl", "a") as f:
            f.write(json.dumps(line) + "\n")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--profile-step", type=int, default=0, help="0: none")
    p.add_argument("--decode-parts", action="store_true", help="split generation by the graph loop's parts")
    p.add_argument("overrides", nargs="*", help="pods config overrides (run_dir=... among them)")
    a = p.parse_args()
    from bench.harness import compose_train
    from pods.train import run

    cfg = compose_train(a.overrides)
    Path(cfg.run_dir).mkdir(parents=True, exist_ok=True)
    callbacks = [ProfileStep(a.profile_step)] if a.profile_step else []
    run(cfg, callbacks=callbacks + ([DecodeParts()] if a.decode_parts else []))


if __name__ == "__main__":
    main()
