"""A component that passes preflight and breaks at run time (pods/faults.py) ends the run in one line naming it
(its stage and registered name, what it returned or raised), exit 2, with the last completed step saved first:
`resume=true` continues from it. Several processes, or a fault after an optimizer step, save nothing and name
the newest checkpoint. A selector that names a context pods does not pass is refused before the model loads.
Each output validator is tested on its own too."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import pytest
import torch

from pods import checkpoint as ckpt
from pods import cli, faults
from pods.callbacks import Callback
from pods.config import ConfigError
from pods.errors import NonFiniteError, PluginError
from pods.prefilter import PREFILTERS, NoFilter
from pods.prefilter.registry import decisions_broken
from pods.registry import accepted, calling
from pods.reward import REWARDS
from pods.selector import SELECTORS
from pods.train import run
from pods.update import ADVANTAGES, LOSSES, group_advantages
from pods.update.advantages import advantages_broken
from pods.update.loss import PolicyLoss, loss_broken, token
from tests.conftest import SAME_RUN_KEYS, SMOKE

# two steps, no eval, no periodic checkpoint: what is saved on a fault is the fault's doing
RUN = [*SMOKE, "max_steps=2", "eval.at_start=false", "eval.at_end=false", "checkpoint.every_steps=0"]


class Armed(Callback):
    """Makes the test's components faulty from step `at` on (`after`: from the end of step `at`, its eval
    included); before it they are honest (preflight's checks and the first step pass). `optimizer_steps`: the
    trainer's count as the step started."""

    on, trainer, optimizer_steps = False, None, 0

    def __init__(self, at: int, after: bool = False):
        self.at, self.after = at, after

    def on_step_start(self, trainer) -> None:
        Armed.trainer, Armed.optimizer_steps = trainer, trainer.optimizer_steps
        Armed.on = not self.after and trainer.step + 1 >= self.at

    def on_step_end(self, trainer, record) -> None:
        Armed.on = Armed.on or (self.after and trainer.step >= self.at)


@pytest.fixture
def registered():
    """`registered(REGISTRY, fn, **traits)`: `fn` as component 'test_fault' for one test; removed after."""
    added = []

    def add(registry, obj, **traits):
        registry.register("test_fault", **traits)(obj)
        added.append(registry)

    yield add
    Armed.on, Armed.trainer = False, None
    for registry in added:
        registry.pop("test_fault")
        registry.traits.pop("test_fault", None)


# --- the components, honest until armed ------------------------------------------------------------------


def reward_raises(completions, answers, **kw):
    return [1 / 0] if Armed.on else [0.0] * len(completions)


def reward_short(completions, answers, **kw):
    return [0.0] * (len(completions) - Armed.on)


def reward_nan(completions, answers, **kw):
    return [math.nan if Armed.on else 0.0] * len(completions)


def lowest(rewards, m):
    return torch.argsort(rewards, dim=1, stable=True)[:, :m].sort(1).values


def selector_repeats(rewards, m, generator=None):
    return torch.zeros(rewards.shape[0], m, dtype=torch.long) if Armed.on else lowest(rewards, m)


def selector_raises(rewards, m, generator=None):
    if Armed.on:
        raise IndexError("index 9 is out of bounds for dimension 1 with size 8")
    return lowest(rewards, m)


class PrefilterShort(NoFilter):
    def keep(self, prompt_ids, epoch):
        return [True] * (len(prompt_ids) - Armed.on)


class PrefilterRaises(NoFilter):
    def observe(self, prompt_ids, epoch, correct):
        if Armed.on:
            raise KeyError(prompt_ids[0])


def advantage_flat(rewards):
    adv = group_advantages(rewards)
    return adv.reshape(-1) if Armed.on else adv


def advantage_nan(rewards):
    adv = group_advantages(rewards)
    return torch.full_like(adv, math.nan) if Armed.on else adv


def loss_of(change):
    def loss(logp, old_logp, adv, mask, **kw):
        value, stats = token(logp, old_logp, adv, mask, **accepted(token, kw))
        return (change(value) if Armed.on else value), stats

    return loss


CASES = {  # id: (registry, component, override, the line's start)
    "reward raises": (REWARDS, reward_raises, "+reward.weights.test_fault=0.1",
                      "reward 'test_fault' raised ZeroDivisionError: division by zero (" + __file__),
    "reward count": (REWARDS, reward_short, "+reward.weights.test_fault=0.1",
                     "reward 'test_fault' returned 15 values for 16 completions ([0.0, 0.0, 0.0, 0.0, ...])"),
    "reward nan": (REWARDS, reward_nan, "+reward.weights.test_fault=0.1",
                   "non-finite reward at step 2: reward 'test_fault' returned nan for completion 0 of 16"),
    "selector repeats": (SELECTORS, selector_repeats, "selector.name=test_fault",
                         "selector 'test_fault' returned repeated indices in a row: Tensor (2, 4) torch.int64"),
    "selector raises": (SELECTORS, selector_raises, "selector.name=test_fault",
                        "selector 'test_fault' raised IndexError: index 9 is out of bounds"),
    "prefilter count": (PREFILTERS, PrefilterShort, "prefilter.name=test_fault",
                        "prefilter 'test_fault' keep() returned 1 decisions for 2 prompts: [True]"),
    "prefilter raises": (PREFILTERS, PrefilterRaises, "prefilter.name=test_fault",
                         "prefilter 'test_fault' observe() raised KeyError: "),
    "advantage shape": (ADVANTAGES, advantage_flat, "advantage.name=test_fault",
                        "advantage 'test_fault' returned shape (8,): Tensor (8,) torch.float32"),
    "advantage nan": (ADVANTAGES, advantage_nan, "advantage.name=test_fault",
                      "advantage 'test_fault' returned 8 non-finite values of 8: Tensor (2, 4)"),
    "loss not scalar": (LOSSES, loss_of(lambda v: v.expand(3)), "loss.name=test_fault",
                        "loss 'test_fault' returned a loss of Tensor (3,) torch.float32"),
    "loss nan": (LOSSES, loss_of(lambda v: v * math.nan), "loss.name=test_fault",
                 "loss 'test_fault' returned nan from finite log-probs and advantages"),
    "loss detached": (LOSSES, loss_of(lambda v: v.detach()), "loss.name=test_fault",
                      "loss 'test_fault' returned a loss without a gradient"),
}  # fmt: skip


def stopped(make_cfg, capsys, *overrides, arm: Armed | None = None, run_dir=None) -> str:
    """Run until the armed component breaks (at step 2 unless `arm` says), as the command line would: exit 2
    and the one printed line."""
    with pytest.raises(SystemExit) as e, cli.one_line_errors():
        run(make_cfg(*RUN, *overrides, run_dir=run_dir), callbacks=[arm or Armed(2)])
    err = capsys.readouterr().err
    lines = [x for x in err.splitlines() if x.startswith("pods: error: ")]
    assert e.value.code == 2 and len(lines) == 1 and "Traceback" not in err, err[-3000:]
    return lines[0].removeprefix("pods: error: ")


def train_records(run_dir) -> list[dict]:
    return [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if '"train"' in x]


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_a_component_that_breaks_at_run_time_is_one_line_and_the_last_step_is_saved(
    case, make_cfg, registered, capsys, tmp_path
):
    registry, component, override, start = CASES[case]
    registered(registry, component, **({"grad_at_zero_advantage": True} if registry is LOSSES else {}))
    d = tmp_path / "run"
    line = stopped(make_cfg, capsys, override)
    saved = d / "checkpoints" / "step_0000001"
    assert line.startswith(start), line
    assert line.endswith(
        f"; the run stopped at step 2 with step 1 saved in checkpoint {saved}: fix the component, then "
        "continue the run with resume=true"
    ), line
    assert ckpt.latest_checkpoint(d / "checkpoints") == saved  # checkpoint.every_steps=0: the fault saved it
    assert [r["step"] for r in train_records(d)] == [1]
    history = [json.loads(x) for x in (d / "history.jsonl").read_text().splitlines()]
    assert history[-1]["event"] == "fault" and history[-1]["step"] == 1
    Armed.on = False  # fixed: the resume goes on from step 1
    run(make_cfg(*RUN, override, "resume=true", run_dir=d))
    assert [r["step"] for r in train_records(d)] == [1, 2]
    assert ckpt.latest_checkpoint(d / "checkpoints").name == "step_0000002"


class ThirdCall:
    """A reward that raises on its third call (preflight's, step 1's, step 2's) until `fixed`."""

    def __init__(self):
        self.calls, self.fixed = 0, False

    def __call__(self, completions, answers, **kw):
        self.calls += 1
        if self.calls == 3 and not self.fixed:
            raise RuntimeError("the grading service went away")
        return [float(len(c) % 3) for c in completions]


@pytest.mark.slow
def test_a_reward_that_raises_on_its_third_call_resumes_to_the_uninterrupted_run(
    make_cfg, registered, capsys, tmp_path
):
    reward = ThirdCall()
    registered(REWARDS, reward)
    over = ["max_steps=3", "checkpoint.every_seconds=0", "+reward.weights.test_fault=1.0"]
    d = tmp_path / "run"
    line = stopped(make_cfg, capsys, *over, run_dir=d)
    assert line.startswith("reward 'test_fault' raised RuntimeError: the grading service went away ("), line
    assert "the run stopped at step 2 with step 1 saved in checkpoint" in line
    reward.fixed = True
    run(make_cfg(*RUN, *over, "resume=true", run_dir=d))
    ref = tmp_path / "ref"
    run(make_cfg(*RUN, *over, run_dir=ref))  # the same run, never interrupted
    got, want = train_records(d), train_records(ref)
    assert [r["step"] for r in got] == [r["step"] for r in want] == [1, 2, 3]
    for a, b in zip(got, want):
        keys = [k for k in SAME_RUN_KEYS if k in b]
        assert {k: a.get(k) for k in keys} == {k: b[k] for k in keys}, a["step"]


@pytest.mark.slow
def test_a_fault_after_an_optimizer_step_saves_nothing_and_names_the_newest_checkpoint(
    make_cfg, registered, capsys, tmp_path
):
    def nan_after_a_step(logp, old_logp, adv, mask, **kw):  # algo.mu=2: NaN in the pass after the first step
        value, stats = token(logp, old_logp, adv, mask, **accepted(token, kw))
        stepped = Armed.trainer is not None and Armed.trainer.optimizer_steps > Armed.optimizer_steps
        return (value * math.nan if Armed.on and stepped else value), stats

    registered(LOSSES, nan_after_a_step, grad_at_zero_advantage=True)
    d = tmp_path / "run"
    line = stopped(make_cfg, capsys, "loss.name=test_fault", "algo.mu=2", "checkpoint.every_steps=1")
    newest = d / "checkpoints" / "step_0000001"
    assert line.startswith("loss 'test_fault' returned nan from finite log-probs and advantages"), line
    assert line.endswith(
        f"; the run stopped at step 2 without saving (the optimizer had stepped); the newest checkpoint is {newest}"
    ), line
    assert [p.name for p in ckpt.checkpoints(d / "checkpoints")] == ["step_0000001"]


@pytest.mark.slow
def test_a_reward_that_breaks_in_an_eval_saves_its_step_with_the_eval_pending(
    make_cfg, registered, capsys, tmp_path
):
    registered(REWARDS, reward_raises)
    over = ["+reward.weights.test_fault=0.1", "eval.every_steps=1", "dataset.eval_size=4"]
    d = tmp_path / "run"
    line = stopped(make_cfg, capsys, *over, arm=Armed(1, after=True))  # step 1 is honest, its eval is not
    saved = d / "checkpoints" / "step_0000001"
    assert line.startswith("reward 'test_fault' raised ZeroDivisionError"), line
    assert line.endswith(
        f"; the run stopped at the eval at step 1 with step 1 saved in checkpoint {saved}: fix the component, "
        "then continue the run with resume=true"
    ), line
    assert ckpt.read_meta(saved).get("eval_pending") is True
    Armed.on = False
    run(make_cfg(*RUN, *over, "resume=true", run_dir=d))  # the eval of step 1 first, then step 2
    records = [json.loads(x) for x in (d / "metrics.jsonl").read_text().splitlines()]
    assert [(r["kind"], r["step"]) for r in records] == [("train", 1), ("eval", 1), ("train", 2), ("eval", 2)]


def test_several_processes_save_nothing_and_name_the_newest_checkpoint(tmp_path):
    events = []
    trainer = SimpleNamespace(
        dist=SimpleNamespace(world=2), run_dir=tmp_path, step=4, eval_pending=False, snapshot=None,
        history_event=lambda event, **kw: events.append((event, kw)),
    )  # fmt: skip
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "latest").write_text("step_0000004")
    with pytest.raises(PluginError) as e, faults.saved_on_fault(trainer, "step 5"):
        raise PluginError("selector 'x' returned repeated indices in a row")
    newest = tmp_path / "checkpoints" / "step_0000004"
    assert str(e.value) == (
        "selector 'x' returned repeated indices in a row; the run stopped at step 5 without saving (several "
        f"processes); the newest checkpoint is {newest}"
    )
    assert events == [("fault", {"step": 4, "checkpoint": str(newest), "error": str(e.value.__cause__)})]
    with pytest.raises(ZeroDivisionError), faults.saved_on_fault(trainer, "step 5"):
        1 / 0  # noqa: B018 - not a component's fault: as it is


