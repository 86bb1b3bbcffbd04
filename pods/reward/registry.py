"""The reward stage: a registry of reward functions, `build_reward(reward)`, their weighted sum, and the
stage of the loop that calls it.

`RewardStage.score(batch)` grades every completion with the prompt it answered, its gold answer and its
dataset row's fields (`Reward` says what a reward function receives), sets `batch.rewards` and
`batch.correct` for this rank's groups and returns the round's whole-batch rewards and correctness (every
rank's, gathered: the prefilter and dynamic sampling decide alike on every rank). `metrics()` is the step's
reward/*.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from pods.batch import Rollouts
from pods.errors import NonFiniteError, PluginError, PluginTimeout, shown
from pods.registry import Registry, accepted, calling
from pods.reward.grading import Grader
from pods.reward.limit import call_with_limit, is_plugin
from pods.reward.numbers import parse_number

RewardFn = Callable[..., list[float]]  # fn(completions, answers, **kw) -> one float per completion
# Keywords the Reward passes itself; a dataset column of the same name is not passed as a column.
RESERVED = ("completions", "answers", "prompts", "grader")
REWARDS: Registry[RewardFn] = Registry("reward")


def register_reward(name: str, settings: type | None = None) -> Callable[[RewardFn], RewardFn]:
    """Decorator: `@register_reward("len")` makes `weights: {len: 0.1}` in a reward config pick it.
    `settings`: a dataclass of the function's own knobs, set as `reward.<name>.<knob>` and passed to it as
    keyword arguments."""
    return REWARDS.register(name, settings)


@dataclass
class RewardOutput:
    total: list[float]  # (N,) sum over terms of weight * term
    terms: dict[str, list[float]]  # name -> (N,) unweighted values; always holds the correctness term
    correct: list[bool]  # (N,) correctness term == 1
    n_timeouts: int = 0  # completions whose grading hit timeout_s (scored 0)
    n_errors: int = 0  # completions whose grading raised or crashed the worker (scored 0)


@dataclass(eq=False)  # compared by identity, as before
class Reward:
    """Weighted sum of registered reward functions, sharing one Grader.

    Called as `reward(completions, answers, prompts=None, rows=None)`, one entry per completion in each list
    (`rows`: the dataset row each completion answers, a dict of its fields). Each function receives, TRL's
    way, `completions` and `answers` and as keywords `prompts`, `grader` (the shared Grader), its own settings
    and each of the rows' fields as a column (a list, one value per completion), all of them if it takes
    `**kw`, else those it names (a function written for `fn(completions, answers, grader)` still works)."""

    name: str
    weights: dict[str, float]
    grader: Grader
    settings: dict = field(default_factory=dict)  # reward name -> its own settings (a dataclass), as keywords
    correctness: str = "accuracy"  # the term whose 1.0 means correct (reward.correctness)
    time_limit_s: float = 0.0  # bound on one call of a plugin's reward function (reward.plugin_timeout_s)

    def __call__(
        self,
        completions: list[str],
        answers: list[str],
        prompts: list[str] | None = None,
        rows: list[dict] | None = None,
    ) -> RewardOutput:
        if len(completions) != len(answers):
            raise ValueError(f"{len(completions)} completions but {len(answers)} answers")
        t0, e0 = self.grader.n_timeouts, self.grader.n_errors
        context = self.context(prompts, rows)
        terms = {}
        for n in self.names():  # an exception a term raises: one line naming it
            with calling("reward", n, REWARDS.get(n)):
                terms[n] = self.term(n, completions, answers, context)
        total = [0.0] * len(completions)
        for n, w in self.weights.items():
            total = [t + w * v for t, v in zip(total, terms[n])]
        return RewardOutput(
            total=total,
            terms=terms,
            correct=[v == 1.0 for v in terms[self.correctness]],
            n_timeouts=self.grader.n_timeouts - t0,
            n_errors=self.grader.n_errors - e0,
        )

    def names(self) -> list[str]:
        """The terms computed: the weighted ones, then the correctness term if it is not weighted."""
        return list(self.weights) + [self.correctness] * (self.correctness not in self.weights)

    def context(self, prompts: list[str] | None, rows: list[dict] | None) -> dict:
        """What a term may take besides completions and answers: the grader, the prompts, the rows' fields."""
        context = {"grader": self.grader, **({"prompts": prompts} if prompts is not None else {})}
        context.update(columns(rows) if rows else {})
        return context

    def term(
        self, name: str, completions: list[str], answers: list[str], context: dict, finite: bool = True
    ) -> list[float]:
        """Term `name`'s values, one float per completion (`context`: what `context()` gives)."""
        own = self.settings.get(name)
        fn = REWARDS[name]
        kw = accepted(fn, {**context, **(dataclasses.asdict(own) if own is not None else {})})
        if is_plugin(fn):  # bounded by reward.plugin_timeout_s, and named while it waits
            out = call_with_limit(name, fn, self.time_limit_s, completions, answers, **kw)
        else:  # pods's own are bounded by the grader
            out = fn(completions, answers, **kw)
        vals = values(name, out, len(completions))
        bad = next((i for i, v in enumerate(vals) if not math.isfinite(v)), None) if finite else None
        if bad is not None:  # scored as 0 it would pass for a wrong answer: the run stops (pods/guard.py)
            raise NonFiniteError(
                "reward",
                f"reward {name!r} returned {vals[bad]} for completion {bad} of {len(vals)} "
                f"({sum(not math.isfinite(v) for v in vals)} non-finite); a reward function must return finite "
                "numbers",
            )
        return vals

    def prepare(self, answers: list[str]) -> bool:
        """Start the math-verify workers now if some gold answer is not a plain number (they will be needed, and
        they boot while the model loads); True if started. With plain-number gold answers every plain-number
        completion is graded in this process, and the workers start when a completion first needs them: most
        runs on the arithmetic tasks never start them, and each run starts about 1 CPU-second sooner."""
        if any(parse_number(a) is None for a in answers):
            self.grader.start()
            return True
        return False

    def close(self) -> None:
        self.grader.close()


