"""Peak memory and time of the fused head + GRPO loss: pods' `linear_token_logprobs` + `policy_loss` against
Liger-Kernel's `LigerFusedLinearGRPOLoss` (issue 18, target 4).

Random final hidden states (B, L, H), a (V, H) head, random targets, advantages and a completion mask in
which most rows stopped early. Both sides compute the same loss: clipped GRPO averaged over all completion
tokens (pods `loss=token` == Liger `loss_type="dapo"`), epsilon 0.2, beta 0, on policy (old log-probs =
the detached current ones: ratio 1), temperature 1. For each variant: forward + backward, median of
--repeats after --warmup calls, the peak memory above its start (CUDA allocator; RSS on a CPU, rough), and
the loss and gradients against a float32 reference (the plain (B, L, V) logits and log_softmax).

    PYTHONPATH=. python scripts/bench_liger.py --hidden 896 --out results/bench_liger/h896     # Qwen2.5-0.5B head
    PYTHONPATH=. python scripts/bench_liger.py --hidden 2048 --out results/bench_liger/h2048   # Qwen2.5-3B head
    PYTHONPATH=. python scripts/bench_liger.py --device cpu --dtype float32 --rows 4 --len 32 --vocab 2048 --repeats 2

Liger's chunked losses are plain torch (its triton kernels are elsewhere), so they run on a CPU too; there
its loss maths is not torch.compile'd (`compiled=False`). Without liger_kernel the Liger rows are skipped.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch

from bench.harness import PeakMemory, save_results, sync
from pods.update.logprobs import linear_token_logprobs
from pods.update.loss import policy_loss

EPSILON, TEMPERATURE = 0.2, 1.0


def make_inputs(a, device: torch.device) -> dict:
    """Hidden (B, L, H) and head (V, H) in --dtype; targets (B, L); advantages (B,); mask (B, L)."""
    g = torch.Generator(device="cpu").manual_seed(0)
    dtype = getattr(torch, a.dtype)
    hidden = torch.randn(a.rows, a.len, a.hidden, generator=g)
    weight = torch.randn(a.vocab, a.hidden, generator=g) * 0.02  # the scale of Qwen's initialisation
    lengths = torch.randint(a.len // 8, a.len + 1, (a.rows,), generator=g)
    lengths[: a.rows // 4] = a.len  # a quarter ran to the length limit; the rest stopped early
    return {
        "hidden": hidden.to(device, dtype).requires_grad_(),
        "weight": weight.to(device, dtype).requires_grad_(not a.frozen_head),
        "targets": torch.randint(0, a.vocab, (a.rows, a.len), generator=g).to(device),
        "adv": torch.randn(a.rows, generator=g).to(device),
        "mask": (torch.arange(a.len)[None] < lengths[:, None]).long().to(device),
    }


def reference_loss(x: dict) -> torch.Tensor:
    """The same loss through the whole (B, L, V) float32 logits."""
    h, w = x["hidden"], x["weight"]
    logits = (h.float() @ w.float().T) / TEMPERATURE
    logp = logits.log_softmax(-1).gather(-1, x["targets"].unsqueeze(-1)).squeeze(-1)
    return policy_loss(logp, logp.detach(), x["adv"], x["mask"], EPSILON, agg="token")[0]


def pods_loss(x: dict, rows: int) -> torch.Tensor:
    logp = linear_token_logprobs(x["hidden"], x["weight"], x["targets"], TEMPERATURE, rows)  # (B, L)
    return policy_loss(logp, logp.detach(), x["adv"], x["mask"], EPSILON, agg="token")[0]


def liger_loss_fn(chunk_size: int, compiled: bool):
    from liger_kernel.chunked_loss import LigerFusedLinearGRPOLoss

    # old_per_token_logps=None: Liger takes the detached current log-probs, as pods does on policy
    fn = LigerFusedLinearGRPOLoss(
        beta=0.0,
        use_ref_model=False,
        compiled=compiled,
        chunk_size=chunk_size,  # sequences per chunk
        epsilon_low=EPSILON,
        epsilon_high=EPSILON,
        loss_type="dapo",
        temperature=TEMPERATURE,
    )
    return lambda x: fn(x["hidden"], x["weight"], x["targets"], x["mask"], x["adv"])[0]


def grads(x: dict) -> tuple[torch.Tensor, torch.Tensor | None]:
    return x["hidden"].grad, x["weight"].grad


def clear(x: dict) -> None:
    x["hidden"].grad = x["weight"].grad = None


def measure(loss_fn, x: dict, a, device: str) -> dict:
    """Median forward + backward time, then one more call under PeakMemory; returns the last loss and grads."""
    times = []
    for i in range(a.warmup + a.repeats):
        clear(x)
        sync(device)
        t0 = time.perf_counter()
        loss_fn(x).backward()
        sync(device)
        if i >= a.warmup:
            times.append((time.perf_counter() - t0) * 1e3)
    clear(x)
    with PeakMemory(device) as mem:
        loss = loss_fn(x)
        loss.backward()
    gh, gw = grads(x)
    return {
        "median_ms": statistics.median(times),
        "min_ms": min(times),
        "peak_extra_gib": mem.gib,
        "start_gib": mem.start_gib,
        "loss": float(loss.detach()),
        "_grads": (gh.float().clone(), gw.float().clone() if gw is not None else None),
    }


def agreement(r: dict, base: dict) -> dict:
    """Max abs difference of loss and gradients, and each gradient's relative to the base's largest entry."""
    out = {"loss_abs": abs(r["loss"] - base["loss"])}
    for name, got, ref in zip(("grad_hidden", "grad_weight"), r["_grads"], base["_grads"]):
        if got is None:
            continue
        diff = float((got - ref).abs().max())
        out[f"{name}_abs"], out[f"{name}_rel"] = diff, diff / max(float(ref.abs().max()), 1e-30)
    return out


def liger_version() -> str | None:
    try:
        from importlib.metadata import version

        import liger_kernel.chunked_loss  # noqa: F401

        return version("liger-kernel")
    except Exception as e:  # not installed, or it fails to import on this machine
        print(f"liger_kernel unavailable ({type(e).__name__}: {e}): skipping the Liger rows")
        return None


def table(res: dict, a) -> str:
    base = "float32 reference" if "reference" in res["runs"] else f"{next(iter(res['runs']))}"
    lines = [
        f"# Fused head + GRPO token loss, forward + backward ({res['device']}, torch {res['torch']}, "
        f"liger-kernel {res['liger']})",
        "",
        f"hidden ({a.rows}, {a.len}, {a.hidden}), head ({a.vocab}, {a.hidden}) {a.dtype}"
        f"{' frozen' if a.frozen_head else ''}, {res['tokens']} completion tokens; median of {a.repeats} "
        f"after {a.warmup} warm-ups; peak = {'CUDA allocator' if a.device == 'cuda' else 'RSS (rough)'} peak "
        f"above the start (inputs and the base's gradients excluded, the new gradients included); "
        f"differences against the {base}.",
        "",
        "| variant | median ms | min ms | peak extra GiB | loss | abs diff loss | grad_hidden rel diff | "
        "grad_weight rel diff |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, r in res["runs"].items():
        d = r.get("agreement", {})
        cells = [f"{d[k]:.2e}" if k in d else "-" for k in ("loss_abs", "grad_hidden_rel", "grad_weight_rel")]
        lines.append(
            f"| {name} | {r['median_ms']:.1f} | {r['min_ms']:.1f} | {r['peak_extra_gib']:.3f} | "
            f"{r['loss']:.6f} | " + " | ".join(cells) + " |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--dtype", default="bfloat16", help="of the hidden states and the head")
    p.add_argument("--rows", type=int, default=16, help="completions (B)")
    p.add_argument("--len", type=int, default=512, help="completion positions (L)")
    p.add_argument("--hidden", type=int, default=896, help="H: 896 Qwen2.5-0.5B, 2048 Qwen2.5-3B")
    p.add_argument("--vocab", type=int, default=151936)
    p.add_argument("--frozen-head", action="store_true", help="no head gradient (LoRA)")
    p.add_argument(
        "--pods-chunks", default="1024,0", help="`rows` of linear_token_logprobs (positions; 0: its default)"
    )
    p.add_argument("--liger-chunks", default="1,4,16", help="Liger chunk_size (sequences per chunk)")
    p.add_argument("--liger-eager", action="store_true", help="compiled=False on a GPU too")
    p.add_argument("--no-reference", action="store_true", help="skip the float32 (B, L, V) reference")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--out", default=None, help="folder for results.json and results.md")
    a = p.parse_args()
    dev = torch.device(a.device)
    x = make_inputs(a, dev)
    res = {
        "device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "liger": liger_version(),
        "args": vars(a),
        "tokens": int(x["mask"].sum()),
        "runs": {},
    }
    variants = {} if a.no_reference else {"reference": reference_loss}
    for rows in map(int, a.pods_chunks.split(",")):
        variants[f"pods rows={rows or 'default'}"] = lambda x, rows=rows: pods_loss(x, rows or None)
    if res["liger"]:
        compiled = dev.type == "cuda" and not a.liger_eager
        for c in map(int, a.liger_chunks.split(",")):
            variants[f"liger chunk_size={c}{'' if compiled else ' eager'}"] = liger_loss_fn(c, compiled)
    base = None
    for name, fn in variants.items():
        r = measure(fn, x, a, dev.type)
        if base is None:  # the reference, or the first pods variant without one
            base = r
        else:
            r["agreement"] = agreement(r, base)
            del r["_grads"]
        res["runs"][name] = r
        print(name, {k: v for k, v in r.items() if k != "_grads"}, flush=True)
    del base["_grads"]
    md = table(res, a)
    print(md)
    if a.out:
        save_results(Path(a.out), res, md)


if __name__ == "__main__":
    main()