# --- selector context, before the model loads -----------------------------------------------------------


@pytest.fixture
def no_model(monkeypatch):
    def load_policy(*a, **kw):
        raise AssertionError("the model was loaded before the refusal")

    monkeypatch.setattr("pods.trainer.load_policy", load_policy)


def with_default(rewards, m, generator=None, entropy=None):
    return lowest(rewards, m)


def without_default(rewards, m, generator, entropy):
    return lowest(rewards, m)


@pytest.mark.parametrize("fn", [with_default, without_default], ids=["with a default", "without one"])
def test_a_selector_naming_a_context_pods_does_not_pass_is_refused_before_the_model(
    fn, make_cfg, registered, no_model
):
    registered(SELECTORS, fn)
    with pytest.raises(ConfigError) as e:
        run(make_cfg(*SMOKE, "selector.name=test_fault"))
    assert str(e.value) == (
        "selector.name='test_fault': selector: takes 'entropy', which pods does not pass; beside (rewards, m, "
        "generator) a selector may name lengths, tokens, correct, prompt_ids (pods.selector.CONTEXT) and its own "
        "settings' fields (it declares none) (pods.testing)"
    )


# --- each validator on its own ---------------------------------------------------------------------------


def test_calling_names_the_component_and_lets_named_errors_and_stops_through():
    with pytest.raises(PluginError) as e, calling("reward", "r", reward_raises):
        1 / 0  # noqa: B018
    assert str(e.value).startswith("reward 'r' raised ZeroDivisionError: division by zero (")
    assert isinstance(e.value.__cause__, ZeroDivisionError)  # kept for a debugger
    with pytest.raises(PluginError, match="^reward 'r' keep"), calling("reward", "r"):
        raise PluginError("reward 'r' keep")  # already named: as it is
    with pytest.raises(KeyboardInterrupt), calling("reward", "r"):
        raise KeyboardInterrupt  # a stop is no fault


