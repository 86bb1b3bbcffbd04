"""The generation copy refreshed from an FSDP-sharded policy, under torchrun (2 processes, gloo): gathered per
tensor (DTensor.full_tensor, as before) and gathered per unit inside Dist.full_weights (what the Trainer does),
after the shards moved. Rank 0 saves both copies' weights and the FSDP all-gathers the per-unit refresh issued, and whether the policy held full tensors inside
the block and shards after it.

    torchrun --nproc_per_node 2 tests/e2e/sync_ranks.py out.pt [layer|pairs|one][,...]

The model has 4 decoder layers; the last argument groups them into FSDP units (update.fsdp_unit_params): one
per layer (default), two of two layers, or one of all four. Several groupings, comma-separated, run one after
the other in the same launch, each on a model of its own; out.pt holds {grouping: what that grouping saved}.

A third copy is refreshed a unit at a time (Dist.gathered_units, `only=` each unit's names), as the Trainer
refreshes the HF backend's copy: the same weights, one all-gather per unit, at most two units whole at once.

tests/e2e/test_update_ranks.py checks that the two copies are equal, bit for bit, and that the per-unit
refresh gathers each unit once.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from pods.distributed import Dist, _fsdp_units  # noqa: E402
from pods.rollout.gen_copy import GenerationCopy  # noqa: E402
from tests.conftest import random_qwen2  # noqa: E402
from tests.e2e.update_ranks import count_all_gathers  # noqa: E402


def main(out: str, groupings: str = "layer") -> None:
    saved = {grouping: one_grouping(grouping) for grouping in groupings.split(",")}
    if all(r is not None for r in saved.values()):  # rank 0
        torch.save(saved, out)


def one_grouping(grouping: str) -> dict | None:
    """What rank 0 saves for one grouping (None on the other ranks)."""
    from types import SimpleNamespace

    dist = Dist(SimpleNamespace(distributed="fsdp"), torch.device("cpu"))
    dtype = torch.bfloat16
    model = random_qwen2(vocab=97, hidden=32, heads=4, kv_heads=2, layers=4)
    layer = sum(p.numel() for p in model.model.layers[0].parameters())
    unit_params = {"layer": 0, "pairs": 2 * layer, "one": 10**12}[grouping]
    model = dist.shard_model(model, dtype, unit_params=unit_params)
    units = len(_fsdp_units(model))  # as built, the root's unit included
    per_tensor = GenerationCopy(model, torch.device("cpu"), dtype)  # built and first synced per tensor
    per_unit = GenerationCopy(model, torch.device("cpu"), dtype)
    windowed = GenerationCopy(model, torch.device("cpu"), dtype)
    take = lambda c: {k: v.detach().clone() for k, v in c.model.state_dict().items()}  # noqa: E731
    before = take(per_unit)
    with torch.no_grad():  # the shards move, as after an optimizer step (different on each rank)
        for k, p in enumerate(model.parameters()):
            p.to_local().add_(0.01 * (k + 1) * (dist.rank + 1))
    per_tensor.sync(model)
    with count_all_gathers() as unit_gathers, dist.full_weights(model):
        # the copy reads plain full tensors here, not shards it would gather one by one (DTensor.full_tensor)
        plain = not any(hasattr(p, "full_tensor") for p in model.parameters())
        per_unit.sync(model)
    resharded = all(hasattr(p, "full_tensor") for p in model.parameters())
    named, whole = [], []  # per turn: the unit's names, and the names whose weights were whole then
    with count_all_gathers() as window_gathers:
        for names in dist.gathered_units(model):  # what the Trainer does with the HF backend
            named.append(sorted(names))
            whole.append(sorted(n for n, p in model.named_parameters() if not hasattr(p, "full_tensor")))
            windowed.sync(model, only=names)
    resharded = resharded and all(hasattr(p, "full_tensor") for p in model.parameters())
    if not dist.is_main:
        return None
    return {"per_tensor": take(per_tensor), "per_unit": take(per_unit), "before": before,
            "unit_gathers": unit_gathers[0], "plain": plain, "resharded": resharded, "units": units,
            "windowed": take(windowed), "window_gathers": window_gathers[0], "whole": whole,
            "named": named, "all_names": sorted(n for n, _ in model.named_parameters())}  # fmt: skip


if __name__ == "__main__":
    main(*sys.argv[1:])
