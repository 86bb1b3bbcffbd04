"""The model-size ladder's table (issue 52): GRPO 16/16 against PODS 64/16 alone on one GPU, pods's defaults
only, at each shape, and each shape's floor for a decode step.

Reads the `scripts/bench_step_cost.py` results of `scripts/device/ladder.sh` (one folder per shape and
completion length) and the card's measured peaks (`--measure` writes them: a bf16 GEMM's FLOP/s and a
device-to-device copy's bytes/s). A decode step's floor at R rows is the larger of

    compute    2 x (matmul parameters) x R  +  4 x layers x heads x head dim x C x R   FLOPs / peak FLOP/s
    bandwidth  weight bytes (bf16, once)  +  R x C x KV bytes a token                    bytes / copy bytes/s

with C the mean cache positions a step reads: PROMPT_TOKENS of prompt plus half the step's decode steps (flex
visits the filled blocks only). The measured decode ms a step is the bench's decode time over its decode steps.

    python scripts/ladder_table.py --measure peaks.json                 # on the GPU, once
    python scripts/ladder_table.py --peaks peaks.json RUN_DIR...        # the markdown table
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

PROMPT_TOKENS = 32  # the bench prompts and the headline's sums are 27-40 tokens
HEADLINE = Path(__file__).resolve().parent.parent / "pods" / "assets" / "headline" / "config.json"
TARGETS = {48: 1.25, 512: 1.15}  # PODS/GRPO step, defaults (512: the 3B LoRA target)


def measure(path: Path) -> dict:
    """The card's bf16 GEMM FLOP/s (8192^3, best of 20) and copy bandwidth (1 GiB, read + written, best of 20)."""
    import torch

    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    x = torch.empty(1 << 29, dtype=torch.bfloat16, device="cuda")
    y = torch.empty_like(x)
    best = {"flops": 0.0, "bytes": 0.0}
    for _ in range(3):
        a @ a, y.copy_(x)
    for kind, fn, work in (
        ("flops", lambda: a @ a, 2 * 8192**3),
        ("bytes", lambda: y.copy_(x), 2 * x.nbytes),
    ):
        for _ in range(20):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            fn()
            torch.cuda.synchronize()
            best[kind] = max(best[kind], work / (time.perf_counter() - t0))
    best["device"] = torch.cuda.get_device_name()
    path.write_text(json.dumps(best, indent=2))
    return best


def shape_of(res: dict) -> dict:
    """layers, hidden, heads, kv_heads, head_dim, intermediate, vocab, tied: the bench's model flags (random
    shapes, defaults as bench/harness.py's) or the headline policy's config.json."""
    a = res["args"]
    if not a.get("random_shape"):
        c = json.loads(HEADLINE.read_text())
        heads = c["num_attention_heads"]
        return dict(layers=c["num_hidden_layers"], hidden=c["hidden_size"], heads=heads,
                    kv_heads=c.get("num_key_value_heads") or heads, head_dim=c.get("head_dim") or c["hidden_size"] // heads,
                    intermediate=c["intermediate_size"], vocab=c["vocab_size"], tied=c.get("tie_word_embeddings", False))  # fmt: skip
    heads = a["heads"] or a["hidden"] // 64
    return dict(layers=a["layers"], hidden=a["hidden"], heads=heads, kv_heads=a["kv_heads"] or max(heads // 7, 1),
                head_dim=a["hidden"] // heads, intermediate=a["intermediate"] or a["hidden"] * 38 // 7,
                vocab=a["vocab"], tied=False)  # fmt: skip


def floor_ms(s: dict, rows: float, context: float, peaks: dict) -> tuple[float, str]:
    """A decode step's floor in ms at `rows` rows reading `context` cache positions each, and what binds it."""
    h, kv = s["hidden"], s["kv_heads"] * s["head_dim"]
    per_layer = h * s["heads"] * s["head_dim"] * 2 + 2 * h * kv + 3 * h * s["intermediate"]
    matmul = s["layers"] * per_layer + h * s["vocab"]  # the head reads the (tied or not) output matrix
    weights = matmul + (0 if s["tied"] else h * s["vocab"])  # plus the input embedding rows (tiny) if untied
    flops = 2 * matmul * rows + 4 * s["layers"] * s["heads"] * s["head_dim"] * context * rows
    kv_bytes = rows * context * 2 * s["layers"] * kv * 2
    compute, memory = flops / peaks["flops"], (2 * weights + kv_bytes) / peaks["bytes"]
    return 1e3 * max(compute, memory), "compute" if compute >= memory else "bandwidth"


def table(dirs: list[Path], peaks: dict) -> str:
    head = ["shape", "completion", "GRPO step ms", "PODS step ms", "step ratio", "target", "generation ratio",
            "update rows GRPO / PODS", "decode ms/step 256 rows", "floor 256", "x floor", "decode ms/step 1,024 rows",
            "floor 1,024", "x floor", "decode attention"]  # fmt: skip
    out = [f"Device: {peaks.get('device', '?')}; measured peaks {peaks['flops'] / 1e12:.0f} TFLOP/s bf16 GEMM, "
           f"{peaks['bytes'] / 1e12:.2f} TB/s copy. Floors: scripts/ladder_table.py's docstring.", "",
           "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]  # fmt: skip
    for d in dirs:
        f = d / "results.json"
        if not f.exists():
            out.append(f"| {d.name} | (not run) |" + " |" * (len(head) - 2))
            continue
        res = json.loads(f.read_text())
        runs = {r["name"]: r for r in res["runs"]}
        if not {"grpo16", "pods64"} <= set(runs):
            out.append(f"| {d.name} | (incomplete) |" + " |" * (len(head) - 2))
            continue
        g, p = runs["grpo16"]["mean"], runs["pods64"]["mean"]
        s, comp = shape_of(res), res["args"]["completion_len"] if res["args"].get("random_shape") else "own"
        ratio = p["step"] / g["step"]
        target = TARGETS.get(comp) if (comp == 48 or "LoRA" in res["shape"]) else None
        cells = [res["shape"].split(",")[0], str(comp), f"{1e3 * g['step']:.0f}", f"{1e3 * p['step']:.0f}",
                 f"{ratio:.2f}", f"<= {target}" + (" met" if ratio <= target else " not met") if target else "-",
                 f"{p['generation'] / g['generation']:.2f}", f"{g.get('update rows', 0):.0f} / {p.get('update rows', 0):.0f}"]  # fmt: skip
        for m in (g, p):
            steps = m.get("decode steps", 0.0)
            ms = 1e3 * m.get("decode", 0.0) / steps if steps else float("nan")
            fl, binds = floor_ms(s, m.get("rows", 0.0), PROMPT_TOKENS + steps / 2, peaks)  # one call a step
            cells += [f"{ms:.2f}", f"{fl:.2f} ({binds})", f"{ms / fl:.1f}"]
        cells.append(" / ".join(runs[k].get("decode attention", "-") for k in ("grpo16", "pods64")))
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--measure", type=Path, help="measure the card's peaks into this json file and exit")
    p.add_argument("--peaks", type=Path, help="the peaks json (--measure)")
    p.add_argument("dirs", nargs="*", type=Path)
    a = p.parse_args()
    if a.measure:
        print(json.dumps(measure(a.measure)))
        return
    print(table(a.dirs, json.loads(a.peaks.read_text())))


if __name__ == "__main__":
    main()
