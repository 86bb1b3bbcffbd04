"""The host cost of FSDP units on a CPU (issue 28's prediction before any GPU time): forward + backward and
clip + AdamW of a 24-layer Qwen2 of hidden 64 (the 0.5B's layer count at a width where host overhead is most
of the time), in one process with bf16 autocast and over 2 gloo processes with FSDP2 at a given number of layers
per unit (0: the root alone, all layers in it). Median of steps 4-8 of rank 0, milliseconds.

    python scripts/probe_fsdp_units.py --out results/scaling/h200x4/cpu_probe.md   # launches the points below
"""

from __future__ import annotations

import argparse
import os
import statistics as st
import subprocess
import sys
import time
from pathlib import Path

import torch


def point(mode: str, ckpt: bool) -> str:
    """One point in this process (under torchrun for FSDP): a table row."""
    import torch.distributed as dist
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.set_num_threads(1)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1:
        dist.init_process_group("gloo")
    torch.manual_seed(0)
    cfg = Qwen2Config(hidden_size=64, intermediate_size=128, num_hidden_layers=24, num_attention_heads=4,
                      num_key_value_heads=2, vocab_size=512, tie_word_embeddings=True)  # fmt: skip
    m = Qwen2ForCausalLM(cfg)
    if ckpt:
        m.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if mode != "plain":
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        mesh = init_device_mesh("cpu", (world,))
        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        k, layers = int(mode), list(m.model.layers)
        for i in range(0, len(layers), k) if k else []:  # k == 0: the root alone holds every layer
            fully_shard(layers[i : i + k] if k > 1 else layers[i], mesh=mesh, mp_policy=mp)
        fully_shard(m, mesh=mesh, mp_policy=mp)
    opt = torch.optim.AdamW(list(m.parameters()), lr=1e-5, foreach=True)
    ids = torch.randint(0, 512, (2, 16))
    fb, upd = [], []
    for it in range(8):
        if world > 1:
            dist.barrier()
        t0 = time.perf_counter()
        with torch.autocast("cpu", torch.bfloat16, enabled=mode == "plain"):
            loss = m(input_ids=ids).logits.float().mean()
        loss.backward()
        t1 = time.perf_counter()
        g = torch.nn.utils.clip_grad_norm_(list(m.parameters()), 1.0)
        g.full_tensor() if hasattr(g, "full_tensor") else g
        opt.step()
        opt.zero_grad(set_to_none=True)
        t2 = time.perf_counter()
        if it >= 3:
            fb.append(t1 - t0)
            upd.append(t2 - t1)
    units = (
        "one process, no FSDP"
        if mode == "plain"
        else f"{world} processes, "
        + (f"{24 // int(mode)} units of {mode} layers" if int(mode) else "the root alone (all layers)")
    )
    row = f"| {units} | {ckpt} | {1e3 * st.median(fb):.1f} | {1e3 * st.median(upd):.1f} |"
    if world > 1:
        dist.destroy_process_group()
    return row


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True)
    p.add_argument("--point", nargs=2, help=argparse.SUPPRESS)  # mode, ckpt: one point, run by main itself
    a = p.parse_args()
    if a.point:
        row = point(a.point[0], a.point[1] == "1")
        if int(os.environ.get("RANK", "0")) == 0:
            Path(a.out).write_text(row + "\n")
        return
    from bench.harness import torchrun_command

    rows = []
    for mode in ("plain", "1", "6", "0"):
        for ckpt in ("1", "0"):
            tmp = Path(a.out).with_suffix(f".{mode}{ckpt}.tmp")
            launch = [sys.executable] if mode == "plain" else torchrun_command(2)
            cmd = [*launch, __file__, "--out", str(tmp), "--point", mode, ckpt]
            subprocess.run(cmd, check=True, capture_output=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
            rows.append(tmp.read_text().strip())
            tmp.unlink()
    head = ["| layout | checkpointing | forward + backward ms | clip + AdamW ms |", "|---|---|---|---|"]
    Path(a.out).write_text(f"FSDP units' host cost on a CPU (torch {torch.__version__}, {os.cpu_count()} "
                           "cores; scripts/probe_fsdp_units.py):\n\n" + "\n".join(head + rows) + "\n")  # fmt: skip
    print(Path(a.out).read_text())


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    main()
