"""Issue 38's host work per row, before and after, on the same rollouts (scripts/bench_step_cost.py
--host-ab): detokenize (the HF backend's batch_decode of every row, against decode_completions) and the
reward (the headline's accuracy + 0.1 format, graded as before the per-batch memo and the integer path,
against today's Reward). The "before" arms are the code of c212312, kept here for this comparison only; the
math-verify pool is the same for both. Arms alternate call by call (ABBA), so load drifts hit both."""

from __future__ import annotations

import statistics
import time

import torch

from pods.reward import functions, numbers
from pods.reward.grading import Grader, extract_answer, numbers_match
from pods.reward.registry import Reward
from pods.rollout.hf import decode_completions

WEIGHTS = {"accuracy": 1.0, "format": 0.1}  # conf/reward/accuracy_format.yaml, the headline's reward


def parse_before(text):
    """parse_number before its plain-integer path: the general path for every text."""
    if not isinstance(text, str) or len(text) > numbers.MAX_DIGITS + 200:
        return None
    return numbers._parse(text)


class GraderBefore(Grader):
    """Grader without the per-batch memo: each distinct (completion, gold) pair extracted and parsed anew."""

    def _local(self, completion, gold, memo=None):
        try:
            if not isinstance(completion, str) or not isinstance(gold, str):
                return "error"
            pred = extract_answer(completion[-self.max_chars :], self.boxed)
            if not pred or len(pred) > self.max_answer_chars:
                return "false"
            if len(gold) > 16 * self.max_answer_chars:
                return "error"
            a, b = parse_before(pred), parse_before(gold)
            if a is not None and b is not None:
                return "true" if numbers_match(a, b, self.rel_tol, self.round_to_reference) else "false"
            return (pred, gold)
        except Exception:
            return "error"


class RewardBefore(Reward):
    """The format term scored for every row, as before."""

    def _term(self, name, completions, answers, context):
        if name == "format":
            return [functions._format_score(c) if isinstance(c, str) else 0.0 for c in completions]
        return super()._term(name, completions, answers, context)


def arms(tok, comp: torch.Tensor, golds: list[str], pool_grader: Grader) -> dict:
    """name -> zero-argument call, for one batch of (B, L) completion ids and their gold answers."""
    before = GraderBefore(timeout_s=pool_grader.timeout_s)
    before._pool = pool_grader._pool  # one pool, one worker state, for both
    texts = tok.batch_decode(comp, skip_special_tokens=True)
    r_before = RewardBefore("accuracy_format", WEIGHTS, before)
    r_after = Reward("accuracy_format", WEIGHTS, pool_grader)
    return {
        "detokenize before": lambda: tok.batch_decode(comp, skip_special_tokens=True),
        "detokenize after": lambda: decode_completions(tok, comp),
        "reward before": lambda: r_before(texts, golds).total,
        "reward after": lambda: r_after(texts, golds).total,
    }


def ab(calls: dict, reps: int) -> dict:
    """Wall and process-CPU ms of each call, `reps` times, before/after pairs alternating ABBA; checks that
    each pair's outputs are equal first."""
    for part in ("detokenize", "reward"):
        a, b = calls[f"{part} before"](), calls[f"{part} after"]()
        if a != b:
            raise AssertionError(
                f"{part}: before and after differ on {sum(x != y for x, y in zip(a, b))} rows"
            )
    times = {k: [] for k in calls}
    for rep in range(reps):
        for part in ("detokenize", "reward"):
            order = ("before", "after") if rep % 2 == 0 else ("after", "before")
            for arm in order:
                k = f"{part} {arm}"
                w0, c0 = time.perf_counter(), time.process_time()
                calls[k]()
                times[k].append((1e3 * (time.perf_counter() - w0), 1e3 * (time.process_time() - c0)))
    out = {}
    for k, t in times.items():
        wall, cpu = [x[0] for x in t], [x[1] for x in t]
        out[k] = {"wall_min": min(wall), "wall_median": statistics.median(wall),
                  "cpu_min": min(cpu), "cpu_median": statistics.median(cpu)}  # fmt: skip
    return out
