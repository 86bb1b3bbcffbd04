"""Conformance checks for a component of your own: run one in your tests before you run it in training.

    from pods.testing import check_selector
    check_selector("min_reward")          # or the function itself

Each check exercises the contract the loop relies on and raises AssertionError saying what broke:

    check_selector(fn)        the (rewards, m, generator) signature, every other parameter a context name
                              or a knob; (P, m) distinct in-range integer indices, input untouched, same
                              output under a seed
    check_reward(fn, rows=)   one finite float per completion, deterministic, [] for no completions; with
                              dataset rows, their fields passed as the run passes them
    check_prefilter(cls)      built with its real settings; keep/observe/end_step/metrics in order; its
                              state read back from a checkpoint (check_state) decides alike
    check_state(state)        a state_dict() saved and loaded as a checkpoint holds it (weights_only)
    check_backend(cls, ...)   the Generator signature, then a Rollouts of the right layout, greedy and
                              seeded sampling reproducible, batch_size honoured, sync_weights callable
    check_advantage(fn)       (P, m) finite floats for (P, m) kept rewards, input untouched, deterministic
    check_loss(fn)            a finite scalar with a gradient; micro-batch losses sum to the batch's; padding
                              and (unless declared) zero-advantage rows get no gradient

pods' own components pass them (tests/test_testing.py). Preflight runs the cheap ones (check_selector,
check_prefilter, check_reward_signature, check_advantage, check_loss: no model, no grading) on the chosen components before the model
loads (pods/components.py), so a component that breaks its contract stops the run in one line.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
from collections.abc import Callable

import torch

from pods.batch import Rollouts


def _fn(registry, name_or_fn):
    return registry.get_or_raise(name_or_fn) if isinstance(name_or_fn, str) else name_or_fn


def _default_settings(registry, name_or_obj):
    """The registry entry's settings dataclass at its defaults (None if it declares none): what the run
    builds the component with when the config sets none of its knobs."""
    names = (
        [name_or_obj]
        if isinstance(name_or_obj, str)
        else [k for k, v in registry.items() if v is name_or_obj]
    )
    cls = next((registry.settings[n] for n in names if n in registry.settings), None)
    return cls() if cls is not None else None


def _takes(fn: Callable, position: int, name: str, what: str) -> None:
    """`fn` accepts `name` as its parameter number `position` (0-based), by position, as the loop passes it."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return  # a builtin: nothing to read
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if any(p.kind is p.VAR_POSITIONAL for p in params) or len(positional) > position:
        return
    have = ", ".join(p.name for p in params)
    raise AssertionError(f"{what}: takes ({have}); the loop passes {name!r} as argument {position + 1}")


def reward_cases(P: int, n: int, g: torch.Generator) -> dict[str, torch.Tensor]:
    """(P, n) rewards a selector or an advantage estimator must handle: continuous, binary, all equal, and offset
    far from 0 in float64 (drawn from `g` in that order)."""
    return {
        "continuous": torch.rand(P, n, generator=g),
        "binary": (torch.rand(P, n, generator=g) > 0.5).float(),
        "constant": torch.full((P, n), 0.5),
        "offset": 1e6 + torch.rand(P, n, generator=g, dtype=torch.float64),
    }


def check_selector(
    selector: str | Callable, P: int = 6, n: int = 8, m: int = 3, seed: int = 0, settings=None
) -> None:
    """`selector(rewards (P, n), m, generator, **context) -> (P, m)`: on continuous, binary, tied and constant
    rewards (with the context it names: completion lengths, correctness, ...), the indices are a long tensor
    of shape (P, m), in [0, n), distinct in each row; the rewards are not modified; two calls with generators
    of the same seed agree. Pass m=n for a keep-all selector, and `settings` (its registry entry's dataclass)
    for a selector with knobs."""
    from pods.selector import CONTEXT, SELECTORS
    from pods.selector.selectors import unknown_context, wanted

    fn = _fn(SELECTORS, selector)
    settings = settings if settings is not None else _default_settings(SELECTORS, selector)
    _takes(fn, 2, "generator", "selector")  # fn(rewards, m, generator, **settings)
    own = [f.name for f in dataclasses.fields(settings)] if settings is not None else []
    extra = unknown_context(fn, own)
    assert not extra, (
        f"selector: takes {extra[0]!r}, which pods does not pass; beside (rewards, m, generator) a selector may "
        f"name {', '.join(CONTEXT)} (pods.selector.CONTEXT) and its own settings' fields "
        f"({', '.join(own) or 'it declares none'})"
    )
    g = torch.Generator().manual_seed(seed)
    cases = reward_cases(P, n, g)
    lengths = torch.randint(1, 50, (P, n), generator=g)
    context = {
        "lengths": lengths,
        "tokens": lengths + 7,
        "correct": (torch.rand(P, n, generator=g) > 0.5).float(),
        "prompt_ids": list(range(P)),
    }
    context = {k: context[k] for k in wanted(fn)}
    for case, rewards in cases.items():
        before = rewards.clone()
        kw = {**context, **(dataclasses.asdict(settings) if settings is not None else {})}
        outs = [fn(rewards, m, torch.Generator().manual_seed(seed), **kw) for _ in range(2)]
        keep = outs[0]
        where = f"selector on {case} rewards"
        assert isinstance(keep, torch.Tensor), f"{where}: returned {type(keep).__name__}, not a tensor"
        assert tuple(keep.shape) == (P, m), f"{where}: shape {tuple(keep.shape)}, expected {(P, m)}"
        assert not keep.is_floating_point(), f"{where}: dtype {keep.dtype}; indices are integers"
        assert bool((keep >= 0).all() and (keep < n).all()), f"{where}: an index outside [0, {n})"
        assert bool((keep.sort(1).values.diff(dim=1) != 0).all()), f"{where}: an index repeated in a row"
        assert torch.equal(rewards, before), f"{where}: the rewards were modified in place"
        assert torch.equal(outs[0], outs[1]), f"{where}: two calls under the same seed disagree"


