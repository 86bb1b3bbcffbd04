"""The same global batch gives the same update on 1 process and on k (issue 28's correctness check), on GPUs:
one policy update of a fixed batch (tests/e2e/update_ranks.py) by 1 process, then by k under DDP, FSDP and FSDP
keeping its gathered weights, each launched by torchrun, one GPU per process (NCCL).

The update runs as the Trainer runs it on a GPU (float32 weights, matmuls under bf16 autocast, FSDP gathering
bf16 and reducing float32), so 1 and k processes agree within bf16's rounding, not bitwise. The scale of that
rounding is measured, not assumed: `none_fp32` is the 1-process update without autocast, and its distance from
the bf16 update is the table's first row. A k-process update passes when its relative distance from the
1-process update, ||d_k - d_1|| / ||d_1|| per tensor (d: the weights' change), is at most the bound for every
tensor, its loss is within the bound of the 1-process loss (1e-6 absolute), and its rows and tokens match. The
bound is --rtol where given; else, in bf16, sqrt(2) x bf16's own rounding as measured (the float32 row: two
independent roundings of one update sit about sqrt(2) of one apart), at most 5e-2, and 2e-2 without that
row; a float32 row that diverged fails the run. FSDP gathers bf16 weights, so its non-matmul ops (norms,
residual adds, biases) run in bf16 where the 1-process autocast run keeps them float32: a second rounding of
the same update, not a sharding error. Its `_gather32_nocache` row (FSDP computing exactly as the 1-process
run) shows which: results/scaling/h200x4b/ reads it equal to DDP's.

    python scripts/check_update_ranks.py --device cuda --procs 2 --out results/scaling/update_ranks_gpu.md
    python scripts/check_update_ranks.py --device cpu --procs 2 --rtol 1e-5 --out /tmp/ranks.md   # gloo
    python scripts/check_update_ranks.py --device cpu --bf16 --kinds ddp,fsdp,fsdp_gather32 --micro 8 \
        --out /tmp/ranks_bf16.md     # the GPU's precision on a CPU; _gather32: FSDP gathering float32
    python scripts/check_update_ranks.py --device cpu --bf16 --kinds fsdp_gather32,fsdp_gather32_nocache \
        --micro 2 --out /tmp/ranks_cache.md   # float32 gathers under autocast, with and without its cast cache
"""

from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "tests" / "e2e" / "update_ranks.py"


def update_distance(ref: dict, other: dict) -> dict:
    """How far `other`'s update is from `ref`'s (both update_ranks.py outputs, same start): the largest
    per-tensor ||d_other - d_ref|| / ||d_ref||, the tensor it is on, the loss difference, and whether the
    rows and tokens trained on match."""
    worst, name = 0.0, ""
    for k, w in ref["weights"].items():
        d_ref = (w - ref["start"][k]).double()
        d_other = (other["weights"][k] - other["start"][k]).double()
        scale = d_ref.norm().item()
        rel = (d_other - d_ref).norm().item() / scale if scale > 0 else float((d_other != 0).any())
        if not rel <= worst:  # NaN (a diverged update) counts as the worst
            worst, name = rel if rel == rel else float("inf"), k
    same = all(ref["stats"][s] == other["stats"][s] for s in ("update/rows", "update/tokens"))
    return {"rel": worst, "tensor": name, "loss_diff": abs(other["stats"]["update/loss"] - ref["stats"]["update/loss"]),
            "same_rows_tokens": same}  # fmt: skip


