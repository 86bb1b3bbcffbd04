"""Peak memory and time of the update's token log-probs: plain float32 log-softmax vs pods' chunked version.

Each variant runs in a fresh process (peak RSS on CPU, torch.cuda.max_memory_allocated on GPU), on
random logits shaped like a policy update of a Qwen2.5 model (151,936-token vocabulary):

    python scripts/bench_logprobs.py --rows 4 --len 256 --out results/bench_logprobs_cpu.md
    python scripts/bench_logprobs.py --device cuda --rows 16 --len 512 --dtype bfloat16
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path


def plain(logits, target, temperature):
    x = logits.float() / temperature
    return x.gather(-1, target.unsqueeze(-1)).squeeze(-1) - x.logsumexp(-1)


def child(a) -> dict:
    import torch

    from pods.update.logprobs import token_logprobs

    dev, dtype = torch.device(a.device), getattr(torch, a.dtype)
    g = torch.Generator(device=dev).manual_seed(0)
    logits = torch.randn(a.rows, a.len, a.vocab, generator=g, device=dev).to(dtype).requires_grad_()
    target = torch.randint(0, a.vocab, (a.rows, a.len), generator=g, device=dev)
    fn = plain if a.variant == "plain" else token_logprobs

    def peak() -> float:
        if dev.type == "cuda":
            return torch.cuda.max_memory_allocated() / 2**30
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB -> GiB

    if dev.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    base = peak()
    times = []
    for _ in range(a.repeats):
        t0 = time.perf_counter()
        out = fn(logits, target, 0.9)
        out.sum().backward()
        if dev.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        logits.grad = None
    return {
        "variant": a.variant,
        "peak_gib": peak(),
        "before_gib": base,
        "extra_gib": peak() - base,
        "time_s": min(times),
        "checksum": float(out.double().sum()),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--rows", type=int, default=4)
    p.add_argument("--len", type=int, default=256)
    p.add_argument("--vocab", type=int, default=151936)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--variant", default=None, help=argparse.SUPPRESS)
    p.add_argument("--out", default=None, help="write a Markdown table here")
    a = p.parse_args()
    if a.variant:
        print(json.dumps(child(a)))
        return
    rows = []
    for v in ("plain", "chunked"):
        cmd = [sys.executable, __file__, "--variant", v] + sys.argv[1:]
        res = subprocess.run(cmd, check=True, capture_output=True, text=True)
        rows.append(json.loads(res.stdout.strip().splitlines()[-1]))
    size_gib = a.rows * a.len * a.vocab * (2 if a.dtype == "bfloat16" else 4) / 2**30
    lines = [
        f"Token log-probs + backward, logits ({a.rows}, {a.len}, {a.vocab}) {a.dtype} on {a.device} "
        f"({size_gib:.2f} GiB of logits). Peak {'CUDA allocated' if a.device == 'cuda' else 'RSS'}; "
        f"'extra' = peak minus the memory held once the logits exist; best of {a.repeats}.",
        "",
        "| variant | extra peak GiB | total peak GiB | time s | checksum |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['variant']} | {r['extra_gib']:.2f} | {r['peak_gib']:.2f} | {r['time_s']:.3f} | {r['checksum']:.3f} |"
        )
    text = "\n".join(lines)
    print(text)
    if a.out:
        Path(a.out).write_text(f"Command: `python {' '.join(sys.argv)}`\n\n{text}\n")


if __name__ == "__main__":
    main()