def check_reward_signature(reward: str | Callable) -> None:
    """`reward(completions, answers, **kw)`: takes the two lists by position (the cheap half: no call)."""
    from pods.reward import REWARDS

    fn = _fn(REWARDS, reward)
    _takes(fn, 0, "completions", "reward")
    _takes(fn, 1, "answers", "reward")


def check_reward(
    reward: str | Callable,
    completions: list[str] | None = None,
    answers: list[str] | None = None,
    rows: list[dict] | None = None,
    **kw,
) -> None:
    """`reward(completions, answers, **kw) -> list[float]`: one finite float per completion, the same on a
    second call, and [] for no completions. `kw` is what the run passes (`grader=`), if it needs it; `rows`,
    one dataset row (a dict) per completion, are passed as the run passes them, each field a column by name,
    and a field the reward requires that they lack is named (preflight checks the same on the real data)."""
    from pods.errors import PluginError
    from pods.reward import REWARDS
    from pods.reward.preflight import fields_wanted, row_fields
    from pods.reward.registry import accepted, columns, values

    fn = _fn(REWARDS, reward)
    name = reward if isinstance(reward, str) else getattr(fn, "__name__", type(fn).__name__)
    check_reward_signature(fn)
    completions = completions or [
        "<think>7 + 5</think>\n<answer>12</answer>",
        "<answer>13</answer>",
        "12",
        "",
        "\\boxed{12}",
        "x" * 5000,
    ]
    answers = answers or ["12"] * len(completions)
    if rows is not None:
        assert len(rows) == len(completions), (
            f"check_reward: {len(rows)} rows for {len(completions)} completions"
        )
        missing = [f for f in fields_wanted(fn, kw) if f not in row_fields(rows)]
        assert not missing, (
            f"reward: takes {missing[0]!r}, a field the rows lack ({', '.join(sorted(row_fields(rows)))})"
        )
        kw = accepted(fn, {**columns(rows), **kw}) if rows else kw

    def call() -> list[float]:  # as the run reads it: a float, a dict or a count short is its own message
        try:
            return values(name, fn(completions, answers, **kw), len(completions))
        except PluginError as e:
            raise AssertionError(str(e)) from None

    out = [call(), call()]
    bad = [v for v in out[0] if not math.isfinite(v)]
    assert not bad, f"reward: values that are not finite numbers: {bad[:3]}"
    assert out[0] == out[1], "reward: two calls on the same completions disagree"
    empty = accepted(fn, {**kw, **{k: [] for k in columns(rows)}}) if rows else kw  # the columns empty too
    assert list(fn([], [], **empty)) == [], "reward: no completions must give []"


