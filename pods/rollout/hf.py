"""Rollouts with transformers' generate: all prompts x n in batches, KV cache on, left padding.

Two paths, one sampling distribution:

- dynamic (CPU default): `generate` on the training model itself, dynamic KV cache, shapes as they come.
- compiled (CUDA default, `rollout.hf.compile`): a copy of the policy in the compute dtype (bf16), refreshed
  in place after every update (LoRA adapters merged into it, so decoding costs what the base model costs),
  a static KV cache and a decode step compiled and replayed as one CUDA graph per token, sampling and stop
  bookkeeping included (`rollout.hf.loop=graph`, pods/rollout/step_graph.py; `generate` keeps transformers'
  loop around its automatic torch.compile of the forward). A decode step on a small policy is bound by
  kernel launches, not by the GPU: compiling it is what makes extra rollouts nearly free, the regime PODS
  is built for. Shapes are fixed so a run compiles a handful of times: prompts are left-padded to a
  multiple of `prompt_bucket`, chunks have a fixed number of rows (the last is padded with rows that are
  stopped at once), and the cache always holds `max_prompt_len + max_new_tokens`. The first call at a new
  shape is a warm-up (compile + graph capture) timed as `compile`, outside the training clock, with the
  random streams restored so the warm-up draws nothing. Attention reads each grouped KV head once
  (pods/rollout/attention.py), and the host does not wait for the GPU every token (the graph loop reads
  the stop flag every CHECK_EVERY tokens; the generate loop, `deferred_stop_check`). With LoRA the copy
  can be the policy's own base (pods/rollout/gen_copy.py). The graph loop frees its static caches and
  retires its graphs after each generate call (`rollout.hf.release_cache`), so the update can use that
  memory; the next call allocates the caches again and captures after two eager steps, into the retired
  graphs' memory pools. A copy of its own (full fine-tune, or LoRA
  without share_weights) reads q/k/v and gate/up as one GEMM each in the graph loop
  (`rollout.hf.fuse_projections`, pods/rollout/fused.py).
"""

from __future__ import annotations

import logging
import math
import time
from contextlib import contextmanager, nullcontext
from dataclasses import asdict, dataclass
from typing import Any

import torch
from transformers import StoppingCriteria, StoppingCriteriaList

from pods.batch import Rollouts, Sampling
from pods.errors import ConfigError, at_least, choice
from pods.models import canonical_device
from pods.rollout.attention import flex_decode_refusal
from pods.rollout.backend import Backend, RolloutSettings, register_backend
from pods.rollout.gen_copy import GenerationCopy, _unwrap
from pods.rollout.sizing import CPU_ROWS, RowChoice, choose_rows, fast_decode
from pods.rollout.step_graph import StepDecoder, shared_prompts

log = logging.getLogger(__name__)

CHECK_EVERY = 16  # graph loop on CUDA: decode tokens between two reads of "have all rows finished?"


def completion_mask_from_eos(tokens: torch.Tensor, eos_ids: list[int], pad_id: int) -> torch.Tensor:
    """(B, L) generated tokens -> (B, L) mask of real completion tokens: up to and including the first EOS.

    Tokens after the first EOS are padding that generate() appended once the row had finished.
    """
    is_eos = torch.isin(tokens, torch.tensor(eos_ids, device=tokens.device))
    after_eos = (is_eos.cumsum(1) - is_eos.long()) > 0  # strictly after the first EOS
    return (~after_eos).long()


def eos_ids_for(model, tokenizer) -> list[int]:
    """Token ids that end a completion: the tokenizer's EOS plus the model's generation-config EOS ids."""
    gen_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    ids = [tokenizer.eos_token_id] + (gen_eos if isinstance(gen_eos, list) else [gen_eos])
    return sorted({i for i in ids if i is not None})


def bucketed_len(length: int, bucket: int, cap: int) -> int:
    """Prompt width padded up to a multiple of `bucket`, but never past `cap` (nor below `length`).

    >>> bucketed_len(30, 64, 512), bucketed_len(65, 64, 512), bucketed_len(500, 64, 512)
    (64, 128, 512)
    """
    return max(length, min(bucket * math.ceil(max(length, 1) / bucket), cap))


