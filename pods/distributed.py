"""Several processes: DDP through accelerate, or FSDP2 (torch's `fully_shard`) on the process group accelerate sets up.

Every rank draws the same prompts and keeps its shard (rank::world); rewards are gathered so that the
pre-rollout filter, dynamic sampling, selection and metrics see the whole batch and agree on all
ranks. In one process everything here is an identity.
"""

from __future__ import annotations

import contextlib
import logging
import os

import torch

from pods.config import HardwareConfig

log = logging.getLogger("pods")


def launched_distributed() -> bool:
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def unit_plan(layers: int, layer_params: int, unit_params: int) -> list[list[int]]:
    """update.fsdp_unit_params: the decoder layers (indices in forward order) of each FSDP unit. 0 gives each
    layer its own unit; otherwise the layers are cut into floor(all their parameters / unit_params) contiguous
    groups (at least 1, at most one per layer) whose sizes differ by at most one layer. Each unit costs its
    all-gathers and hooks on the host per forward and backward, whatever its size: at 0.5B, 24 units of 15M
    parameters each keep the GPU waiting on the host; at 7B a layer is already over 1e8.

    >>> unit_plan(24, 15_000_000, 100_000_000)[0]
    [0, 1, 2, 3, 4, 5, 6, 7]
    >>> unit_plan(3, 10, 0)
    [[0], [1], [2]]
    """
    if unit_params <= 0:
        return [[i] for i in range(layers)]
    k = min(layers, max(1, layers * layer_params // unit_params))
    base, extra = divmod(layers, k)
    cuts = [0]
    for u in range(k):
        cuts.append(cuts[-1] + base + (u < extra))
    return [list(range(a, b)) for a, b in zip(cuts, cuts[1:])]


def prefetch_plan(layers: int, ahead: int) -> list[tuple[list[int], list[int]]]:
    """update.fsdp_prefetch: for each of `layers` FSDP units of decoder layers in forward order, (the units its
    forward starts gathering: the next `ahead`; those its backward starts: the previous `ahead`, nearest first,
    the order the backward reaches them).

    >>> prefetch_plan(4, 2)
    [([1, 2], []), ([2, 3], [0]), ([3], [1, 0]), ([], [2, 1])]
    """
    return [
        (list(range(i + 1, min(layers, i + 1 + ahead))), list(range(i - 1, max(-1, i - 1 - ahead), -1)))
        for i in range(layers)
    ]


class Dist:
    def __init__(self, hardware: HardwareConfig, device: torch.device):
        self.accelerator = None
        self.rank, self.world = 0, 1
        self.fsdp = False  # parameters, gradients and optimizer state sharded over ranks (torch FSDP2)
        if hardware.distributed != "none" and launched_distributed():
            from accelerate import Accelerator

            self.accelerator = Accelerator(cpu=device.type == "cpu")
            kind = self.accelerator.distributed_type.value
            if kind in ("FSDP", "DEEPSPEED", "MEGATRON_LM"):
                from pods.errors import ConfigError

                raise ConfigError(
                    f"the accelerate launch config asks for {kind}; pods shards the model itself: launch with "
                    "`accelerate launch --multi_gpu` (or torchrun) and set hardware.distributed=ddp or fsdp"
                )
            self.rank, self.world = self.accelerator.process_index, self.accelerator.num_processes
            self.fsdp = hardware.distributed == "fsdp"

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def shard_model(
        self, model, compute_dtype: torch.dtype = torch.float32, prefetch: int = 0, unit_params: int = 0
    ):
        """FSDP: shard the decoder layers, in units of `unit_plan(..., unit_params)` consecutive layers, then the
        rest (embeddings, head), over all ranks, in place; before the optimizer is built, since sharding replaces
        the parameters. Otherwise the model unchanged.

        With a half-precision compute dtype, parameters are all-gathered in that dtype (half the traffic of
        float32) while the float32 shards stay the master weights and gradients are reduced in float32.
        Gather in the compute dtype, never float32 under autocast: autocast's cache of bf16 weight casts then
        meets FSDP2's regathered parameters, and an update of two micro-batches per rank came out 0.38 off the
        one-process update (1e-2 scale is bf16's own; scripts/check_update_ranks.py --bf16, results/scaling/
        h200x2/). The bf16 gather sits 2.5e-2 from autocast's update, bf16's own scale (2.3e-2 from float32)."""
        if not self.fsdp:
            return model
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        mp = MixedPrecisionPolicy(param_dtype=compute_dtype, reduce_dtype=torch.float32)

        mesh = init_device_mesh(self.accelerator.device.type, (self.world,))
        names = set(getattr(model, "_no_split_modules", None) or [])
        layers = [m for m in model.modules() if type(m).__name__ in names]
        if not layers:
            raise RuntimeError(f"FSDP: no decoder layers ({sorted(names)}) found in {type(model).__name__}")
        per_layer = max(sum(p.numel() for p in layer.parameters()) for layer in layers)
        units = [[layers[i] for i in unit] for unit in unit_plan(len(layers), per_layer, unit_params)]
        for unit in units:  # a list of modules is one FSDP unit: one all-gather, one reduce-scatter
            fully_shard(unit if len(unit) > 1 else unit[0], mesh=mesh, mp_policy=mp)
        if self.is_main:
            sizes = sorted({len(u) for u in units})
            log.info(
                "FSDP over %d ranks: %d decoder layers of %.1fM parameters in %d unit(s) of %s layer(s) "
                "(update.fsdp_unit_params=%d), then the root",
                self.world, len(layers), per_layer / 1e6, len(units), " or ".join(map(str, sizes)), unit_params,
            )  # fmt: skip
        fully_shard(model, mesh=mesh, mp_policy=mp)
        if prefetch > 0:  # update.fsdp_prefetch: explicit, `prefetch` units ahead in forward and in backward
            heads = [unit[0] for unit in units]  # any module of a unit stands for all of it
            for head, (fwd, bwd) in zip(heads, prefetch_plan(len(heads), prefetch)):
                head.set_modules_to_forward_prefetch([heads[j] for j in fwd])
                head.set_modules_to_backward_prefetch([heads[j] for j in bwd])
        return model

    def prepare(self, model, optimizer):
        """Wrap model/optimizer for gradient sync. Returns (train_model, optimizer); generation and saving
        use the unwrapped module. FSDP modules are already sharded (shard_model) and are not wrapped."""
        if self.accelerator is None or self.fsdp:
            return model, optimizer
        return self.accelerator.prepare(model, optimizer)

    @property
    def lockstep(self) -> bool:
        """Every forward is a collective (FSDP all-gathers parameters): all ranks must run the same number."""
        return self.fsdp

    @contextlib.contextmanager
    def full_weights(self, model):
        """FSDP: gather every parameter once and keep it for the block (generation runs hundreds of forwards
        whose count differs between ranks; a generation copy reads each weight once), then shard again.
        One all-gather per FSDP unit, in the compute dtype, all issued before the first is waited on; inside
        the block the modules hold plain full tensors. Otherwise nothing."""
        if not self.fsdp or model is None:
            yield
            return
        mods = [mods[0] for _, mods in _fsdp_units(model)]
        model.set_reshard_after_forward(False)
        handles = [m.unshard(async_op=True) for m in mods]
        for h in handles:
            if h is not None:
                h.wait()
        try:
            yield
        finally:
            for m in mods:
                m.reshard()
            self.keep_gathered(model, False, last=True)  # FSDP2's defaults again

    def gathered_units(self, model):
        """FSDP: for each FSDP unit in turn, yield the names (as `model.named_parameters()` gives them) of the
        parameters it holds, with that unit's weights gathered in the compute dtype and the next unit's gather
        already under way; each unit is resharded after its turn, so at most two are whole at once (a refresh
        of the generation copy then costs two units of memory, not the whole model). One all-gather per unit.
        Otherwise yields None once: every parameter is already whole."""
        if not self.fsdp:
            yield None
            return
        groups = _fsdp_units(model)
        units = [mods[0] for _, mods in groups]
        owned: list[set[str]] = [set() for _ in groups]
        where = {name: i for i, (names, _) in enumerate(groups) for name in names}
        for pname, _ in model.named_parameters():  # each parameter belongs to its deepest unit
            prefix = pname.rpartition(".")[0]
            while prefix not in where:  # up to the nearest enclosing unit
                if not prefix:
                    raise ValueError(
                        f"{pname} is in no FSDP unit: pass the root module that shard_model sharded"
                    )
                prefix = prefix.rpartition(".")[0]
            owned[where[prefix]].add(pname)
        pending = units[0].unshard(async_op=True)
        try:
            for i, unit in enumerate(units):
                ahead = units[i + 1].unshard(async_op=True) if i + 1 < len(units) else None
                if pending is not None:
                    pending.wait()
                pending = ahead
                yield owned[i]
                unit.reshard()
        except BaseException:  # stopped early (an error in the caller): finish the gather issued ahead, and
            if pending is not None:  # leave every unit sharded, as after a whole pass
                pending.wait()
            for unit in units:
                unit.reshard()
            raise

    def keep_gathered(self, model, keep: bool, last: bool) -> None:
        """FSDP, for one forward/backward pass of the update: with `keep`, a layer's gathered weights stay
        from its forward to its backward, and after the backward too unless this is the step's `last` pass;
        without it the defaults every other forward runs with (reshard after each forward and backward; the
        root keeps its weights for the backward). Otherwise nothing."""
        if not self.fsdp:
            return
        model.set_reshard_after_forward(not keep)
        model.set_reshard_after_forward(False, recurse=False)
        model.set_reshard_after_backward(not keep or last)

    def full_state(self, model, optimizer) -> tuple[dict | None, dict]:
        """FSDP: (full model state dict, full optimizer state dict), gathered on all ranks (a collective),
        complete on rank 0. Otherwise (None, the optimizer's own state dict)."""
        if not self.fsdp:
            return None, optimizer.state_dict()
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            get_model_state_dict,
            get_optimizer_state_dict,
        )

        opts = StateDictOptions(full_state_dict=True, cpu_offload=True)
        msd = get_model_state_dict(model, options=opts)
        if getattr(model.config, "tie_word_embeddings", False):
            # the offloaded copy is no longer shared with the embeddings: save it once, as HF does
            msd.pop("lm_head.weight", None)
        return msd, get_optimizer_state_dict(model, optimizer, options=opts)

    def load_full_state(self, model, optimizer, model_state: dict, optim_state: dict) -> None:
        """FSDP: load full (unsharded) state dicts, read by every rank, into the sharded model and optimizer."""
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            set_model_state_dict,
            set_optimizer_state_dict,
        )

        set_model_state_dict(model, model_state, options=StateDictOptions(full_state_dict=True, strict=False))
        set_optimizer_state_dict(
            model, optimizer, optim_state, options=StateDictOptions(full_state_dict=True)
        )

    def unwrap(self, model):
        return model if self.accelerator is None else self.accelerator.unwrap_model(model)

    def shard(self, items: list) -> list:
        return items[self.rank :: self.world]

    def unshard_order(self, items: list) -> list:
        """The order in which gathered shards concatenate: rank 0's items, then rank 1's, ..."""
        return [x for r in range(self.world) for x in items[r :: self.world]]

    def local_positions(self, positions: list[int], total: int) -> list[int]:
        """Positions in the gathered order of `total` sharded items (rank 0's, then rank 1's, ...) -> the
        indices, in this rank's own shard, of those that are this rank's."""
        offset = sum(len(range(q, total, self.world)) for q in range(self.rank))
        mine = len(range(self.rank, total, self.world))
        return [g - offset for g in positions if offset <= g < offset + mine]

    def gather(self, t: torch.Tensor) -> torch.Tensor:
        """Concatenate a (p, ...) tensor of every rank along dim 0 (ranks may hold different p)."""
        if self.accelerator is None:
            return t
        dev = self.accelerator.device
        sizes = self.accelerator.gather(torch.tensor([t.shape[0]], device=dev)).tolist()
        pad = max(sizes) - t.shape[0]
        padded = torch.nn.functional.pad(t.to(dev), (0, 0) * (t.dim() - 1) + (0, pad))
        full = self.accelerator.gather(padded.contiguous()).cpu()
        chunks = full.split(max(sizes))
        return torch.cat([c[:s] for c, s in zip(chunks, sizes)])

    def all_gather_object(self, obj) -> list:
        """[obj of rank 0, obj of rank 1, ...] on every rank (picklable objects)."""
        if self.accelerator is None:
            return [obj]
        out = [None] * self.world
        torch.distributed.all_gather_object(out, obj)
        return out

    def max(self, x: float) -> float:
        if self.accelerator is None:
            return x
        t = torch.tensor(float(x), device=self.accelerator.device)
        torch.distributed.all_reduce(t, op=torch.distributed.ReduceOp.MAX)
        return float(t)

    def sum(self, x: float) -> float:
        if self.accelerator is None:
            return x
        return float(self.accelerator.reduce(torch.tensor(float(x), device=self.accelerator.device), "sum"))

    def backward(self, loss: torch.Tensor) -> None:
        if self.accelerator is None:
            loss.backward()
        else:
            self.accelerator.backward(loss)

    def backward_share(self, loss: torch.Tensor) -> None:
        """Backward of this rank's part of a loss whose normalisers are totals over all ranks: DDP and FSDP
        average gradients over ranks, so the part is scaled by the world size to make that average a sum."""
        self.backward(loss * self.world)

    def forward_passes(self, n: int) -> int:
        """Forwards this rank runs for its `n` micro-batches: under lock-step (FSDP, where every forward is
        a collective) as many as the busiest rank, else its own."""
        return int(self.max(n)) if self.lockstep else n

    def passes(self, n: int) -> int:
        """Forward/backward passes for `n` micro-batches: as forward_passes, and at least one, so that a rank
        with no rows still joins the step's gradient reduction."""
        return max(self.forward_passes(n), 1)

    def empty_forward(self, model, device) -> None:
        """A one-token forward that only joins the collectives (FSDP all-gathers) of a real one."""
        model(input_ids=torch.zeros(1, 1, dtype=torch.long, device=device), use_cache=False)

    def empty_backward(self, model, device) -> None:
        """A forward and backward with zero gradient: joins the gradient reduction of a real pass."""
        out = model(input_ids=torch.zeros(1, 1, dtype=torch.long, device=device), use_cache=False)
        (out.logits.sum() * 0.0).backward()

    def no_sync(self, model, enabled: bool):
        """Skip the gradient all-reduce on all but the last micro-batch of a step."""
        if self.accelerator is None or not enabled:
            return contextlib.nullcontext()
        if self.fsdp:
            return _fsdp_no_sync(model)
        return self.accelerator.no_sync(model)

    def barrier(self) -> None:
        if self.accelerator is not None:
            self.accelerator.wait_for_everyone()


@contextlib.contextmanager
def _fsdp_no_sync(model):
    """Accumulate unsharded gradients locally; the next synced backward reduce-scatters them all."""
    model.set_requires_gradient_sync(False)
    try:
        yield
    finally:
        model.set_requires_gradient_sync(True)


def _fsdp_units(model) -> list[tuple[list[str], list]]:
    """The FSDP units of a sharded model in module order, each as (its modules' names, its modules): one unit
    may hold several modules (update.fsdp_unit_params), and any of them gathers or frees all of it."""
    from torch.distributed.fsdp import FSDPModule, fully_shard

    units: dict[int, tuple[list[str], list]] = {}
    for name, m in model.named_modules():
        if isinstance(m, FSDPModule):
            names, mods = units.setdefault(id(fully_shard.state(m)), ([], []))
            names.append(name)
            mods.append(m)
    return list(units.values())
