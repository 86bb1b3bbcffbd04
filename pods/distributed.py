"""Several processes through accelerate (DDP; FSDP/DeepSpeed via an accelerate config).

Every rank draws the same prompts and keeps its shard (rank::world); rewards are gathered so that the
pre-rollout filter, dynamic sampling, selection and metrics see the whole batch and agree on all
ranks. In one process everything here is an identity.
"""

from __future__ import annotations

import contextlib
import os

import torch


def launched_distributed() -> bool:
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


class Dist:
    def __init__(self, cfg, device: torch.device):
        self.accelerator = None
        self.rank, self.world = 0, 1
        if cfg.hardware.distributed != "none" and launched_distributed():
            from accelerate import Accelerator

            self.accelerator = Accelerator(cpu=device.type == "cpu")
            self.rank, self.world = self.accelerator.process_index, self.accelerator.num_processes

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def prepare(self, model, optimizer):
        """Wrap model/optimizer for gradient sync. Returns (train_model, optimizer); generation and saving
        use the unwrapped module."""
        if self.accelerator is None:
            return model, optimizer
        return self.accelerator.prepare(model, optimizer)

    def unwrap(self, model):
        return model if self.accelerator is None else self.accelerator.unwrap_model(model)

    def shard(self, items: list) -> list:
        return items[self.rank :: self.world]

    def unshard_order(self, items: list) -> list:
        """The order in which gathered shards concatenate: rank 0's items, then rank 1's, ..."""
        return [x for r in range(self.world) for x in items[r :: self.world]]

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

    def sum(self, x: float) -> float:
        if self.accelerator is None:
            return x
        return float(self.accelerator.reduce(torch.tensor(float(x), device=self.accelerator.device), "sum"))

    def backward(self, loss: torch.Tensor) -> None:
        if self.accelerator is None:
            loss.backward()
        else:
            self.accelerator.backward(loss)

    def no_sync(self, model, enabled: bool):
        """Skip the gradient all-reduce on all but the last micro-batch of a step."""
        if self.accelerator is None or not enabled:
            return contextlib.nullcontext()
        return self.accelerator.no_sync(model)

    def barrier(self) -> None:
        if self.accelerator is not None:
            self.accelerator.wait_for_everyone()
