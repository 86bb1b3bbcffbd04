"""Run a sweep's runs in parallel, one per GPU (or several per GPU), as plain `python -m pods.train` processes.

Hydra's basic launcher runs a multirun one job after another; on a node with several GPUs this runs the
same cartesian product of overrides with one process per device slot. Each run gets its own directory
under --out, named like the Hydra sweep subdir, so `python -m pods.compare <out>` reads it directly.

    python scripts/launch_parallel.py --out outputs/sweeps/headline --gpus 4 \
        --sweep arm=none-n16-m16,max_variance-n64-m16 --sweep seed=1,2,3 -- experiment=gsm8k_main scale=gpu

`--case` adds alternatives that are not a product of single keys (e.g. GRPO 16/16 next to PODS at several
n): each --case is one space-separated set of overrides, and the cases form one more axis of the product,
after the --sweep axes. Runs fill the slots GPU by GPU in the order of the product (the first --per-gpu runs
go to GPU 0), so putting `seed` first gives each GPU the same mix of runs. With CUDA_VISIBLE_DEVICES set
(e.g. `1,2,3` while GPU 0 does other work), GPU k of --gpus is the k-th device listed there.
"""

from __future__ import annotations

import argparse
import itertools
import os
import subprocess
import sys
import time
from pathlib import Path


def expand(sweeps: list[str], cases: list[str] | None = None) -> list[list[str]]:
    """['a=1,2', 'b=x'] -> [['a=1', 'b=x'], ['a=2', 'b=x']] (cartesian product, in order);
    cases ['c=1 d=2', 'c=3'] add one axis whose values are those override sets."""
    axes = []
    for s in sweeps:
        key, vals = s.split("=", 1)
        axes.append([[f"{key}={v}"] for v in vals.split(",")])
    if cases:
        axes.append([c.split() for c in cases])
    return [[o for part in combo for o in part] for combo in itertools.product(*axes)]


def devices(gpus: int, visible: str | None) -> list[str]:
    """The CUDA_VISIBLE_DEVICES value of each of the `gpus` slots' devices: the first `gpus` of `visible`
    (the caller's own CUDA_VISIBLE_DEVICES) when set, else 0..gpus-1."""
    listed = (
        [d.strip() for d in visible.split(",") if d.strip()] if visible else [str(g) for g in range(gpus)]
    )
    if gpus > len(listed):
        raise SystemExit(f"--gpus {gpus} but CUDA_VISIBLE_DEVICES={visible} lists {len(listed)} device(s)")
    return listed[:gpus]


def run_name(overrides: list[str]) -> str:
    return "_".join(o.lstrip("+").replace("=", "-").replace("/", "-") for o in overrides)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True)
    p.add_argument("--gpus", type=int, default=1, help="devices; runs are assigned round-robin")
    p.add_argument("--per-gpu", type=int, default=1, help="concurrent runs per device")
    p.add_argument("--sweep", action="append", default=[], help="key=v1,v2 (repeatable)")
    p.add_argument("--case", action="append", default=[], help="'k1=v1 k2=v2': one alternative (repeatable)")
    p.add_argument("common", nargs="*", help="overrides for every run (after --)")
    args = p.parse_args()
    jobs = expand(args.sweep, args.case)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    device = devices(args.gpus, os.environ.get("CUDA_VISIBLE_DEVICES"))
    slots = [(g, k) for g in range(args.gpus) for k in range(args.per_gpu)]
    running: dict[tuple[int, int], tuple[subprocess.Popen, str]] = {}
    failed = []
    t0 = time.time()
    while jobs or running:
        for slot in slots:
            if slot not in running and jobs:
                over = jobs.pop(0)
                name = run_name(over)
                env = {**os.environ, "CUDA_VISIBLE_DEVICES": device[slot[0]]}
                cmd = [sys.executable, "-m", "pods.train", *args.common, *over, f"hydra.run.dir={out / name}"]
                log = open(out / f"{name}.log", "w")  # noqa: SIM115 - lives as long as the child
                running[slot] = (subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT), name)
                print(f"[{time.time() - t0:6.0f}s] start {name} on gpu {device[slot[0]]}", flush=True)
        time.sleep(1)
        for slot, (proc, name) in list(running.items()):
            if proc.poll() is not None:
                print(f"[{time.time() - t0:6.0f}s] done  {name} rc={proc.returncode}", flush=True)
                if proc.returncode:
                    failed.append(name)
                del running[slot]
    print(f"all done in {time.time() - t0:.0f}s; failed: {failed or 'none'}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
