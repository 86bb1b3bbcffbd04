"""The generation copy: the policy's weights in the compute dtype, in a plain transformers model that only
decodes (compiled, static cache). With LoRA it either holds base + adapter merged (a second copy of the
model) or, with `share`, is the policy's own base with the adapter merged in place around each decode. With `fuse`
(a separate copy only) q/k/v and gate/up are one matrix each (pods/rollout/fused.py).
"""

from __future__ import annotations

import re

import torch

from pods.models import canonical_device
from pods.rollout.attention import register as register_grouped_attention
from pods.rollout.fused import fuse_projections

_PEFT_PREFIX = "base_model.model."


def _unwrap(model):
    """The plain transformers model under DDP / peft wrappers (its config, its parameter names)."""
    model = getattr(model, "module", model)
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def _full(t: torch.Tensor) -> torch.Tensor:
    """A DTensor (FSDP shard) as the whole tensor (a collective: every rank calls it in the same order)."""
    return t.full_tensor() if hasattr(t, "full_tensor") else t


class GenerationCopy:
    """The policy's weights in the compute dtype, in a plain transformers model used only for decoding.

    `sync(model)` copies the training weights in place (fixed addresses: compiled graphs stay valid). With
    peft LoRA the copy holds base + B @ A * scale for every adapted layer: generation never runs the adapter.

    `share=True` (LoRA, `rollout.hf.share_weights`): no second copy of the model. Every frozen weight that is
    already in the compute dtype is the policy's own tensor; an adapted layer's base weight is merged in place
    before decoding (`merge`) and put back exactly after it (`restore`) from a pinned host copy of the frozen
    base, read once at start. Costs one host-to-device copy of the adapted weights per rollout batch.

    `fuse=True` (not with `share`: the policy's q/k/v are separate tensors): each q/k/v and gate/up group of the
    copy is one weight matrix, the layers' weights views of it under their own names (`fused_groups` counts
    them). Compile the copy's forward with pods.rollout.fused.merge_linears then.
    """

    def __init__(self, model, device, dtype: torch.dtype, share: bool = False, fuse: bool = False):
        from transformers import AutoModelForCausalLM

        # with its index: "cuda" never equals a tensor's cuda:0, and nothing would be shared
        device = canonical_device(device)
        base = _unwrap(model)
        attn = base.config._attn_implementation
        attn = register_grouped_attention() if attn == "sdpa" else attn  # no repeat_kv per decode step
        params = self._plain_names(model)
        self.share = share and any(hasattr(m, "get_delta_weight") for m in model.modules())
        # parameters on the meta device: no random init on the host (about a minute for a 3B model); each
        # gets the policy's tensor or fresh storage below, filled by sync()
        with torch.random.fork_rng(devices=[]), _empty_weights():  # and no draw from the random streams
            self.model = AutoModelForCausalLM.from_config(base.config, dtype=dtype, attn_implementation=attn)
        self.model.generation_config = base.generation_config
        if self.model.config.tie_word_embeddings:  # made on the meta device: tie it here
            self.model.lm_head.weight = self.model.get_input_embeddings().weight
        adapted = {
            n.removeprefix(_PEFT_PREFIX) for n, m in model.named_modules() if hasattr(m, "get_delta_weight")
        }
        self.adapted = {a + ".weight" for a in adapted}
        own = set()
        if "lm_head" in adapted and "lm_head.weight" not in dict(self.model.named_parameters()):
            # an adapter on a tied head: the copy needs a head of its own (base embedding + the head's delta)
            w = self.model.lm_head.weight
            self.model.lm_head.weight = torch.nn.Parameter(torch.empty_like(w), False)
            self.model.config.tie_word_embeddings = False
            own.add("lm_head.weight")
        self.backup: dict[str, torch.Tensor] = {}
        self._place(params, device, dtype, own)
        self.model.to(device).eval().requires_grad_(False)
        self.fused_groups = fuse_projections(self.model) if fuse and not self.share else 0
        self._synced_frozen = False
        self.merged = False
        self.sync(model)

    def _place(self, params: dict, device, dtype: torch.dtype, own: set) -> None:
        """Give every copy parameter storage, keeping the copy's own ties: with `share` the policy's tensor
        where dtype and device allow (and a pinned host copy of each adapted base), else fresh storage."""
        slots: dict[int, list] = {}
        for mod in self.model.modules():
            for leaf, p in mod._parameters.items():
                if p is not None:
                    slots.setdefault(id(p), []).append((mod, leaf))
        for name, p in list(self.model.named_parameters()):
            src = params.get(name)
            alias = (
                self.share
                and name not in own
                and src is not None
                and not hasattr(src, "full_tensor")
                and src.dtype == dtype
                and src.device == device
                and (not src.requires_grad or name in self.adapted)
            )
            t = src.detach() if alias else torch.empty(p.shape, dtype=dtype, device=device)
            new = torch.nn.Parameter(t, requires_grad=False)
            for mod, leaf in slots[id(p)]:
                mod._parameters[leaf] = new
            if alias and name in self.adapted:
                host = torch.empty(t.shape, dtype=t.dtype, pin_memory=t.is_cuda)
                self.backup[name] = host.copy_(t)
        for mod in self.model.modules():  # buffers (rotary frequencies) made on the meta device
            for leaf, b in mod._buffers.items():
                if b is not None and b.is_meta:
                    raise ValueError(f"generation copy: buffer {leaf!r} was not materialised")

    @staticmethod
    @torch.no_grad()
    def _merged(model, keep=lambda name: True):
        """peft: yields (parameter name, base weight + the deltas of the active LoRA adapters) for each adapted
        layer whose name `keep` accepts, one layer at a time (float32: one layer's merged weight at once)."""
        model = getattr(model, "module", model)  # DDP
        if not hasattr(model, "get_base_model"):
            return
        if any(getattr(c, "use_dora", False) for c in getattr(model, "peft_config", {}).values()):
            raise ValueError(
                "rollout.hf.compile: a DoRA adapter cannot be merged here; use rollout.hf.compile=false"
            )
        for name, mod in model.named_modules():
            if not (hasattr(mod, "get_delta_weight") and hasattr(mod, "get_base_layer")):
                continue
            plain = name.removeprefix(_PEFT_PREFIX) + ".weight"
            if not keep(plain):
                continue
            w = _full(mod.get_base_layer().weight).float()
            if not getattr(mod, "disable_adapters", False):
                for adapter in mod.active_adapters:
                    if adapter in getattr(mod, "lora_A", {}) or adapter in getattr(
                        mod, "lora_embedding_A", {}
                    ):
                        w = w + mod.get_delta_weight(adapter).float()
            yield plain, w

    @staticmethod
    def _plain_names(model) -> dict[str, torch.Tensor]:
        """Training parameters under the names a plain transformers model gives them (peft wrappers, its
        base_layer and modules_to_save copies mapped back; the frozen original of a saved module left out)."""
        model = getattr(model, "module", model)  # DDP
        if not hasattr(model, "get_base_model"):
            return dict(model.named_parameters())
        out = {}
        for n, p in model.named_parameters():
            if ".original_module." in n or ".lora_" in n:  # adapters reach the copy merged (_merged)
                continue
            n = re.sub(r"\.modules_to_save\.[^.]+\.", ".", n.removeprefix(_PEFT_PREFIX))
            out[n.replace(".base_layer", "")] = p
        return out

    @torch.no_grad()
    def sync(self, model, only: set[str] | None = None) -> None:
        """Copy the policy's current weights into the generation copy, in place. Every training weight must
        land somewhere: a weight the copy has no place for is an error, not a silent divergence. Weights the
        copy shares with the policy need no copy; shared adapted layers are merged by `merge`. `only`: copy
        just these weights (names as the policy's plain names; FSDP refreshes one unit at a time), frozen
        ones included every time."""
        params, dsts = self._plain_names(model), dict(self.model.named_parameters())
        want = self.adapted | {k for k, p in params.items() if p.requires_grad}
        lost = sorted(want - set(dsts))
        if lost:
            raise ValueError(
                f"generation copy: trained weights {lost[:4]} have no place in the copy (tied or renamed "
                "modules); use rollout.hf.compile=false"
            )
        for name, w in self._merged(model, lambda n: n not in self.backup and (only is None or n in only)):
            dsts[name].copy_(w)
        for name, dst in dsts.items():
            if name in self.adapted or (only is not None and name not in only):
                continue
            src = params.get(name)
            if src is None:
                raise KeyError(f"generation copy: no training parameter named {name!r}")
            if dst.data_ptr() == src.data_ptr():  # shared storage
                continue
            if src.requires_grad or not self._synced_frozen or only is not None:  # frozen: copied once
                dst.copy_(_full(src.detach()))
        self._synced_frozen = self._synced_frozen or only is None

    @torch.no_grad()
    def merge(self, model) -> None:
        """share: add the adapters into the policy's own base weights for decoding (undone by `restore`)."""
        if self.backup and not self.merged:
            self.merged = True  # before the first write: a failure part-way is still undone by restore
            dsts = dict(self.model.named_parameters())
            for name, w in self._merged(model, lambda n: n in self.backup):
                dsts[name].copy_(w)

    @torch.no_grad()
    def restore(self) -> None:
        """share: the policy's base weights back, bit for bit, from the host copy (in stream order)."""
        if self.merged:
            dsts = dict(self.model.named_parameters())
            for name, host in self.backup.items():
                dsts[name].copy_(host, non_blocking=True)
            self.merged = False


def _empty_weights():
    """Parameters on the meta device (no memory), buffers real: the shared copy's parameters are the policy's."""
    from accelerate import init_empty_weights

    return init_empty_weights(include_buffers=False)