def chunk_rows(rows: int, batch_size: int) -> int:
    """Rows per generate call: the batch size, or the next power of two for a smaller job, so a run sees
    at most log2(batch_size) + 1 distinct batch shapes.

    >>> chunk_rows(512, 256), chunk_rows(128, 256), chunk_rows(141, 256), chunk_rows(3, 256)
    (256, 128, 256, 4)
    """
    return min(batch_size, 1 << max(rows - 1, 0).bit_length())


class _StopRows(StoppingCriteria):
    """Marks padding rows finished from the first token, and (warm-up) every row after `max_new` tokens."""

    def __init__(self, done: torch.Tensor, start: int, max_new: int | None = None):
        self.done, self.start, self.max_new = done, start, max_new

    def __call__(self, input_ids, scores, **kwargs) -> torch.Tensor:
        if self.max_new is not None and input_ids.shape[1] - self.start >= self.max_new:
            return torch.ones_like(self.done)
        return self.done


@dataclass(frozen=True)
class HFSettings:
    """The HF backend's own knobs, `rollout.hf.*` (all but `compile` act only on the compiled path)."""

    compile: str = "auto"  # static KV cache + compiled decoding; auto = on CUDA only | true | false
    prompt_bucket: int = 64  # compiled: prompts are left-padded to a multiple of this (fewer shapes)
    share_weights: bool = True  # compiled + LoRA: decode on the policy's own base with the adapter
    # merged in place (restored from a host copy after), instead of a second bf16 copy of the model
    size_cache_to_prompt: bool = False  # compiled: static cache of this prompt width + new tokens, not
    # the widest: less KV read per decode step, one more compile per prompt width (20-35 s each)
    loop: str = "graph"  # compiled: graph (the whole decode step, sampling included, replayed as one
    # CUDA graph per token: pods/rollout/step_graph.py; one static cache per chunk row count) | generate
    # (transformers' generate loop around a compiled forward)
    release_cache: bool = True  # graph loop: free the static cache and retire the captured graphs after
    # each generate call (the update gets the cache's memory; the next call allocates and captures again)
    fuse_projections: bool = True  # graph loop with a generation copy of its own (full fine-tune, or
    # share_weights=false): q/k/v and gate/up each one GEMM per decode step (pods/rollout/fused.py)
    share_prefill: Any = "auto"  # graph loop: prefill each distinct prompt of a chunk once and copy its keys
    # and values to its n rows (pods/rollout/step_graph.py: shared_prompts), not once per row. The prompt's
    # forward then runs at another batch size, which may round differently on a GPU (issue 38: 0 of 7,616
    # greedy tokens differed on an H200). auto = on where the graph loop runs (pods/rollout/sizing.py) | true | false
    decode_attention: str = "auto"  # graph loop: flex (torch's flex_attention over the cache blocks filled so
    # far: pods/rollout/attention.py; needs hardware.attn_implementation=sdpa; another summation order than
    # SDPA's, issue 38) | sdpa (the whole static cache every decode step) | auto = flex where the graph loop
    # runs on CUDA and the model's attention allows it, else sdpa (pods/rollout/sizing.py, one log line says
    # which)

    def check(self) -> None:
        choice("rollout.hf.compile", str(self.compile).lower(), ["auto", "true", "false"])
        at_least("rollout.hf.prompt_bucket", self.prompt_bucket, 1)
        choice("rollout.hf.loop", self.loop, ["generate", "graph"])
        choice("rollout.hf.decode_attention", self.decode_attention, ["auto", "sdpa", "flex"])
        if self.share_prefill not in ("auto", True, False):
            raise ConfigError(f"rollout.hf.share_prefill={self.share_prefill!r} must be auto, true or false")
        if self.decode_attention == "flex" and self.loop == "generate":
            raise ConfigError(
                "rollout.hf.decode_attention=flex acts on the graph loop's decode steps only; "
                "rollout.hf.loop=generate decodes with transformers' own loop: use rollout.hf.loop=graph"
            )


