"""Decoding with one CUDA-graph replay per token: forward, sampling and stop bookkeeping in one graph.

transformers' generate() compiles the model's forward but runs the rest of each decode step as eager
Python: logits processors, sampling, stopping criteria, the growing input_ids and attention mask. On a small
policy that host work, not the GPU, sets the pace (0.5B shape on an H100: 2.5-3.3 ms per token against a
0.35 ms bandwidth limit). Here a decode step reads and writes only buffers of fixed shape and address, so
the whole step is captured once as a CUDA graph (the forward compiled by torch.compile, the rest plain
aten kernels) and the host replays one graph per token, reading "have all rows finished?" every
`check_every` tokens.

Same distribution as generate(): transformers' own temperature / top-k / top-p warpers on float32 logits,
a softmax, then one draw per row by the exponential race argmax(p / E), E ~ Exp(1), which is what
torch.multinomial(p, 1) computes, draw for draw, with the same generator (tested), without its host-side
validity check that a graph cannot hold. Without a GPU nothing is compiled or captured and the tokens equal
generate()'s under a fixed seed (tests/rollout/test_step_graph.py).
"""

from __future__ import annotations

import inspect
import time
from contextlib import contextmanager

import torch
from transformers import StaticCache, TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

from pods.rollout.attention import NAME as ATTENTION
from pods.rollout.attention import DecodeBlockMask, decode_queries
from pods.rollout.fused import merge_linears


def exponential_race(probs: torch.Tensor) -> torch.Tensor:
    """(B, V) probabilities -> (B,) one draw per row: argmax(p / E), E ~ Exp(1) i.i.d. (the same draws as
    torch.multinomial(probs, 1) from the same generator state, with no host sync)."""
    return (probs / torch.empty_like(probs).exponential_(1)).argmax(-1)


def warp(logits: torch.Tensor, temperature: float, top_p: float, top_k: int) -> torch.Tensor:
    """(B, V) float32 logits -> the scores generate() samples from, by transformers' own warpers in
    generate()'s order (temperature, top-k, top-p; each only where it changes something)."""
    if temperature != 1.0:
        logits = TemperatureLogitsWarper(temperature)(None, logits)
    if top_k > 0:
        logits = TopKLogitsWarper(top_k)(None, logits)
    if top_p < 1.0:
        logits = TopPLogitsWarper(top_p)(None, logits)
    return logits


def pick(logits: torch.Tensor, temperature: float, top_p: float, top_k: int) -> torch.Tensor:
    """(B, V) logits of the last position -> (B,) next tokens; temperature 0 = greedy."""
    logits = logits.float()
    if temperature <= 0:
        return logits.argmax(-1)
    return exponential_race(torch.softmax(warp(logits, temperature, top_p, top_k), -1))


def prefill_mask(keep: torch.Tensor, lp: int) -> torch.Tensor:
    """(B, L) attendable cache columns, prompt width lp -> (B, 1, lp, L) boolean attention mask of the
    prompt's queries: causal over real tokens; a padding position attends only itself (a query with nothing
    to attend gives NaN, which would reach no real token but is kept out anyway).

    >>> prefill_mask(torch.tensor([[0, 1, 1, 0]]), 3).int()[0, 0].tolist()
    [[1, 0, 0, 0], [0, 1, 0, 0], [0, 1, 1, 0]]
    """
    cols = torch.arange(keep.shape[1], device=keep.device)
    rows = torch.arange(lp, device=keep.device)[:, None]
    return (keep.bool()[:, None, None, :] & (cols <= rows)) | (cols == rows)