def check_prefilter(
    prefilter: str | type, settings=None, seed: int = 0, prompts: int = 40, n: int = 4, epochs: int = 3
) -> None:
    """A prefilter built as a run builds it, `cls(seed=..., **knobs)` (settings: given, else its registry
    entry's dataclass at its defaults; pods.prefilter.registry.construct): keep() gives one bool per prompt,
    observe/end_step/metrics run in the loop's order over a few epochs, metrics are numbers named
    `prefilter/...`, its state_dict() reads back from a checkpoint (check_state), and a filter loaded from what
    was read back (built with another seed) makes the same decisions from there on."""
    from pods.prefilter import PREFILTERS
    from pods.prefilter.registry import construct

    cls = _fn(PREFILTERS, prefilter)
    settings = settings if settings is not None else _default_settings(PREFILTERS, prefilter)
    ids = list(range(prompts))
    g = torch.Generator().manual_seed(seed)
    a = construct(cls, settings, seed)
    check_state(a.state_dict(), "prefilter: state_dict() when built")
    for epoch in range(epochs):
        kept = a.keep(ids, epoch)
        assert len(kept) == len(ids), f"prefilter: keep() gave {len(kept)} decisions for {len(ids)} prompts"
        assert all(isinstance(k, bool) for k in kept), "prefilter: keep() must give bools"
        rolled = [p for p, k in zip(ids, kept) if k]
        correct = (torch.rand(len(rolled), n, generator=g) > 0.5).float()
        correct[: len(rolled) // 2] = float(epoch % 2)  # some zero-variance groups, easy or hard
        a.observe(rolled, epoch, correct)
        a.end_step(epoch)
        metrics = a.metrics()
        assert isinstance(metrics, dict), "prefilter: metrics() must give a dict"
        for k, v in metrics.items():
            assert k.startswith("prefilter/"), f"prefilter: metric {k!r} is not named prefilter/..."
            assert isinstance(v, (int, float)) and math.isfinite(v), f"prefilter: metric {k}={v!r}"
    saved = check_state(a.state_dict(), f"prefilter: state_dict() after {epochs} epochs")
    b = construct(cls, settings, seed + 1)
    b.load_state_dict(saved)  # as a resume restores it: from what the checkpoint read back
    assert a.keep(ids, epochs) == b.keep(ids, epochs), "prefilter: a state round trip decides differently"


def check_state(state, what: str = "state_dict()"):
    """`state` (a component's state_dict()) saved and read back as a checkpoint holds it: torch.save, then
    torch.load with weights_only=True as a resume reads trainer_state.pt (pods/checkpoint.py). Returns what was
    read back; AssertionError, starting with `what`, naming what it holds that a resume could not load."""
    from pods.checkpoint import load_failure, round_trip

    try:
        return round_trip(state)
    except Exception as e:  # noqa: BLE001 - pickle and the weights_only unpickler raise many types
        raise AssertionError(
            f"{what} does not survive a checkpoint's save and load ({load_failure(e)}), so no run could resume "
            "from one; keep plain data in it: dicts, lists, strings, numbers, tensors, numpy numbers and "
            "numeric arrays (of a numpy Generator, its bit_generator.state)"
        ) from None


def check_backend(backend: str | type, settings, model, tokenizer, device="cpu", n: int = 3) -> None:
    """A rollout backend: `generate`'s signature is the Generator protocol's; from_config, called as a run
    calls it (its knobs from `settings.rollout.own()` as keywords: pods.rollout.backend.build), builds a
    Generator; generate() gives a Rollouts of P * n group-major rows (prompt block left-padded, completion
    mask within the attention mask, texts and prompt ids kept); greedy decoding and seeded sampling repeat;
    a small batch_size gives the same greedy completions; sync_weights(model) runs."""
    from pods.rollout import BACKENDS, Generator
    from pods.rollout.backend import build, check_generate_signature

    cls = _fn(BACKENDS, backend)
    check_generate_signature(cls)
    gen = build(cls, settings, model, tokenizer, torch.device(device))
    assert isinstance(gen, Generator), f"backend: {type(gen).__name__} lacks part of the Generator protocol"
    prompts, pids = ["12 + 7 =\n", "3 - 45 + 8 =\n"], [5, 9]

    def run(temperature: float, **kw) -> Rollouts:
        torch.manual_seed(0)
        return gen.generate(prompts, pids, n, temperature, **kw)

    r = run(0.0)
    rows = len(prompts) * n
    assert isinstance(r, Rollouts), f"backend: generate() returned {type(r).__name__}, not a Rollouts"
    assert r.prompt_ids == pids and r.group_size == n, "backend: prompt_ids or group_size not kept"
    assert len(r.texts) == rows, f"backend: {len(r.texts)} texts for {rows} rows"
    width = r.prompt_len + r.completion_mask.shape[1]
    for name in ("input_ids", "attention_mask"):
        shape = tuple(getattr(r, name).shape)
        assert shape == (rows, width), f"backend: {name} has shape {shape}, expected {(rows, width)}"
    completion_am = r.attention_mask[:, r.prompt_len :]
    assert bool((r.completion_mask <= completion_am).all()), "backend: completion_mask outside attention"
    assert bool(r.attention_mask[:, r.prompt_len - 1].all()), "backend: prompts must be left-padded"
    assert run(0.0).texts == r.texts, "backend: greedy decoding differs between two calls"
    assert run(0.0, batch_size=2).texts == r.texts, "backend: batch_size=2 changes greedy completions"
    assert run(1.0).texts == run(1.0).texts, "backend: sampling under the same torch seed differs"
    gen.sync_weights(model)


def check_advantage(
    advantage: str | Callable, P: int = 5, n: int = 8, m: int = 4, seed: int = 0, settings=None
):
    """`advantage(rewards (P, m), all_rewards=(P, n), **knobs) -> (P, m)`: on continuous, binary, constant
    and offset rewards, a floating tensor of the kept rewards' shape, finite, the rewards untouched, the same
    on a second call. `settings`: its registry entry's dataclass (default: at its defaults)."""
    from pods.registry import accepted, knobs
    from pods.update import ADVANTAGES

    fn = _fn(ADVANTAGES, advantage)
    settings = settings if settings is not None else _default_settings(ADVANTAGES, advantage)
    _takes(fn, 0, "rewards", "advantage")
    g = torch.Generator().manual_seed(seed)
    cases = reward_cases(P, n, g)
    for case, all_rewards in cases.items():
        kept = all_rewards[:, :m].clone()
        before = (kept.clone(), all_rewards.clone())
        kw = {**accepted(fn, {"all_rewards": all_rewards}), **knobs(settings)}
        out = [fn(kept, **kw) for _ in range(2)]
        where = f"advantage on {case} rewards"
        assert isinstance(out[0], torch.Tensor), f"{where}: returned {type(out[0]).__name__}, not a tensor"
        assert tuple(out[0].shape) == (P, m), f"{where}: shape {tuple(out[0].shape)}, expected {(P, m)}"
        assert out[0].is_floating_point(), f"{where}: dtype {out[0].dtype}; advantages are floats"
        assert bool(torch.isfinite(out[0]).all()), f"{where}: a NaN or inf advantage"
        assert torch.equal(kept, before[0]) and torch.equal(all_rewards, before[1]), (
            f"{where}: rewards modified"
        )
        assert torch.equal(out[0], out[1]), f"{where}: two calls disagree"


def check_loss(loss: str | Callable, B: int = 4, T: int = 6, seed: int = 0, settings=None) -> None:
    """`loss(logp, old_logp, adv, mask, **context) -> (loss, stats)` as the update calls it (pods/update/loss.py):
    a finite scalar with a finite gradient and a dict of stats; the losses of two micro-batches, given the whole
    batch's totals, sum to the batch's loss; padding tokens get no gradient, nor (with beta = 0) rows whose
    advantage is 0 unless the entry declares `grad_at_zero_advantage`."""
    from pods.registry import accepted, knobs
    from pods.update import LOSSES

    fn = _fn(LOSSES, loss)
    settings = settings if settings is not None else _default_settings(LOSSES, loss)
    _takes(fn, 3, "mask", "loss")
    g = torch.Generator().manual_seed(seed)
    logp = (-torch.rand(B, T, generator=g, dtype=torch.float64)).requires_grad_(True)
    old = logp.detach() + 0.3 * torch.randn(B, T, generator=g, dtype=torch.float64)
    adv = torch.randn(B, generator=g, dtype=torch.float64)
    adv[0] = 0.0  # a row of a zero-variance group
    mask = (torch.arange(T)[None] < torch.tensor([T, T - 2, 1, T - 3])[:B, None]).long()  # ragged rows
    totals = {"num_tokens": float(mask.sum()), "num_seqs": float(B)}
    context = dict(epsilon=0.2, epsilon_high=None, ref_logp=None, beta=0.0, max_completion_len=T, **totals)

    def call(rows):
        return fn(
            logp[rows], old[rows], adv[rows], mask[rows], **accepted(fn, {**context, **knobs(settings)})
        )

    out = call(slice(None))
    assert isinstance(out, tuple) and len(out) == 2, "loss: must return (loss, stats)"
    value, stats = out
    assert isinstance(value, torch.Tensor) and value.dim() == 0, "loss: the loss must be a scalar tensor"
    assert isinstance(stats, dict), f"loss: stats must be a dict, got {type(stats).__name__}"
    assert bool(torch.isfinite(value)), f"loss: not finite ({value.item()})"
    (grad,) = torch.autograd.grad(value, logp)
    assert bool(torch.isfinite(grad).all()), "loss: a NaN or inf gradient"
    assert bool((grad[mask == 0] == 0).all()), "loss: a padding token (mask 0) has a gradient"
    name = next((k for k, v in LOSSES.items() if v is fn), None)
    if not LOSSES.trait(name, "grad_at_zero_advantage"):
        assert bool((grad[0] == 0).all()), (
            "loss: a row whose advantage is 0 has a gradient; the update skips such rows: declare "
            "register_loss(..., grad_at_zero_advantage=True)"
        )
    parts = call(slice(0, B // 2))[0] + call(slice(B // 2, B))[0]
    assert torch.allclose(parts, value, rtol=1e-9, atol=1e-12), (
        f"loss: micro-batch losses sum to {parts.item():.6g}, the batch's is {value.item():.6g}; scale by "
        "the batch totals (num_tokens, num_seqs)"
    )