def hf_settings(settings: RolloutSettings) -> HFSettings:
    """rollout.hf's settings (typed by pods.components.resolve; the defaults if the section is unset, as for
    a backend of another name that hands generation to this one)."""
    own = settings.rollout.sections.get("hf")
    return own if isinstance(own, HFSettings) else HFSettings(**(own or {}))


def graph_loop(settings: RolloutSettings, device) -> bool:
    """Whether the graph loop decodes (the compiled path with rollout.hf.loop=graph): where the fast decode acts."""
    return use_compiled(settings, device) and hf_settings(settings).loop == "graph"


def use_compiled(settings: RolloutSettings, device) -> bool:
    """rollout.hf.compile: auto = on for CUDA (decoding small batches is launch-bound there), off on CPU
    (compiling costs tens of seconds; not measured faster there) and with a 4-bit base (its packed weights
    cannot be copied into the bf16 generation copy)."""
    compile_ = str(hf_settings(settings).compile).lower()
    if compile_ == "auto":
        return device.type == "cuda" and not settings.hardware.load_in_4bit
    return compile_ == "true"


@register_backend("hf", settings=HFSettings)
class HFGenerator(Backend):
    @classmethod
    def from_config(
        cls, settings: RolloutSettings, model, tokenizer, device, timer=None, **knobs
    ) -> HFGenerator:
        from pods.models import resolve_dtype

        m, hf = settings.model, HFSettings(**knobs)  # rollout.hf.*: the defaults if none
        compiled, dtype = use_compiled(settings, device), resolve_dtype(m, settings.hardware, device)
        loop, cfg = graph_loop(settings, device), _unwrap(model).config
        attn, share, why = fast_decode(hf, loop, settings.hardware.attn_implementation, cfg, device.type)
        auto = fast_decode(HFSettings(), loop, settings.hardware.attn_implementation, cfg, device.type)
        if (attn, share) == auto[:2]:  # preflight settled auto (config.yaml holds the values): auto's reason
            why = auto[2]
        own = {**asdict(hf), "decode_attention": attn, "share_prefill": share}
        own.pop("compile")  # decided with the device: use_compiled
        gen = cls(
            model,
            tokenizer,
            device,
            CPU_ROWS,  # auto: sized below, once the generation copy is placed
            m.max_completion_len,
            compiled=compiled,
            dtype=dtype,
            max_prompt_len=m.max_prompt_len,
            timer=timer,
            **own,
        )
        gen.decisions["rollout.hf.decode_attention"] = {"value": attn, "share_prefill": share, "why": why}
        gen.batch_size = gen.size_rows(settings.rollout)
        return gen

    def size_rows(self, rollout) -> int:
        """rollout.batch_size, or for auto the rows sized from memory (pods/rollout/sizing.py), logged and kept
        in `decisions` for run_info.json."""
        if rollout.batch_size != "auto":
            choice_ = RowChoice(int(rollout.batch_size), "set in the config")
        else:
            cache = self._max_width() + self.max_new_tokens  # the static cache's length (all widths)
            model = _unwrap(self.model)
            dtype_bytes = (self.copy.model if self.copy else model).dtype.itemsize
            reserve = 0 if self.release_cache else self.update_reserve(model)
            choice_ = choose_rows(
                model.config, self.device, cache, self._max_width(), dtype_bytes, self.model,
                rollout.memory_fraction, reserve,
            )  # fmt: skip
            log.info("rollout.batch_size=auto: %s", choice_.why)
        self.decisions["rollout.batch_size"] = {"value": choice_.rows, "why": choice_.why}
        return choice_.rows

    def update_reserve(self, model) -> int:
        """With the caches kept through the update (release_cache=false): its logits at the widest row
        (float32, the vocabulary wide), the update's largest buffer at small policies; 16 rows a pass."""
        return 16 * (self._max_width() + self.max_new_tokens) * model.config.vocab_size * 4

    @staticmethod
    def check(settings: RolloutSettings) -> None:
        hf = hf_settings(settings)
        if hf.decode_attention == "flex" and settings.hardware.attn_implementation != "sdpa":
            raise ConfigError(
                "rollout.hf.decode_attention=flex runs inside the generation copy's sdpa attention, but "
                f"hardware.attn_implementation={settings.hardware.attn_implementation}; use sdpa, or "
                "rollout.hf.decode_attention=sdpa"
            )
        if str(hf.compile).lower() == "true" and settings.hardware.load_in_4bit:
            raise ConfigError(
                "rollout.hf.compile=true needs a bf16 copy of the weights, which a 4-bit base "
                "(hardware.load_in_4bit=true) cannot give; use rollout.hf.compile=auto or false"
            )

    @staticmethod
    def keeps_generation_copy(settings: RolloutSettings, device) -> bool:
        return use_compiled(settings, device)  # the compiled path decodes from a compute-dtype copy

    def __init__(
        self,
        model,
        tokenizer,
        device,
        batch_size: int,
        max_new_tokens: int,
        compiled: bool = False,
        dtype: torch.dtype | None = None,
        prompt_bucket: int = 64,
        max_prompt_len: int = 512,
        timer=None,
        share_weights: bool = False,
        defer_stop: bool | None = None,
        size_cache_to_prompt: bool = False,
        loop: str = "graph",
        release_cache: bool = False,
        fuse_projections: bool = True,
        share_prefill: bool = False,
        decode_attention: str = "sdpa",
    ):
        self.model, self.tok, self.device = model, tokenizer, canonical_device(device)
        self.decisions: dict[str, dict] = {}  # the `auto` settings decided, and why (run_info.json)
        self.share_prefill, self.decode_attention = share_prefill, decode_attention
        self.batch_size, self.max_new_tokens = batch_size, max_new_tokens
        self.eos_ids = eos_ids_for(model, tokenizer)
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        self.compiled, self.prompt_bucket, self.max_prompt_len = compiled, prompt_bucket, max_prompt_len
        self.timer, self.size_cache_to_prompt = timer, size_cache_to_prompt
        # CUDA only: transformers' deferred check records device events (a CPU has none)
        self.defer_stop = compiled and self.device.type == "cuda" if defer_stop is None else defer_stop
        if loop not in ("generate", "graph"):
            raise ValueError(f"rollout.hf.loop={loop!r} is not valid; allowed values: generate, graph")
        self.loop = loop if compiled else "generate"  # the graph loop decodes the static-cache copy
        if decode_attention == "flex" and self.loop != "graph":  # e.g. rollout.hf.compile=auto on a CPU
            log.warning(
                "rollout.hf.decode_attention=flex has no effect here: transformers' generate() decodes, not the "
                "graph loop (compiled=%s on %s; rollout.hf.compile=auto compiles on CUDA only)",
                compiled,
                self.device,
            )
        self.step_decoders: dict[tuple[int, int], StepDecoder] = {}  # (rows, cache length) -> its decoder
        self.release_cache = release_cache  # graph loop: caches and graphs freed after each generate()
        self.warm_shapes: set[tuple] = set()
        self.compile_seconds = 0.0
        self.copy = None
        if compiled:
            refusal = flex_decode_refusal(_unwrap(model).config) if decode_attention == "flex" else None
            if refusal is not None:  # before the generation copy is made
                raise ConfigError(f"rollout.hf.decode_attention=flex cannot decode this policy: {refusal}")
            _raise_recompile_limit(64)
            # fused q/k/v and gate/up need the graph loop's compile backend (pods/rollout/fused.py)
            fuse = fuse_projections and self.loop == "graph"
            self.copy = GenerationCopy(
                model, self.device, dtype or torch.bfloat16, share=share_weights, fuse=fuse
            )

    @property
    def decoder(self):
        """The module that generates: the compute-dtype copy on the compiled path, else the policy itself."""
        return self.copy.model if self.copy is not None else self.model

    @property
    def reads_policy(self):
        """The training module that generate() reads (FSDP gathers its weights first), None with a copy."""
        return self.model if self.copy is None else None

    def sync_weights(self, model, only: set[str] | None = None) -> None:
        """Compiled path: refresh the generation copy after an update (`only` these weights, when given);
        otherwise nothing to push (generation runs on the training model itself)."""
        if self.copy is not None:
            self.copy.sync(model, only)

    syncs_by_name = True  # sync_weights takes `only`: the Trainer refreshes an FSDP policy a unit at a time

    def tokenize(self, prompts: list[str], add_special_tokens: bool) -> tuple[torch.Tensor, torch.Tensor]:
        self.tok.padding_side = "left"
        enc = self.tok(prompts, return_tensors="pt", padding=True, add_special_tokens=add_special_tokens)
        ids, am = enc["input_ids"], enc["attention_mask"]
        if self.compiled:  # a fixed set of prompt widths
            width = bucketed_len(ids.shape[1], self.prompt_bucket, self.max_prompt_len)
            ids = torch.nn.functional.pad(ids, (width - ids.shape[1], 0), value=self.pad_id)
            am = torch.nn.functional.pad(am, (width - am.shape[1], 0), value=0)
        return ids, am

    def _gen_kwargs(self, temperature: float, top_p: float, top_k: int, lp: int) -> dict:
        # Sampling exactly at the configured temperature/top-p/top-k: explicit values override a hub model's
        # generation_config defaults (Qwen ships top_k=20, repetition_penalty=1.05), which would otherwise make
        # the behaviour policy differ from the one the loss assumes.
        kwargs = dict(
            do_sample=temperature > 0,
            max_new_tokens=self.max_new_tokens,
            pad_token_id=self.pad_id,
            eos_token_id=self.eos_ids,
            use_cache=True,
            repetition_penalty=1.0,
        )
        if temperature > 0:
            kwargs.update(temperature=temperature, top_p=top_p, top_k=top_k)  # top_k=0 disables it
        else:
            kwargs.update(temperature=None, top_p=None, top_k=None)
        if self.compiled:
            # one cache size for every prompt width: the decode graph depends on the row count only. With
            # size_cache_to_prompt the cache holds this width + new tokens: less KV to read per step, but one
            # compile per (rows, width) (~20-35 s each at 0.5B-3B on an H100).
            width = lp if self.size_cache_to_prompt else max(lp, self._max_width())
            kwargs.update(cache_implementation="static", max_cache_len=width + self.max_new_tokens)
        return kwargs

    def _max_width(self) -> int:
        return bucketed_len(self.max_prompt_len, self.prompt_bucket, self.max_prompt_len)

    def _step_decoder(self, rows: int, cache_len: int) -> StepDecoder:
        key = (rows, cache_len)
        if key not in self.step_decoders:  # one static cache per chunk shape (a run meets one or two)
            capture = self.device.type == "cuda"
            dec = StepDecoder(
                self.decoder, rows, cache_len, self.eos_ids, self.pad_id, capture, self.decode_attention
            )
            self.step_decoders[key] = dec
        return self.step_decoders[key]

    def _decode(
        self, ids, am, done, kwargs: dict, stop, max_new: int | None = None, shared=None
    ) -> torch.Tensor:
        """(rows, Lp) -> (rows, Lp + T) prompts and new tokens, by the configured loop."""
        if self.loop == "generate":
            if max_new is not None:
                stop = StoppingCriteriaList([_StopRows(done, ids.shape[1], max_new=max_new)])
            with deferred_stop_check(self.defer_stop):
                return self.decoder.generate(
                    input_ids=ids, attention_mask=am, stopping_criteria=stop, **kwargs
                )
        dec = self._step_decoder(ids.shape[0], kwargs["max_cache_len"])
        check = CHECK_EVERY if self.device.type == "cuda" else 1  # a host sync every `check` tokens
        new = dec.run(
            ids, am, done, max_new or self.max_new_tokens, _sampling(kwargs), check_every=check, shared=shared
        )
        return torch.cat([ids, new], 1)

    def _generate_chunk(self, ids: torch.Tensor, am: torch.Tensor, kwargs: dict) -> torch.Tensor:
        """(b, Lp) -> (b, Lc) new tokens; on the compiled path padded to a fixed row count first."""
        b = ids.shape[0]
        rows = chunk_rows(b, self.batch_size) if self.compiled else b
        done = torch.zeros(rows, dtype=torch.bool, device=self.device)
        if rows > b:  # filler rows (copies of row 0) are finished before they start
            fill = rows - b
            ids = torch.cat([ids, ids[:1].expand(fill, -1)])
            am = torch.cat([am, am[:1].expand(fill, -1)])
            done[b:] = True
        # graph loop, share_prefill: which rows repeat a prompt (on the host, before the copy: no device sync)
        shared = shared_prompts(ids, am) if self.share_prefill and self.loop == "graph" else None
        ids, am, lp = ids.to(self.device), am.to(self.device), ids.shape[1]
        # the graph loop captures one graph per sampling setting: each is a shape to warm up
        warm_key = (rows, lp) if self.loop == "generate" else (rows, lp, _sampling(kwargs))
        if self.compiled and warm_key not in self.warm_shapes:
            self._warm_up(ids, am, done, kwargs, shared)
            self.warm_shapes.add(warm_key)
        stop = StoppingCriteriaList([_StopRows(done, lp)]) if rows > b else None
        out = self._decode(ids, am, done, kwargs, stop, shared=shared)
        return out[:b, lp:].cpu()

    def _warm_up(self, ids, am, done, kwargs, shared=None) -> None:
        """Compile and capture this shape with a few decode steps, outside the training clock; the random
        streams are restored, so what follows samples exactly what it would have without the warm-up."""
        phase = self.timer.phase("compile") if self.timer is not None else nullcontext()
        t0 = time.perf_counter()
        devices = [self.device] if self.device.type == "cuda" else []
        with phase, torch.random.fork_rng(devices=devices):
            self._decode(ids, am, done, kwargs, None, max_new=4, shared=shared)
        self.compile_seconds += time.perf_counter() - t0

    @torch.no_grad()
    def generate(
        self,
        prompts: list[str],
        prompt_ids: list[int],
        n: int,
        temperature: float,
        top_p: float = 1.0,
        top_k: int = 0,
        add_special_tokens: bool = False,
        batch_size: int | None = None,
    ) -> Rollouts:
        """Generate n completions for each prompt; temperature 0 means greedy. Sequences are generated in
        chunks of `batch_size` (default: the rollout batch size)."""
        bs = batch_size or self.batch_size
        ids, am = self.tokenize(prompts, add_special_tokens)  # (P, Lp)
        ids, am = ids.repeat_interleave(n, 0), am.repeat_interleave(n, 0)  # (P*n, Lp), group-major
        was_training = self.decoder.training
        self.decoder.eval()
        kwargs = self._gen_kwargs(temperature, top_p, top_k, ids.shape[1])
        saved_bs, self.batch_size = self.batch_size, bs
        try:
            if self.copy is not None:
                self.copy.merge(self.model)  # share_weights: adapters into the base for decoding
                if self.size_cache_to_prompt:  # transformers keeps the largest cache it has made otherwise
                    self.decoder._previous_max_cache_length = -1
            chunks = [
                self._generate_chunk(ids[s : s + bs], am[s : s + bs], kwargs) for s in range(0, len(ids), bs)
            ]
        finally:
            self.batch_size = saved_bs
            if self.release_cache:
                for dec in self.step_decoders.values():
                    dec.release()
            if self.copy is not None:
                self.copy.restore()
            if was_training:
                self.decoder.train()
        width = max(c.shape[1] for c in chunks)
        comp = torch.cat(
            [torch.nn.functional.pad(c, (0, width - c.shape[1]), value=self.pad_id) for c in chunks]
        )
        cmask = completion_mask_from_eos(comp, self.eos_ids, self.pad_id)
        comp = torch.where(cmask.bool(), comp, torch.full_like(comp, self.pad_id))
        texts = self.detokenize(comp)
        return Rollouts(
            input_ids=torch.cat([ids, comp], 1),
            attention_mask=torch.cat([am, cmask], 1),
            prompt_len=ids.shape[1],
            completion_mask=cmask,
            texts=texts,
            prompt_ids=list(prompt_ids),
            group_size=n,
            sampling=Sampling(temperature, top_p, top_k),
        )

    def detokenize(self, comp: torch.Tensor) -> list[str]:
        """(B, L) completion ids, padded after each row's stop -> B texts (decode_completions)."""
        return decode_completions(self.tok, comp)


