"""Soak: SIGKILL aimed at checkpoint saves, then resume; every run must end bitwise equal to an uninterrupted one.

    python scripts/soak_save_kills.py --kills 50 --out results/save_kill_soak

A reference run trains 6 smoke steps (a checkpoint every step). Then runs of the same config are started
(resume=true after the first start) and killed with SIGKILL while a save is under way: the script watches
checkpoints/ for a save's temporary entries (.tmp_step_*, .old_*, .latest.tmp) and kills at a random moment
after one appears, at the first or second save of a start (so the run still advances). --kills counts the
kills that left a half-done save on disk (the others landed in its last moments, or in the pruning after it);
once that many landed, the run in progress is let finish. Each run goes on until it finishes; then its records
must be once each and equal to the reference's, and its final weights bitwise equal.
tests/reliability/test_save_kills.py runs it with --kills 1.
Writes kills.jsonl (one line per kill: what was on disk) and summary.json under --out.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from pods import checkpoint as ckpt  # noqa: E402
from pods.tracking import read_metrics  # noqa: E402

STEPS = 6
ARGS = ["debug=smoke", "hardware=cpu", "selector.n=8", "selector.m=4", "optim.lr=1e-3", f"max_steps={STEPS}",
        "checkpoint.every_steps=1", "eval.every_steps=2"]  # fmt: skip
IN_SAVE = (".tmp_step_", ".old_step_", ".latest.tmp", ".trash_")
HALF_DONE = (".tmp_step_", ".old_step_", ".latest.tmp")  # left by a kill before the save was complete


def _cmd(run_dir: Path, resume: bool) -> list[str]:
    return [
        sys.executable,
        "-m",
        "pods.train",
        *ARGS,
        f"hydra.run.dir={run_dir}",
        *(["resume=true"] * resume),
    ]


def _in_save(root: Path) -> list[str]:
    return sorted(name for name, _ in _entries(root))


def _entries(root: Path) -> set[tuple[str, int]]:
    """A save's temporary entries now on disk, as (name, inode): a leftover of an earlier kill is told apart
    from a new save's entry of the same name."""
    try:
        return {(e.name, e.inode()) for e in os.scandir(root) if e.name.startswith(IN_SAVE)}
    except FileNotFoundError:
        return set()


def start_and_kill(run_dir: Path, rng: random.Random, env: dict, kill: bool = True) -> dict | None:
    """Start the run (resuming it); kill it inside its first or second save. None: it finished first (or
    `kill` is off: the run goes to its end)."""
    root, nth = run_dir / "checkpoints", rng.choice([1, 2])
    if run_dir.exists() and ckpt.latest_checkpoint(root) is None:
        # killed inside its first save: resume=true refuses to start over on the records it would overwrite;
        # start over on purpose, as its message says
        shutil.rmtree(run_dir)
    proc = subprocess.Popen(_cmd(run_dir, run_dir.exists()), cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # fmt: skip
    seen, was, stale = 0, False, _entries(root)
    while proc.poll() is None:
        now = bool(_entries(root) - stale)
        if now and not was:
            seen += 1
            if kill and seen == nth:
                time.sleep(rng.uniform(0.0, 0.01))  # somewhere inside the save
                proc.send_signal(signal.SIGKILL)
                proc.wait()
                return {"save": seen, "on_disk": _in_save(root), "latest": _latest(root)}
        was = now
        time.sleep(0.002)
    err = proc.stderr.read().decode()[-2000:]
    if proc.returncode != 0:
        raise RuntimeError(f"run exited {proc.returncode}: {err}")
    return None


def _latest(root: Path) -> str | None:
    try:
        return (root / "latest").read_text()
    except OSError:
        return None


def same_run(ref: Path, run_dir: Path) -> str | None:
    """What differs from the reference (records, final weights), or None."""
    a, b = (read_metrics(d / "metrics.jsonl") for d in (ref, run_dir))
    if [(r["kind"], r["step"]) for r in a] != [(r["kind"], r["step"]) for r in b]:
        return f"records {[(r['kind'], r['step']) for r in b]}"
    for x, y in zip(a, b):
        for k in ("reward/mean", "update/loss", "update/grad_norm", "eval/accuracy"):
            if x.get(k) != y.get(k):
                return f"step {x['step']} {k}: {x.get(k)} != {y.get(k)}"
    wa, wb = (ckpt.read_weights(d / "checkpoints" / f"step_{STEPS:07d}") for d in (ref, run_dir))
    if wa.keys() != wb.keys() or not all(torch.equal(wa[k], wb[k]) for k in wa):
        return "final weights differ"
    return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kills", type=int, default=50)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=None, help="where kills.jsonl and summary.json go")
    ap.add_argument("--work", type=Path, default=None, help="run directories (default: a temporary one)")
    a = ap.parse_args()
    work = a.work or Path(tempfile.mkdtemp(prefix="save_kill_soak_"))
    env = {**os.environ, "PYTHONHASHSEED": "0", "OMP_NUM_THREADS": "1"}
    rng, t0 = random.Random(a.seed), time.time()
    ref = work / "reference"
    subprocess.run(_cmd(ref, False), cwd=ROOT, env=env, check=True, capture_output=True)
    kills, runs, failures = [], 0, []
    while sum(k["inside"] for k in kills) < a.kills:
        run_dir, starts = work / f"run_{runs}", 0
        # once enough kills landed inside a save, the last run is let finish
        while (k := start_and_kill(run_dir, rng, env, sum(x["inside"] for x in kills) < a.kills)) is not None:
            starts += 1
            k["inside"] = any(n.startswith(HALF_DONE) for n in k["on_disk"])
            kills.append({"run": runs, "start": starts, **k})
            print(f"kill {len(kills)}: run {runs} start {starts} {k}", flush=True)
        diff = same_run(ref, run_dir)
        print(
            f"run {runs}: {starts} kills, finished; {'SAME as reference' if diff is None else diff}",
            flush=True,
        )
        if diff:
            failures.append({"run": runs, "diff": diff})
        shutil.rmtree(run_dir)
        runs += 1
    inside = sum(k["inside"] for k in kills)
    summary = {"kills": len(kills), "kills_with_a_save_half_done_on_disk": inside, "runs": runs,
               "runs_bitwise_equal": runs - len(failures), "failures": failures,
               "wall_s": round(time.time() - t0, 1), "steps_per_run": STEPS}  # fmt: skip
    print(json.dumps(summary))
    if a.out:
        a.out.mkdir(parents=True, exist_ok=True)
        (a.out / "kills.jsonl").write_text("".join(json.dumps(k) + "\n" for k in kills))
        (a.out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    if a.work is None:
        shutil.rmtree(work, ignore_errors=True)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