def test_prefilter_decisions_are_one_bool_per_prompt():
    assert decisions_broken([True, False], 2) is None
    assert decisions_broken([True], 2) == "1 decisions for 2 prompts"
    assert decisions_broken([1, 0], 2) == "a int among the decisions"
    assert decisions_broken(torch.ones(2, dtype=torch.bool), 2) == "a Tensor among the decisions"
    assert decisions_broken(True, 1) == "a bool, not a list"


def test_advantages_are_finite_floats_of_the_kept_rewards_shape():
    assert advantages_broken(torch.zeros(2, 4), (2, 4)) is None
    assert advantages_broken([[0.0] * 4] * 2, (2, 4)) == "a list, not a tensor"
    assert advantages_broken(torch.zeros(8), (2, 4)) == "shape (8,)"
    assert advantages_broken(torch.zeros(2, 4, dtype=torch.long), (2, 4)) == "dtype torch.int64"
    assert advantages_broken(torch.tensor([[0.0, math.inf], [math.nan, 1.0]]), (2, 2)) == (
        "2 non-finite values of 4"
    )


def test_the_estimator_s_fault_names_it():
    from pods.update import estimate_advantages

    ADVANTAGES.register("test_fault")(lambda rewards: rewards.reshape(-1))
    try:
        with pytest.raises(PluginError) as e:
            estimate_advantages("test_fault", torch.zeros(2, 3), torch.zeros(2, 3))
    finally:
        ADVANTAGES.pop("test_fault")
    assert str(e.value) == (
        "advantage 'test_fault' returned shape (6,): Tensor (6,) torch.float32 [0.0, 0.0, 0.0, 0.0, ...] (an "
        "advantage estimator returns finite floats of the kept rewards' shape, (P, m) = (2, 3))"
    )