def decode_completions(tok, comp: torch.Tensor) -> list[str]:
    """The texts `tok.batch_decode(comp, skip_special_tokens=True)` gives, with less work per row (issue 38):
    rows told apart by their bytes, and only the distinct ones copied to Python ints and decoded (n samples of a
    prompt often repeat: 216 distinct of 512 in a PODS step of the headline policy at T=0.9), each by the Rust
    tokenizer directly where transformers' per-row decode is exactly that call. A loop over the rows, not the
    Rust decode_batch: that one runs on a thread pool, and on the loaded 2-core CPU its median was 1.2-3.6x
    the loop's (equal minima)."""
    ids = comp.cpu().numpy()
    index: dict[bytes, int] = {}  # a row's bytes -> its place among the distinct rows (by first appearance)
    where = [index.setdefault(row.tobytes(), len(index)) for row in ids]
    firsts: dict[int, int] = {}
    for i, w in enumerate(where):
        firsts.setdefault(w, i)
    rows = ids[list(firsts.values())].tolist()  # the distinct rows, as Python ints
    rust = _rust_decoder(tok)
    if rust is not None:
        texts = [rust.decode(r, skip_special_tokens=True) for r in rows]
    else:
        texts = tok.batch_decode(rows, skip_special_tokens=True) if rows else []
    return [texts[i] for i in where]


