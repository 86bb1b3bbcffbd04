"""One policy update of a fixed batch of 4 groups, run under torchrun by any number of processes (each takes
its share of the groups, as the Trainer shards prompts); rank 0 saves the updated full weights.

    torchrun --nproc_per_node 2 tests/e2e/update_ranks.py out.pt ddp     # or fsdp, fsdp_keep; 1 process: none
    torchrun --nproc_per_node 2 tests/e2e/update_ranks.py out.pt fsdp cuda   # one GPU per process, NCCL
    torchrun --nproc_per_node 2 tests/e2e/update_ranks.py outdir ddp,fsdp    # one after the other: outdir/<kind>.pt

tests/e2e/test_update_ranks.py compares 1 process with 2 on CPU (gloo, float32: the same global batch, so the
same update); scripts/check_update_ranks.py does it on GPUs, where the update runs as the Trainer runs it (a
float32 model under bf16 autocast; FSDP all-gathers bf16) on a larger random Qwen2, and `none_fp32` (one
process, no autocast) measures how far bf16 alone moves the update.
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from pods.batch import Rollouts  # noqa: E402
from pods.config import UpdateConfig  # noqa: E402
from pods.distributed import Dist, _fsdp_units  # noqa: E402
from pods.models import autocast  # noqa: E402
from pods.update.step import policy_update  # noqa: E402
from tests.conftest import random_qwen2  # noqa: E402
from tests.update.test_causal_layout import _batch  # noqa: E402
from tests.update.test_numerics import cfg  # noqa: E402


@contextlib.contextmanager
def count_all_gathers():
    """[FSDP2 parameter all-gathers issued inside the block] (torch's private foreach_all_gather, counted)."""
    from torch.distributed.fsdp._fully_shard import _fsdp_param_group as pg

    real, n = pg.foreach_all_gather, [0]

    def counted(*args, **kwargs):
        n[0] += 1
        return real(*args, **kwargs)

    pg.foreach_all_gather = counted
    try:
        yield n
    finally:
        pg.foreach_all_gather = real


def main(out: str, kinds: str, device_type: str = "cpu", precision: str = "", micro: str = "2") -> None:
    """One update per kind; several kinds (comma-separated) run one after the other in this launch, each on a
    model and optimizer of its own, and save to out/<kind>.pt (one kind: to out). Rank 0 saves."""
    names = kinds.split(",")
    for kind in names:
        saved = update_once(kind, device_type, precision, micro)
        if saved is not None:
            path = Path(out, f"{kind}.pt") if len(names) > 1 else Path(out)
            path.parent.mkdir(parents=True, exist_ok=True)
            torch.save(saved, path)


def update_once(kind: str, device_type: str, precision: str, micro: str) -> dict | None:
    """precision: "" = the Trainer's on this device (bf16 autocast on a GPU, float32 on a CPU); "bf16" = bf16
    autocast on a CPU too (the GPU's precision, reproducible without one). kind: none (one process), ddp or
    fsdp, then any of these flags, each after an underscore: keep (FSDP keeps its gathered weights), gather32
    (FSDP gathers float32 whatever the compute dtype), prefetch (FSDP prefetches one unit ahead explicitly:
    update.fsdp_prefetch=1), units (update.fsdp_unit_params' default, as the Trainer and the bench's
    `fsdp_units` use it: this small model's decoder layers make one unit), pairs (FSDP units of two
    layers: update.fsdp_unit_params at two layers' size), fp32 (no autocast), nocache (autocast without its
    cache of weight casts). The model has 4 decoder layers."""
    import os

    cuda = device_type == "cuda"
    device = torch.device(f"cuda:{os.environ.get('LOCAL_RANK', '0')}" if cuda else "cpu")
    if cuda:
        torch.cuda.set_device(device)
    base, *flags = kind.split("_")
    unknown = set(flags) - {"keep", "gather32", "prefetch", "units", "pairs", "fp32", "nocache"}
    if base not in ("none", "ddp", "fsdp") or unknown:
        raise SystemExit(f"unknown kind {kind!r}")
    nocache = "nocache" in flags  # autocast without its cache of weight casts
    fp32 = "fp32" in flags  # one process, no autocast: the float32 reference on a GPU
    gather32 = "gather32" in flags
    prefetch = 1 if "prefetch" in flags else 0
    dtype = torch.bfloat16 if (cuda or precision == "bf16") and not fp32 else torch.float32
    b = _batch([6, 3, 1, 5, 2, 4, 6, 2], [7, 2, 5, 1, 6, 3, 4, 7])  # rows of every length mix
    b = Rollouts(b.input_ids, b.attention_mask, b.prompt_len, b.completion_mask, b.texts, [0, 1, 2, 3], 2)
    b.advantages = torch.tensor([1.0, -1.0, 0.5, -0.5, 0.0, 0.0, 0.25, -0.25])  # group 2: zero variance
    c = cfg()
    c.hardware.distributed, c.update.micro_batch_size = base, int(micro)
    c.update.fsdp_reshard_after_forward = "keep" not in flags  # keep: gathered for the whole step
    dist = Dist(c.hardware, device)
    big = cuda or precision == "bf16"
    shape = dict(hidden=256, heads=8, kv_heads=2) if big else dict(hidden=32, heads=4, kv_heads=2)
    model = random_qwen2(vocab=97, tie_word_embeddings=True, layers=4, **shape)
    layer = sum(p.numel() for p in model.model.layers[0].parameters())
    default = UpdateConfig().fsdp_unit_params  # 1e8: one unit of these 4 layers (2.2M parameters at most)
    unit_params = default if "units" in flags else 2 * layer if "pairs" in flags else 0
    start = {k: v.detach().clone() for k, v in model.state_dict().items() if k != "lm_head.weight"}
    model = dist.shard_model(model.to(device), torch.float32 if gather32 else dtype, prefetch, unit_params)
    units = len(_fsdp_units(model)) if dist.fsdp else 0  # as built, the root's unit included
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    train_model, opt = dist.prepare(model, opt)
    mine = b.select_groups(dist.shard(list(range(b.num_groups))))  # this rank's groups
    mine.advantages = b.advantages.view(b.num_groups, 2)[dist.shard(list(range(b.num_groups)))].flatten()
    if nocache:
        mixed = torch.autocast(device.type, torch.bfloat16, dtype == torch.bfloat16, cache_enabled=False)
    elif cuda:
        mixed = autocast(dtype, device)  # the Trainer's
    else:
        mixed = torch.autocast("cpu", torch.bfloat16, dtype == torch.bfloat16)
    with count_all_gathers() as gathers, mixed:
        stats = policy_update(train_model, mine, opt, sched, c.algo, c.update, c.optim, device, dist)
    weights, _ = dist.full_state(dist.unwrap(train_model), opt)  # FSDP: gathered; else None
    if weights is None:
        weights = dist.unwrap(train_model).state_dict()
    if not dist.is_main:
        return None
    weights = {k: v.detach().cpu() for k, v in weights.items() if k != "lm_head.weight"}  # tied
    return {"weights": weights, "start": start, "stats": stats, "all_gathers": gathers[0], "units": units}


if __name__ == "__main__":
    main(*sys.argv[1:])
