"""Rows per generate call on a CPU (issue 52: `rollout.batch_size=auto` keeps the fastest there): the default
run's rollout (the shipped tiny policy, 8 arithmetic prompts x 64 samples = 512 rows, T=1, 48 new tokens)
through the HF backend's CPU path at each --batches value, alternating so that load drifts hit every setting,
--reps calls each after one warm-up. Prints ms per call (min and median) and writes results.md/json to --out.

    python scripts/bench_cpu_batch.py --out results/step_cost/cpu_batch
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.harness import save_results  # noqa: E402
from pods.components import checked  # noqa: E402
from pods.data import load_prompt_sets  # noqa: E402
from pods.models import load_tokenizer  # noqa: E402
from pods.rollout.hf import HFGenerator  # noqa: E402
from tests.conftest import compose_cfg  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--batches", default="128,256,512")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--out", default="results/step_cost/cpu_batch")
    a = p.parse_args()
    c = checked(compose_cfg(["hardware=cpu"], "/tmp/bench_cpu_batch"))
    tok = load_tokenizer(c.model)
    train, _ = load_prompt_sets(c.dataset, c.model, tok)
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(c.model.path).eval()
    prompts = train.prompts[:8]
    gens = {
        b: HFGenerator(model, tok, "cpu", b, c.model.max_completion_len)
        for b in map(int, a.batches.split(","))
    }
    times: dict[int, list[float]] = {b: [] for b in gens}
    for rep in range(a.reps + 1):
        for b, g in gens.items():
            torch.manual_seed(rep)
            t0 = time.perf_counter()
            g.generate(prompts, list(range(len(prompts))), 64, 1.0)
            if rep:  # the first call of each is a warm-up
                times[b].append(time.perf_counter() - t0)
    rows = {b: {"min_ms": 1e3 * min(t), "median_ms": 1e3 * statistics.median(t)} for b, t in times.items()}
    lines = [f"# Rows per generate call on a CPU ({torch.get_num_threads()} threads)", "",
             f"Command: `{' '.join(sys.argv)}`; 512 rows a call of the default run's rollout, {a.reps} alternating "
             "calls each after a warm-up.", "", "| rows per call | generate calls | min ms | median ms |",
             "|---|---|---|---|"]  # fmt: skip
    lines += [f"| {b} | {-(-512 // b)} | {r['min_ms']:.0f} | {r['median_ms']:.0f} |" for b, r in rows.items()]
    md = "\n".join(lines) + "\n"
    save_results(Path(a.out), {"rows": rows, "command": " ".join(sys.argv)}, md)
    print(md)


if __name__ == "__main__":
    main()
