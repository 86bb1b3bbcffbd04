"""A training step of the real Trainer by part, for scripts/bench_step_cost.py (issue 38): `Probe` wraps one
HFGenerator's methods (and the update's log-prob pass) to time the generation's parts, `StepRecorder` (a Trainer
callback) takes each step's timer record and those parts. Benchmark code only: nothing in pods changes.

Parts (seconds per step): tokenize, prefill (StepDecoder's), decode (every decode step after the prefill: graph
replays on CUDA, eager steps on a CPU), tail (decode's share after 90% of a chunk's rows had finished), warm-up
(eager steps and capture of a released graph: CUDA), sampling (CPU only: inside decode), detokenize, gen. other
(the rest of generation), logprobs (the update's old/reference log-probs). gc is the Trainer's heap freeze after
the first step (pods/trainer.py: once a run, charged to the second step's record; 0.7-1.5 s at 3B LoRA).
"""

from __future__ import annotations

import statistics
import time

import torch

from bench.harness import sync
from pods.callbacks import Callback
from pods.rollout import step_graph
from pods.update import step as update_step

PHASES = [
    "prefilter",
    "generation",
    "gather",
    "reward",
    "selector",
    "advantages",
    "update",
    "weight_sync",
    "metrics",
    "gc",
]
GEN_PARTS = ["tokenize", "prefill", "decode", "tail", "warm-up", "sampling", "detokenize", "gen. other"]
ROWS = [
    "step",
    *PHASES[:2],
    *[f"  {p}" for p in GEN_PARTS],
    *PHASES[2:-1],
    "  logprobs",
    PHASES[-1],
    "unattributed",
    "cpu step",
]


class Probe:
    """Seconds of the generation's parts in the current step, by wrapping one HFGenerator's methods."""

    def __init__(self, gen, device: str):
        self.gen, self.device, self.parts, self.chunks = gen, device, {}, []
        self._wrap_tokenizer()
        self._wrap_decoders()
        self._wrap_chunk()
        self._wrap_logprobs()
        self._wrap_warm_up()

    def add(self, part: str, seconds: float) -> None:
        self.parts[part] = self.parts.get(part, 0.0) + seconds

    def timed(self, part: str, fn):
        def wrapper(*a, **kw):
            sync(self.device)
            t0 = time.perf_counter()
            out = fn(*a, **kw)
            sync(self.device)
            self.add(part, time.perf_counter() - t0)
            return out

        return wrapper

    def _wrap_tokenizer(self) -> None:
        g = self.gen
        g.tokenize = self.timed("tokenize", g.tokenize)
        g.detokenize = self.timed("detokenize", g.detokenize)

    def _wrap_decoders(self) -> None:
        g, own = self.gen, self.gen._step_decoder

        def step_decoder(rows, cache_len):
            dec = own(rows, cache_len)
            if dec.phase_seconds is None:
                dec.phase_seconds = {}
                if not dec.capture:  # eager steps: time the sampling inside each (CPU)
                    self._wrap_pick(dec)
            return dec

        g._step_decoder = step_decoder

    def _wrap_pick(self, dec) -> None:
        probe, forward = self, dec.forward
        pick = step_graph.pick

        def timed_pick(*a, **kw):
            t0 = time.perf_counter()
            out = pick(*a, **kw)
            probe.add("sampling", time.perf_counter() - t0)
            return out

        def fwd(*a, **kw):  # pick runs right after the forward in _step: patch it for that call only
            step_graph.pick = timed_pick
            return forward(*a, **kw)

        dec.forward = fwd
        self._restore_pick = pick

    def _wrap_chunk(self) -> None:
        g, own = self.gen, self.gen._generate_chunk

        def chunk(ids, am, kwargs):
            out = own(ids, am, kwargs)  # (b, Lc) new tokens, on the host
            if hasattr(self, "_restore_pick"):
                step_graph.pick = self._restore_pick
            done = torch.isin(out, torch.tensor(g.eos_ids))
            ended = torch.where(done.any(1), done.int().argmax(1) + 1, out.shape[1])  # tokens per row
            self.chunks.append({"rows": out.shape[0], "width": out.shape[1], "lengths": ended.tolist()})
            return out

        g._generate_chunk = chunk

    def _wrap_warm_up(self) -> None:
        """A new shape's warm-up (the compile phase, outside the training clock) adds nothing to the parts."""
        g, own = self.gen, self.gen._warm_up

        def warm_up(*a, **kw):
            saved = {k: dict(d.phase_seconds or {}) for k, d in g.step_decoders.items()}
            parts, chunks = dict(self.parts), list(self.chunks)
            own(*a, **kw)
            for k, d in g.step_decoders.items():
                if d.phase_seconds is not None:
                    d.phase_seconds = saved.get(k, {})
            self.parts, self.chunks = parts, chunks

        g._warm_up = warm_up

    def _wrap_logprobs(self) -> None:
        update_step.batch_logprobs = self.timed("logprobs", update_step.batch_logprobs)

    def take(self) -> tuple[dict, list]:
        """This step's parts (decoder phases folded in) and its chunks, then reset."""
        parts = dict(self.parts)
        parts["captured"] = float(any(d.capture for d in self.gen.step_decoders.values()))
        for dec in self.gen.step_decoders.values():
            for k, v in (dec.phase_seconds or {}).items():
                parts[k] = parts.get(k, 0.0) + v
            if dec.phase_seconds is not None:
                dec.phase_seconds = {}
        chunks, self.parts, self.chunks = self.chunks, {}, []
        return parts, chunks