def shared_prompts(ids: torch.Tensor, am: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(B, L) left-padded rows and their mask -> (firsts (U,), src (B,)): the first row of each run of identical
    consecutive rows, and the run each row belongs to; None if no two consecutive rows are the same (nothing to
    share). generate() repeats each prompt n times in a row, so its chunks hold at most a few distinct prompts.

    >>> shared_prompts(torch.tensor([[1, 2], [1, 2], [3, 4], [3, 4], [3, 4]]), torch.ones(5, 2, dtype=torch.long))
    (tensor([0, 2]), tensor([0, 0, 1, 1, 1]))
    """
    new = torch.ones(ids.shape[0], dtype=torch.bool, device=ids.device)
    new[1:] = (ids[1:] != ids[:-1]).any(1) | (am[1:] != am[:-1]).any(1)
    if bool(new.all()):
        return None
    return torch.nonzero(new).squeeze(1), new.long().cumsum(0) - 1


class StepDecoder:
    """Decodes `rows` sequences into a static cache of `cache_len` positions.

    Buffers of fixed address hold the decode state: the token fed next (B, 1), its position id (B, 1), the
    cache columns a query may attend (B, cache_len) and the finished rows (B,); the new tokens are written to
    `out` (B, cache_len) at the cache column where they are fed. `capture=True` (CUDA): the decode step is
    compiled and captured as one CUDA graph per sampling setting after two eager steps, then replayed.

    `attention="flex"` (rollout.hf.decode_attention): decode steps pass the model a flex_attention block mask
    over `keep` that visits only the cache blocks filled so far (pods/rollout/attention.py: DecodeBlockMask;
    the model's attention must be `pods_sdpa`); the prefill keeps its tensor mask and SDPA.

    `release()` frees the cache's storage and retires the graphs between rollouts (rollout.hf.release_cache):
    the update can use the cache's memory, and the next run allocates the cache again and captures anew after
    two eager steps (the compiled forward is kept: transformers marks the cache addresses static without a
    guard, so a new address recompiles nothing), into the retired graph's memory pool: the last run's graphs
    keep their pools (one decode step's intermediates each) until their successors are captured.
    """

    def __init__(
        self,
        model,
        rows: int,
        cache_len: int,
        eos_ids: list[int],
        pad_id: int,
        capture: bool,
        attention: str = "sdpa",
    ):
        if attention not in ("sdpa", "flex"):
            raise ValueError(f"decode attention {attention!r} is not valid; allowed values: sdpa, flex")
        if attention == "flex" and model.config._attn_implementation != ATTENTION:
            raise ValueError(
                f"flex decode attention runs inside {ATTENTION!r}; this model's attention is "
                f"{model.config._attn_implementation!r}"
            )
        self.model, self.cache_len, self.pad_id, self.capture = model, cache_len, pad_id, capture
        self.device = dev = next(model.parameters()).device
        self.cache = StaticCache(config=model.config, max_cache_len=cache_len)
        params = inspect.signature(model.forward).parameters
        self.cache_kw = "cache" if "cache" in params else "past_key_values"  # renamed in transformers 5.2x
        self.tokens = torch.zeros(rows, 1, dtype=torch.long, device=dev)  # (B, 1) fed next
        self.pos = torch.zeros(rows, 1, dtype=torch.long, device=dev)  # (B, 1) its position id
        self.col = torch.zeros(1, dtype=torch.long, device=dev)  # its cache column
        self.keep = torch.zeros(rows, cache_len, dtype=torch.bool, device=dev)  # attendable columns
        self.done = torch.zeros(rows, dtype=torch.bool, device=dev)
        self.out = torch.zeros(rows, cache_len, dtype=torch.long, device=dev)  # token fed at each column
        self.eos = torch.tensor(eos_ids, dtype=torch.long, device=dev)
        cfg = model.config
        queries = decode_queries(
            cfg.num_attention_heads, getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
        )
        # reads `keep` in place; one query row a KV head, or its group folded (pods/rollout/attention.py)
        self.flex = DecodeBlockMask(self.keep, queries=queries) if attention == "flex" else None
        self.graphs: dict[tuple, torch.cuda.CUDAGraph] = {}
        # released graphs: never replayed, kept for their memory pools
        self.retired: dict[tuple, torch.cuda.CUDAGraph] = {}
        self.side = None  # the stream warm-up steps and captures run on (made once: CUDA only)
        # inductor, after merging the identical products of fused q/k/v and gate/up (pods/rollout/fused.py)
        self.forward = (
            torch.compile(self._forward, dynamic=False, backend=merge_linears) if capture else self._forward
        )
        self.released = False
        # {} to record seconds per part of run() (reclaim, prefill, eager, capture, replay), synchronising the
        # device at each boundary but not between replays (scripts/decode_phases.py); None = off
        self.phase_seconds: dict[str, float] | None = None

    def _lap(self, part: str, t0: float) -> float:
        """Add the seconds since t0 (after the device's queued work) to part; returns the time now."""
        if self.phase_seconds is None:
            return t0
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        now = time.perf_counter()
        self.phase_seconds[part] = self.phase_seconds.get(part, 0.0) + now - t0
        return now

    def _cache_tensors(self) -> list[torch.Tensor]:
        """The static cache's key and value tensors (none before its first prefill: they are made lazily)."""
        layers = getattr(self.cache, "layers", [])
        return [
            t
            for ly in layers
            for t in (getattr(ly, "keys", None), getattr(ly, "values", None))
            if t is not None
        ]

    def release(self) -> None:
        """Free the cache's storage (the tensors stay, with no memory behind them) and retire the graphs the
        last run captured or replayed: never replayed again, they keep their memory pools (one decode step's
        intermediates) for the next capture of their sampling setting to share; graphs retired earlier go.
        The next run() gives the cache its memory back and captures again."""
        for t in self._cache_tensors():
            t.untyped_storage().resize_(0)
        if self.graphs:  # the last run's graphs only: a setting not run since lets its pool go
            self.retired = dict(self.graphs)
        self.graphs.clear()
        self.released = True

    def _reclaim(self) -> None:
        for t in self._cache_tensors():  # cache.reset() zeroes them next
            t.untyped_storage().resize_(t.numel() * t.element_size())
        self.released = False

    def _forward(self, tokens, mask, pos, cache=None) -> torch.Tensor:
        out = self.model(
            input_ids=tokens, attention_mask=mask, position_ids=pos, use_cache=True, logits_to_keep=1,
            **{self.cache_kw: self.cache if cache is None else cache},
        )  # fmt: skip
        return out.logits[:, -1]

    def _prefill(self, ids, mask, pos, shared) -> torch.Tensor:
        """The prompts' forward into the cache -> (B, V) logits of their last position. `shared` (firsts, src),
        from shared_prompts: each distinct prompt runs once, in a cache of its own with the same columns and
        mask rows, and its keys and values are copied to every row that repeats it (rollout.hf.share_prefill)."""
        if shared is None:
            return self._forward(ids, mask, pos)
        firsts, src = (t.to(self.device) for t in shared)
        own = StaticCache(config=self.model.config, max_cache_len=self.cache_len)
        logits = self._forward(ids[firsts], mask[firsts], pos[firsts], cache=own)
        lp = ids.shape[1]
        for big, small in zip(self.cache.layers, own.layers):
            k = small.keys[:, :, :lp].index_select(0, src)  # (B, H, lp, D): the prompt's columns
            v = small.values[:, :, :lp].index_select(0, src)
            if not big.is_initialized:  # first prefill of this decoder: the static tensors are made lazily
                big.lazy_initialization(k, v)  # (reads batch, heads, head size, dtype and device only)
            big.keys[:, :, :lp].copy_(k)
            big.values[:, :, :lp].copy_(v)
            big.cumulative_length.fill_(lp)  # as if the prompt had been written here (a tensor: in place)
        return logits.index_select(0, src)

    def _accept(self, nxt: torch.Tensor) -> None:
        """Record (B,) sampled tokens as the next ones to feed: finished rows get padding, an EOS finishes."""
        nxt = torch.where(self.done, self.pad_id, nxt)
        self.done |= torch.isin(nxt, self.eos)
        self.tokens.copy_(nxt[:, None])
        self.out.index_copy_(1, self.col, nxt[:, None])

    def _step(self, sampling: tuple[float, float, int]) -> None:
        """One decode step, buffers in and out (what the graph holds): feed `tokens` at column `col`."""
        self.keep.index_fill_(1, self.col, True)
        if self.flex is not None:  # visit each row's blocks from its first prompt token's to column col
            self.flex.fill_to(self.col + 1)
            mask = self.flex.mask
        else:
            mask = self.keep[:, None, None, :]
        logits = self.forward(self.tokens, mask, self.pos)
        nxt = pick(logits, *sampling)
        self.col += 1
        self.pos += 1
        self._accept(nxt)

    @contextmanager
    def _side_stream(self):
        if not self.capture:
            yield
            return
        if self.side is None:
            self.side = torch.cuda.Stream(self.device)
        main = torch.cuda.current_stream(self.device)
        self.side.wait_stream(main)
        with torch.cuda.stream(self.side):
            yield
        main.wait_stream(self.side)

    def _capture(self, sampling) -> torch.cuda.CUDAGraph:
        """Record one decode step as a graph (the state the warm-up left is not touched). After release() the
        new graph shares the memory pool of the graph it replaces (`pool=old.pool()`, torch's documented
        sharing; the old one is never replayed again and goes once the capture ends), so a recapture reuses
        the blocks the old graph had. Not `with torch.cuda.graph(...)`: its entry empties the allocator's
        cache, which here ran every rollout (release_cache) and handed back the update's cached segments, for
        the update to allocate again each step (3B LoRA on an H200: 189-214 cudaMallocs per update before,
        0 once warm at 1 GPU after; capture 0.04-0.07 s -> 0.01-0.03 s; results/scaling/h200x4b/)."""
        graph = torch.cuda.CUDAGraph()
        old = self.retired.pop(sampling, None)  # alive until the end: the pool stays referenced
        torch.cuda.synchronize(self.device)  # as torch.cuda.graph: nothing queued runs into the capture
        if old is None:  # a new pool needs fresh memory, and a capture cannot free cached blocks for it:
            torch.cuda.empty_cache()  # free them first, as torch.cuda.graph does (once per decoder and setting)
        with self._side_stream():
            graph.capture_begin(pool=old.pool() if old is not None else None)
            try:
                self._step(sampling)
            finally:
                graph.capture_end()
        return graph

    @torch.no_grad()
    def run(
        self,
        ids: torch.Tensor,
        am: torch.Tensor,
        done: torch.Tensor,
        max_new: int,
        sampling,
        check_every: int = 1,
        shared: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """(B, Lp) left-padded prompts, their mask, (B,) rows finished from the start -> (B, T) new tokens,
        T <= max_new: decoding stops once every row has finished (read every `check_every` tokens; rows that
        finished earlier carry padding), or after max_new tokens. `shared`: shared_prompts(ids, am), to
        prefill each distinct prompt once (None: every row)."""
        lp = ids.shape[1]
        if lp + max_new > self.cache_len:
            raise ValueError(
                f"prompt width {lp} + {max_new} new tokens do not fit a cache of {self.cache_len}"
            )
        sampling = (float(sampling[0]), float(sampling[1]), int(sampling[2]))
        t = time.perf_counter()
        if self.released:
            self._reclaim()
        t = self._lap("reclaim", t)
        self.cache.reset()
        self.keep.zero_()
        self.keep[:, :lp] = am.bool()
        if self.flex is not None:  # skip each row's blocks of left padding
            self.flex.start_at(am.long().argmax(1))
        self.done.copy_(done)
        self.out.fill_(self.pad_id)
        self.col.fill_(lp)
        pos = (am.long().cumsum(1) - 1).masked_fill(am == 0, 1)  # generate()'s positions
        self.pos.copy_(am.long().sum(1, keepdim=True))
        mask = prefill_mask(self.keep, lp)
        logits = self._prefill(ids, mask, pos, shared)  # eager: one call per prompt width
        self._accept(pick(logits, *sampling))
        t = self._lap("prefill", t)
        steps, eager = 1, 0
        while steps < max_new:
            if steps % check_every == 0 and bool(self.done.all()):
                break
            graph = self.graphs.get(sampling)
            if graph is None and self.capture and eager >= 2:  # compiled and warmed up: capture, then replay
                t = self._lap("replay", t)
                graph = self.graphs[sampling] = self._capture(sampling)
                t = self._lap("capture", t)
            if graph is not None:
                graph.replay()
            else:
                t = self._lap("replay", t)
                with self._side_stream():  # warm-up steps before a capture run off the capturing stream
                    self._step(sampling)
                t = self._lap("eager", t)
                eager += 1
            steps += 1
        self._lap("replay", t)
        if self.phase_seconds is not None:
            self.phase_seconds["steps"] = self.phase_seconds.get("steps", 0) + steps
        return self.out[:, lp : lp + steps]