def _rust_decoder(tok):
    """The Rust tokenizer behind `tok` when transformers' batch_decode(skip_special_tokens=True) is, row by row,
    exactly its decode (a fast tokenizer with transformers' own decode methods and no clean-up pass), else None."""
    backend = getattr(tok, "backend_tokenizer", None)
    if backend is None or getattr(tok, "clean_up_tokenization_spaces", True):
        return None
    owners = [
        next((c for c in type(tok).__mro__ if k in c.__dict__), None)
        for k in ("batch_decode", "decode", "_decode")
    ]
    base = ("transformers.tokenization_utils_base", "transformers.tokenization_utils_tokenizers",
            "transformers.tokenization_utils_fast")  # fmt: skip
    return backend if all(c is not None and c.__module__ in base for c in owners) else None


def _sampling(kwargs: dict) -> tuple[float, float, int]:
    """generate() keyword arguments -> the graph loop's (temperature, top_p, top_k); (0, 1, 0) = greedy."""
    if not kwargs["do_sample"]:
        return 0.0, 1.0, 0
    return float(kwargs["temperature"]), float(kwargs["top_p"]), int(kwargs["top_k"])


@contextmanager
def deferred_stop_check(enabled: bool):
    """Let generate() read "have all rows finished?" one decode step late, so the host queues step t+1 while
    the GPU runs step t. transformers reads the flag synchronously every step except on Apple's mps (its
    DeferredStopCheck: one extra decode step at the end, undone; the tokens returned are the same, the extra
    step's draw advances the random stream). Without it the host waits for the GPU every token and the
    Python side of each step adds to the GPU's time instead of overlapping it."""
    from transformers.generation import utils as gen_utils

    cls = getattr(gen_utils, "DeferredStopCheck", None)
    if not enabled or cls is None:
        yield
        return
    original = cls.__dict__["is_supported"]

    def is_supported(device, cache, cache_is_returned, is_assistant) -> bool:
        return not is_assistant and (cache is None or cache.is_croppable or not cache_is_returned)

    cls.is_supported = staticmethod(is_supported)
    try:
        yield
    finally:
        cls.is_supported = original


def _raise_recompile_limit(limit: int) -> None:
    """Each (rows, prompt width) pair is one more compiled graph; torch's default limit (8) is too low."""
    cfg = torch._dynamo.config
    for name in ("recompile_limit", "cache_size_limit"):
        if hasattr(cfg, name) and getattr(cfg, name) < limit:
            setattr(cfg, name, limit)
