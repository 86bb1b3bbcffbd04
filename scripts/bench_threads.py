"""Step time of the default run vs torch's CPU thread count, alone and beside busy processes.

    python scripts/bench_threads.py --steps 12 --out results/threads

For each condition (no burner, then `--burners` Python busy-loops) and each hardware.num_threads in
`--threads` (0 = the automatic choice), runs `python -m pods.train max_steps=N eval.at_start=false
eval.at_end=false checkpoint.save_final=false hardware.num_threads=T` and reads the per-step training
time (timing/step) from its metrics.jsonl; the first step (warm-up) is left out. Runs are sequential. The
machine's background load (other users' processes) is sampled before each run and reported beside it.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pods.threads import busy_cores  # noqa: E402


def _burn() -> None:
    while True:
        pass


def one_run(threads: int, steps: int, seed: int) -> dict:
    with tempfile.TemporaryDirectory() as d:
        cmd = [
            sys.executable,
            "-m",
            "pods.train",
            f"max_steps={steps}",
            f"seed={seed}",
            "eval.at_start=false",
            "eval.at_end=false",
            "checkpoint.save_final=false",
            f"hardware.num_threads={threads}",
            f"hydra.run.dir={d}/run",
        ]
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=1800)
        wall = time.perf_counter() - t0
        if proc.returncode != 0:
            raise RuntimeError(proc.stderr[-2000:])
        recs = [json.loads(x) for x in (Path(d) / "run" / "metrics.jsonl").read_text().splitlines()]
        info = json.loads((Path(d) / "run" / "run_info.json").read_text())
    steps_s = [r["timing/step"] for r in recs if r["kind"] == "train"][1:]
    return {
        "threads_requested": threads,
        "torch_threads": info.get("torch_threads"),
        "median_step_s": statistics.median(steps_s),
        "mean_step_s": statistics.fmean(steps_s),
        "max_step_s": max(steps_s),
        "wall_s": wall,
        "steps": steps,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--threads", default="1,2,0")
    ap.add_argument("--burners", type=int, default=2)
    ap.add_argument("--settle", type=float, default=5.0, help="seconds between starting burners and a run")
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "threads")
    args = ap.parse_args()
    threads = [int(t) for t in args.threads.split(",")]
    rows = []
    for burners in (0, args.burners):
        procs = [mp.Process(target=_burn, daemon=True) for _ in range(burners)]
        for p in procs:
            p.start()
        try:
            time.sleep(args.settle if burners else 0)
            for t in threads:
                busy = busy_cores(1.0)
                load = os.getloadavg()[0]
                r = one_run(t, args.steps, seed=0)
                r.update(burners=burners, busy_cores_before=round(busy, 2), loadavg_1m_before=round(load, 2))
                rows.append(r)
                print(json.dumps(r), flush=True)
        finally:
            for p in procs:
                p.terminate()
                p.join()
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "bench_threads.json").write_text(json.dumps(rows, indent=2))
    name = {0: "auto"}
    lines = [
        "| burners | num_threads | torch threads | busy cores before (incl. burners) | median step s | mean step s | max step s | wall s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['burners']} | {name.get(r['threads_requested'], r['threads_requested'])} | {r['torch_threads']} "
            f"| {r['busy_cores_before']} | {r['median_step_s']:.2f} | {r['mean_step_s']:.2f} | {r['max_step_s']:.2f} "
            f"| {r['wall_s']:.0f} |"
        )
    (args.out / "bench_threads_table.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