def run(
    procs: int,
    kind: str,
    device: str,
    out: Path,
    precision: str = "",
    micro: int = 2,
    timeout: float | None = None,
) -> dict:
    """One update_ranks.py launch by `procs` processes: its saved weights, start, stats and all-gather count
    (tests/e2e/test_update_ranks.py launches it this way too)."""
    from bench.harness import torchrun_command

    cmd = [*torchrun_command(procs), str(SCRIPT), str(out), kind, device, precision, str(micro)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise SystemExit(f"{kind} x{procs} failed:\n{proc.stderr[-3000:]}")
    return torch.load(out)


def main() -> None:
    sys.path.insert(0, str(ROOT))
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--procs", type=int, default=2)
    p.add_argument("--kinds", default="ddp,fsdp,fsdp_keep")
    p.add_argument(
        "--rtol", type=float, default=None,
        help="the largest relative distance that passes (default: sqrt(2) x bf16's own rounding, measured, "
        "in bf16; else 2e-2)",
    )  # fmt: skip
    p.add_argument(
        "--bf16", action="store_true", help="bf16 autocast on a CPU too (the GPU's precision, over gloo)"
    )
    p.add_argument("--micro", type=int, default=2, help="rows per micro-batch (8: one micro-batch per rank)")
    p.add_argument("--out", required=True)
    a = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="pods_ranks_"))
    prec = "bf16" if a.bf16 else ""
    rows, out = [], Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    ref = run(1, "none", a.device, work / "one.pt", prec, a.micro)
    rtol, why = (a.rtol, "--rtol") if a.rtol is not None else (2e-2, "fixed")
    if a.device == "cuda" or a.bf16:
        fp32 = run(1, "none_fp32", a.device, work / "fp32.pt", prec, a.micro)
        rows.append(("1 process, float32 (no autocast)", update_distance(ref, fp32), None))
        own = rows[0][1]["rel"]
        if not math.isfinite(own):  # a diverged reference bounds nothing: the run fails
            rows[0] = (rows[0][0], rows[0][1], False)
        if a.rtol is None:
            rtol, why = default_bound(own)
    head = (
        f"Update of one fixed batch, 1 process (bf16 autocast on a GPU{' and here' if a.bf16 else ''}) against "
        f"each row; device {a.device}; {a.micro} rows per micro-batch; "
        f"pass: relative distance <= {rtol:.3g} ({why}), the loss within that, the same rows and tokens.\n"
    )

    def write() -> None:  # after every row: a run stopped by a time limit keeps the rows it finished
        text = render(head, rows)
        out.write_text(text)
        print(text, flush=True)

    if rows:
        write()
    for kind in a.kinds.split(","):
        d = update_distance(ref, run(a.procs, kind, a.device, work / f"{kind}.pt", prec, a.micro))
        loss_ok = d["loss_diff"] <= rtol * abs(ref["stats"]["update/loss"]) + 1e-6  # NaN fails too
        rows.append(
            (f"{a.procs} processes, {kind}", d, d["rel"] <= rtol and loss_ok and d["same_rows_tokens"])
        )
        write()
    sys.exit(0 if all(ok is not False for *_, ok in rows) else 1)


CAP = 5e-2  # the default bound's ceiling: about 2x the bf16 bound measured on H200s (2.6e-2)


def pass_bound(own: float) -> float:
    """The largest distance of a k-process bf16 update from the 1-process one that is still bf16's rounding:
    sqrt(2) x `own`, the 1-process bf16 update's distance from its float32 counterpart (two independent
    roundings of one update sit about sqrt(2) of one rounding apart); never below 1e-6."""
    return max(math.sqrt(2.0) * own, 1e-6)


def default_bound(own: float) -> tuple[float, str]:
    """The bound a bf16 check passes by default, and why: pass_bound(own), at most CAP (a 1-process update
    far from its float32 twin, or a tensor only one of them moves, must not let every k-process run pass)."""
    bound = pass_bound(own)
    if not bound < CAP:  # NaN too
        return CAP, f"capped: sqrt(2) x bf16's own rounding is {bound:.3g}"
    return bound, "sqrt(2) x bf16's own rounding"


def render(head: str, rows: list[tuple[str, dict, bool | None]]) -> str:
    """The table; where the float32 reference row is there (bf16 runs), each distance also as a multiple of
    that row's: bf16's own rounding of this update, measured. Two independent roundings of the same update
    sit about sqrt(2) of it apart."""
    own = next((d["rel"] for _, d, ok in rows if ok is None), None)
    lines = [
        head,
        "| run | largest relative distance of the update | x bf16's own rounding | on tensor | loss difference "
        "| rows, tokens | pass |",
        "|---|---|---|---|---|---|---|",
    ]
    for label, d, ok in rows:
        passed = "reference" if ok is None else ("yes" if ok else "**no**")
        times = f"{d['rel'] / own:.2f}" if own else "-"
        lines.append(f"| {label} | {d['rel']:.2e} | {times} | {d['tensor']} | {d['loss_diff']:.2e} | "
                     f"{'same' if d['same_rows_tokens'] else 'differ'} | {passed} |")  # fmt: skip
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
