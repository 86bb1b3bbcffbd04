"""Seconds from SIGTERM to exit, with the signal landing in each phase of a run (issue 53): start-up, rollout,
reward, eval, update. Each phase is made long enough to be signalled mid-way on a CPU: debug=smoke with many
rollouts (rollout), a plugin reward term of weight 0 that hangs (reward), 64 samples per eval question (eval),
an update over 128 rollouts (update) and one over 512 (update-long: longer than the deadline on a 2-core
CPU, so the watchdog ends it). The run is the command line's own (`python -m pods.train`, through
runpy), with markers that say when a phase starts: the parent waits for the phase's marker of step 2 (or
start-up's first), waits DELAY_S more, sends SIGTERM and times the exit. It then checks the run's state: the
newest checkpoint is intact and `resume=true` continues it.

    python scripts/measure_stop.py --out results/stop_timing
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from pods.signals import hydra_value  # noqa: E402 - the repository's pods, run from anywhere

BASE = ["debug=smoke", "hardware=cpu", "max_steps=50", "checkpoint.every_steps=0", "eval.at_end=false"]
PHASES = {  # phase -> (overrides, which entry of the phase to signal in)
    "start-up": (["eval.num_samples=64", "eval.temperature=0.9"], 1),
    "rollout": (["selector.n=1024", "selector.m=4"], 2),
    "reward": (["+reward.weights.hang=0.0"], 2),
    "eval": (["eval.every_steps=2", "eval.num_samples=64", "eval.temperature=0.9"], 2),
    "update": (["selector.n=128", "selector.m=128"], 2),
    "update-long": (["selector.n=512", "selector.m=512"], 2),  # an update longer than the deadline on a CPU
}
DELAY_S = 0.5  # into the phase before the signal

CHILD = """
import os, sys, time, runpy
from pathlib import Path
marks = Path(sys.argv[1])
def mark(phase, fn):
    def wrapped(*a, **k):
        n = len(list(marks.glob(phase + ".*"))) + 1
        (marks / f"{phase}.{n}").touch()
        return fn(*a, **k)
    return wrapped
from pods.reward import register_reward
@register_reward("hang")
def hang(completions, answers, **kw):  # a plugin reward that hangs from step 2 on
    if os.environ.get("HANG") == "1" and len(list(marks.glob("reward.*"))) >= 2:
        time.sleep(3600)
    return [0.0] * len(completions)
import pods.trainer, pods.eval, pods.update.stage, pods.rollout.stage, pods.reward.registry as rr
pods.trainer.Trainer.__init__ = mark("start-up", pods.trainer.Trainer.__init__)
pods.rollout.stage.RolloutStage.generate = mark("rollout", pods.rollout.stage.RolloutStage.generate)
rr.RewardStage.score = mark("reward", rr.RewardStage.score)
pods.eval.Evaluator.__call__ = mark("eval", pods.eval.Evaluator.__call__)
pods.update.stage.UpdateStage.__call__ = mark("update", pods.update.stage.UpdateStage.__call__)
sys.argv = ["pods.train", *sys.argv[2:]]
runpy.run_module("pods.train", run_name="__main__")
"""


def measure(phase: str, work: Path) -> dict:
    overrides, nth = PHASES[phase]
    marks, run_dir = work / f"marks-{phase}", work / f"run {phase} ü"  # a path the resume command must quote
    marks.mkdir(parents=True)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HANG": "1"}
    args = [*BASE, *overrides, f"hydra.run.dir={hydra_value(str(run_dir))}"]
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(marks), *args],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    marker = marks / f"{phase.split('-long')[0]}.{nth}"
    while not marker.exists():
        if proc.poll() is not None:
            raise RuntimeError(f"{phase}: the run ended before the phase:\n{proc.stdout.read()[-3000:]}")
        time.sleep(0.01)
    time.sleep(DELAY_S)
    t0, wall0 = time.monotonic(), time.time()
    proc.send_signal(signal.SIGTERM)
    out = proc.communicate(timeout=600)[0]
    seconds = time.monotonic() - t0
    said = [x for x in out.splitlines() if "SIGTERM" in x and ("resume with" in x or "run again with" in x)]
    stamp = said[-1][1:24] if said else ""  # the log line's time: when the checkpoint was saved and named
    return {
        "phase": phase,
        "overrides": overrides,
        "signalled": f"{DELAY_S} s into {phase} #{nth}",
        "exit_code": proc.returncode,
        "seconds_to_exit": round(seconds, 2),
        "seconds_to_saved_line": round(
            time.mktime(time.strptime(stamp[:19], "%Y-%m-%d %H:%M:%S")) + float("0." + stamp[20:23]) - wall0,
            2,
        )
        if stamp
        else None,
        "deadline_line": next((x for x in out.splitlines() if "stop_deadline_s): exiting" in x), None),
        "line": said[-1].split("pods - ")[-1] if said else None,
        "resume": check_resume(
            said[-1] if said else "", run_dir, {**env, "HANG": "0"}, work / f"marks-{phase}-2"
        ),
    }


def check_resume(line: str, run_dir: Path, env: dict, marks: Path) -> str:
    """Run the printed command (up to step 3, through the same wrapper: the plugin reward is registered there,
    not hanging) and say whether it continued the run."""
    import shlex

    if "with: " not in line:
        return "no resume command printed"
    cmd = shlex.split(line.split("with: ", 1)[1])
    marks.mkdir()
    cmd = [sys.executable, "-c", CHILD, str(marks), *cmd[3:], "max_steps=3"] if "<your" not in line else None
    if cmd is None:
        return "resume command has <your overrides>"
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    records = (run_dir / "metrics.jsonl").read_text().count('"kind": "train"') if done.returncode == 0 else 0
    return f"exit {done.returncode}, {records} train records" if done.returncode == 0 else done.stderr[-300:]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="results/stop_timing")
    ap.add_argument("--phases", nargs="*", default=list(PHASES))
    a = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for phase in a.phases:
            rows.append(measure(phase, Path(tmp)))
            print(json.dumps(rows[-1]), flush=True)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    meta = {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(), "base": BASE}
    (out / "stop_timing.json").write_text(json.dumps({"setup": meta, "phases": rows}, indent=2) + "\n")
    print(f"wrote {out / 'stop_timing.json'}")


if __name__ == "__main__":
    main()