def values(name: str, out, n: int) -> list[float]:
    """Reward `name`'s return value for n completions as n floats (a list, a tuple, a tensor of n numbers), or
    a PluginError line naming the reward and showing what it returned."""
    try:
        if isinstance(out, (str, bytes, dict)):
            raise TypeError
        vals = [float(v) for v in out]
    except (TypeError, ValueError):
        raise PluginError(
            f"reward {name!r} returned {shown(out)} for {n} completions; a reward returns one float per "
            "completion (a list)"
        ) from None
    if len(vals) != n:
        raise PluginError(
            f"reward {name!r} returned {len(vals)} values for {n} completions ({shown(out)}); a reward returns "
            "one float per completion"
        )
    return vals


def columns(rows: list[dict]) -> dict[str, list]:
    """Rows (one dict per completion) -> their fields as columns, TRL's way: {field: [value per row]}; a
    field named like a keyword the Reward passes itself (RESERVED) is left out."""
    names = [k for k in rows[0] if k not in RESERVED]
    return {k: [row.get(k) for row in rows] for k in names}


def build_reward(reward) -> Reward:
    """The reward stage from its typed settings, `reward` a pods.config.RewardConfig (checked there, in
    RewardConfig.check: registered names, weights and ranges): the weighted sum of reward.weights, graded
    with its limits."""
    grader = Grader(
        timeout_s=reward.timeout_s,
        max_chars=reward.max_chars,
        max_answer_chars=reward.max_answer_chars,
        boxed=reward.boxed,  # fall back to the last \\boxed{} without <answer>
        rel_tol=reward.rel_tol,
        round_to_reference=reward.round_to_reference,
        workers=reward.workers,
        batch_timeout_s=reward.batch_timeout_s or None,
    )
    weights = {str(k): float(v) for k, v in reward.weights.items()}
    own = {n: reward.sections[n] for n in [*weights, reward.correctness] if n in reward.sections}
    # workers: Reward.prepare
    return Reward(reward.name, weights, grader, own, reward.correctness, reward.plugin_timeout_s)