def tail_share(chunks: list[dict], steps: float) -> float:
    """Share of a step's decode steps taken after 90% of each chunk's rows had finished (chunks run one after
    another; each chunk's decode steps are its width).

    >>> tail_share([{"rows": 10, "width": 20, "lengths": [1, 2, 3, 4, 5, 6, 7, 8, 9, 20]}], 20)  # 9 of 10 by 9
    0.55
    >>> tail_share([{"rows": 4, "width": 10, "lengths": [2, 3, 4, 10]}], 10)  # 90% of 4 rows is all 4
    0.0
    """
    total, tail = 0, 0
    for c in chunks:
        lengths = sorted(c["lengths"])
        k = max(int(0.9 * len(lengths) + 0.999999) - 1, 0)
        total += c["width"]
        tail += max(c["width"] - lengths[k], 0)
    return tail / total if total else 0.0


def gen_parts(rec: dict, parts: dict, chunks: list[dict]) -> dict:
    """The generation's parts of one step in seconds, from the timer record and the probe."""
    decode = parts.get("replay", 0.0) + (0.0 if parts.get("captured") else parts.get("eager", 0.0))
    warm = (
        parts.get("capture", 0.0)
        + parts.get("reclaim", 0.0)
        + (parts.get("eager", 0.0) if parts.get("captured") else 0.0)
    )
    if not parts.get("steps"):  # the generate loop (CPU default): no decoder phases, all of it is decode
        decode = parts.get("decode_generate", 0.0)
    out = {
        "tokenize": parts.get("tokenize", 0.0),
        "prefill": parts.get("prefill", 0.0),
        "decode": decode,
        "tail": decode * tail_share(chunks, parts.get("steps", 0.0)),
        "warm-up": warm,
        "sampling": parts.get("sampling", 0.0),
        "detokenize": parts.get("detokenize", 0.0),
        "logprobs": parts.get("logprobs", 0.0),
    }
    named = sum(out[k] for k in ("tokenize", "prefill", "decode", "warm-up", "detokenize"))
    out["gen. other"] = rec.get("timing/generation", 0.0) - named
    out["decode steps"] = parts.get("steps", 0.0)
    lengths = [x for c in chunks for x in c["lengths"]]
    out["mean length"] = statistics.fmean(lengths) if lengths else 0.0
    out["max length"] = max(lengths) if lengths else 0.0
    return out


class StepRecorder(Callback):
    """A Trainer callback: each step's timer record plus the probe's parts."""

    def __init__(self, probe: Probe):
        self.probe, self.steps, self.cpu0 = probe, [], 0.0

    def on_step_start(self, trainer) -> None:
        self.cpu0 = time.process_time()

    def on_step_end(self, trainer, record: dict) -> None:
        parts, chunks = self.probe.take()
        row = {p: record.get(f"timing/{p}", 0.0) for p in PHASES}
        row["step"] = record.get("timing/step", 0.0)
        row["unattributed"] = record.get("timing/unattributed", 0.0)
        row["cpu step"] = time.process_time() - self.cpu0  # this process's CPU seconds (steadier under load)
        row.update(gen_parts(record, parts, chunks))
        row["rows"] = sum(c["rows"] for c in chunks)
        row["update rows"] = record.get("update/rows", 0.0)
        self.steps.append(row)