def test_a_loss_is_a_scalar_with_a_gradient_and_a_dict():
    logp = torch.zeros(2, 3, requires_grad=True)
    good = (logp.sum() * 2, {})
    assert loss_broken(good, logp) is None
    assert loss_broken(logp.sum(), logp).startswith("Tensor () torch.float32")  # no (loss, stats) pair
    assert (
        loss_broken((logp.sum(1), {}), logp)
        == "a loss of Tensor (2,) torch.float32 [0.0, 0.0], not a scalar tensor"
    )
    assert loss_broken((logp.sum(), [0.0]), logp) == "stats of [0.0], not a dict"
    assert loss_broken((logp.sum().detach(), {}), logp).startswith("a loss without a gradient")


def test_a_non_finite_loss_is_the_loss_s_fault_only_from_finite_inputs():
    loss = PolicyLoss("token")
    finite = torch.zeros(2, 3)
    loss.check_finite(0.5, finite, finite, torch.zeros(2))
    with pytest.raises(PluginError, match=r"^loss 'token' returned nan from finite log-probs and advantages"):
        loss.check_finite(math.nan, finite, finite, torch.zeros(2))
    nan = torch.full((2, 3), math.nan)  # from the weights: pods/guard.py names the gradient norm and the lr
    loss.check_finite(math.nan, nan, finite, torch.zeros(2))


def test_a_component_fault_keeps_its_type_and_gets_the_note():
    e = faults.with_note(
        NonFiniteError("reward", "reward 'r' returned nan; the run stops here", 3), "; saved"
    )
    assert (
        isinstance(e, NonFiniteError)
        and str(e) == "non-finite reward at step 3: reward 'r' returned nan; saved"
    )
    assert str(faults.with_note(PluginError("selector 'x'"), "; saved")) == "selector 'x'; saved"