def sanitize_rewards(r: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Replace NaN/inf rewards with 0 and count them (the reward stage stops the run on any: pods/guard.py)."""
    bad = ~torch.isfinite(r)
    return torch.where(bad, torch.zeros_like(r), r), int(bad.sum())


def grade(reward, texts: list[str], prompt_ids: list[int], group_size: int, data, dist=None):
    """The one place a reward's inputs are put together, for training and eval alike: `texts`, group_size
    completions of each of `prompt_ids` (group-major), graded against their gold answers, with their prompts
    and their dataset rows' fields (`data`: the prompt set, pods.data.PromptSet: its `prompts`, `answers` and
    `fields`, by prompt id; fields may be None). A non-finite reward raises NonFiniteError, a term that breaks
    its contract or raises PluginError, on every rank of `dist` alike (the others would wait in the gather that
    follows)."""
    per = lambda xs: [xs[p] for p in prompt_ids for _ in range(group_size)]  # noqa: E731 - one per completion
    rows = per(data.fields) if data.fields is not None else None
    out, error = None, None
    try:
        out = reward(texts, per(data.answers), prompts=per(data.prompts), rows=rows)
        over = int((~torch.isfinite(torch.tensor(out.total, dtype=torch.float32))).sum())
        if over:  # each term is finite (Reward._term): their weighted sum overflows float32
            weights = getattr(reward, "weights", None)
            raise NonFiniteError(
                "reward", f"{over} weighted reward sums overflow float32 (reward.weights={weights})"
            )
    except (NonFiniteError, PluginError, PluginTimeout) as e:
        error = e
    if dist.sum(float(error is not None)) if dist is not None else error is not None:
        raise error or PluginError(
            "reward: a reward function failed on another rank (a non-finite value, a wrong count or an "
            "exception; that rank's line names it)"
        )
    return out


class RewardStage:
    """`reward`: the Reward (weighted terms); `prompts`, `answers`, `fields`: the train set's, indexed by
    prompt id (fields: each row's own columns, a dict per row)."""

    def __init__(
        self, reward, prompts: list[str], answers: list[str], fields: list[dict] | None, dist, timer
    ):
        self.reward, self.prompts, self.answers, self.fields = reward, prompts, answers, fields
        self.dist, self.timer = dist, timer
        self.start_step()

    def start_step(self) -> None:
        self.rewards: list[torch.Tensor] = []  # (P_round, n) of every group graded this step, all ranks
        self.correct: list[torch.Tensor] = []
        self.terms: dict[str, list[float]] = {}  # this rank's unweighted values per term
        self.nonfinite = self.timeouts = self.errors = 0

    def score(self, r: Rollouts) -> tuple[torch.Tensor, torch.Tensor]:
        """Grade `r` (this rank's groups): sets r.rewards and r.correct; returns the gathered (P_round, n)
        rewards and correctness of the whole round."""
        with self.timer.phase("reward"):
            # self: the train set's; a non-finite reward stops every rank here
            out = grade(self.reward, r.texts, r.prompt_ids, r.group_size, self, self.dist)
            total, bad = sanitize_rewards(torch.tensor(out.total, dtype=torch.float32))
            r.rewards = total.view(r.num_groups, r.group_size)
            r.correct = torch.tensor(out.correct, dtype=torch.float32).view(r.num_groups, r.group_size)
            self.nonfinite += bad
            self.timeouts += out.n_timeouts
            self.errors += out.n_errors
            for k, v in out.terms.items():
                self.terms.setdefault(k, []).extend(v)
        with self.timer.phase("gather"):
            rewards, correct = self.dist.gather(r.rewards), self.dist.gather(r.correct)
        self.rewards.append(rewards)
        self.correct.append(correct)
        return rewards, correct

    def step_rewards(self) -> torch.Tensor:
        """(P, n) rewards of every group graded this step (all ranks, all rounds; empty when none was)."""
        return torch.cat(self.rewards) if self.rewards else torch.zeros(0)

    def metrics(self) -> dict[str, float]:
        """reward/* of the step (whole batch; call on every rank)."""
        dist = self.dist
        flat = lambda ts: torch.cat([t.flatten() for t in ts]) if ts else torch.zeros(0)  # noqa: E731
        rewards, correct = flat(self.rewards), flat(self.correct)
        out = {
            "reward/mean": rewards.mean().item() if rewards.numel() else float("nan"),
            "reward/std": rewards.std().item() if rewards.numel() > 1 else 0.0,
            "reward/accuracy": correct.mean().item() if correct.numel() else float("nan"),
            "reward/nonfinite": dist.sum(self.nonfinite),  # always 0: a non-finite reward stops the run
            "reward/timeouts": dist.sum(self.timeouts),
            "reward/errors": dist.sum(self.errors),
        }
        for k in sorted(self.terms):  # every rank has the same reward terms
            v = dist.gather(torch.tensor(self.terms[k], dtype=torch.float32))
            out[f"reward/{k}"] = v.mean().item() if v.numel() else float("nan")
        return out
