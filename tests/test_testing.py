"""pods.testing's conformance checks: pods' own selectors, rewards, prefilters and backends pass them, and
each check catches the break it names (the bug class of a backend without `batch_size` included)."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from pods.components import checked
from pods.config import ConfigError, settings
from pods.prefilter import NoFilter
from pods.prefilter.greso import GresoConfig
from pods.reward import Grader
from pods.rollout import BACKENDS, Backend, HFGenerator, RolloutSettings, check_backend, register_backend
from pods.rollout.backend import check_generate_signature
from pods.testing import check_backend as conforms_backend
from pods.testing import check_prefilter, check_reward, check_selector

TINY = Path(__file__).resolve().parents[1] / "pods" / "assets" / "tiny"


@pytest.mark.parametrize("name", ["max_variance", "max_reward", "random"])
def test_the_shipped_selectors_conform(name):
    check_selector(name)


def test_the_keep_all_selector_conforms_with_m_equal_n():
    check_selector("none", n=8, m=8)


def test_check_selector_catches_repeated_indices():
    with pytest.raises(AssertionError, match="repeated"):
        check_selector(lambda rewards, m, generator=None: torch.zeros(rewards.shape[0], m, dtype=torch.long))


def test_check_selector_catches_an_unseeded_draw():
    with pytest.raises(AssertionError, match="same seed"):
        check_selector(lambda r, m, generator=None: torch.rand(r.shape).argsort(1)[:, :m])


def test_the_shipped_rewards_conform():
    check_reward("format")
    grader = Grader(workers=1).start()
    try:
        check_reward("accuracy", grader=grader)
    finally:
        grader.close()


def test_check_reward_catches_a_short_answer():
    with pytest.raises(AssertionError, match="values for"):
        check_reward(lambda completions, answers, **kw: [0.0])


def test_check_reward_names_a_float_returned_instead_of_a_list():
    with pytest.raises(
        AssertionError, match=r"^reward 'half' returned 0\.5 for 6 completions; a reward returns"
    ):
        check_reward(half)


def half(completions, answers, **kw):
    return 0.5


def by_level(completions, answers, level, **kw):
    return [float(x) for x in level]


def test_check_reward_passes_row_fields_as_columns_and_names_a_missing_one():
    check_reward(by_level, rows=[{"level": i % 3, "question": "q"} for i in range(6)])
    with pytest.raises(AssertionError, match=r"reward: takes 'level', a field the rows lack \(difficulty\)"):
        check_reward(by_level, rows=[{"difficulty": 1}] * 6)


@pytest.mark.parametrize("name, settings_", [("none", None), ("greso", GresoConfig())])
def test_the_shipped_prefilters_conform(name, settings_):
    check_prefilter(name, settings_)


def test_check_prefilter_catches_state_that_does_not_round_trip():
    class Forgetful(NoFilter):
        def __init__(self, seed=0):
            self.rng = torch.Generator().manual_seed(seed)

        def keep(self, prompt_ids, epoch):
            return [bool(torch.rand(1, generator=self.rng) < 0.5) for _ in prompt_ids]

    with pytest.raises(AssertionError, match="round trip"):
        check_prefilter(Forgetful)


@pytest.mark.parametrize("name", sorted(BACKENDS))
def test_every_registered_backend_has_the_protocol_s_generate_signature(name):
    check_generate_signature(BACKENDS[name], name)


def test_the_hf_backend_conforms(make_cfg):
    tok = AutoTokenizer.from_pretrained(TINY)
    tok.pad_token = tok.pad_token or tok.eos_token
    model = AutoModelForCausalLM.from_pretrained(TINY, dtype=torch.float32).eval()
    s = RolloutSettings.from_config(settings(make_cfg("hardware=cpu", "model.max_completion_len=12")))
    conforms_backend("hf", s, model, tok)


class NoBatchSize(HFGenerator):  # the bug of issue "extension contracts": eval passes batch_size
    def generate(self, prompts, prompt_ids, n, temperature, top_p=1.0, top_k=0, add_special_tokens=False):
        return super().generate(prompts, prompt_ids, n, temperature, top_p, top_k, add_special_tokens)


class Renamed(Backend):
    def generate(
        self, prompts, ids, n, temperature, top_p=1.0, top_k=0, add_special_tokens=False, batch_size=None
    ):
        raise NotImplementedError


@pytest.mark.parametrize(
    "cls, message",
    [
        (NoBatchSize, "does not take 'batch_size'"),
        (Renamed, "parameter 2 is 'ids', the Generator protocol's is 'prompt_ids'"),
    ],
)
def test_a_generate_signature_off_the_protocol_is_named(cls, message):
    with pytest.raises(TypeError, match=message):
        check_generate_signature(cls)


def test_preflight_refuses_a_backend_whose_generate_misses_an_argument(make_cfg):
    register_backend("test_no_batch_size")(NoBatchSize)
    try:
        s = RolloutSettings.from_config(settings(make_cfg("rollout.name=test_no_batch_size")))
        with pytest.raises(ConfigError, match="test_no_batch_size.*does not take 'batch_size'"):
            check_backend(s)
    finally:
        del BACKENDS["test_no_batch_size"]


def test_check_prefilter_builds_a_prefilter_with_its_real_settings():
    from dataclasses import dataclass

    from pods.prefilter import PREFILTERS, register_prefilter

    @dataclass
    class EveryKth:
        k: int = 3

    class KeepEveryKth(NoFilter):
        def __init__(self, seed=0, k=None):
            self.k = k  # None here crashed the check before it built filters with their settings

        def keep(self, prompt_ids, epoch):
            return [p % self.k == 0 for p in prompt_ids]

    register_prefilter("test_every_kth", settings=EveryKth)(KeepEveryKth)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # the one rule: built without a warning
            check_prefilter("test_every_kth")
            check_prefilter(KeepEveryKth)  # the class itself: its registry entry's settings
            check_prefilter(KeepEveryKth, EveryKth(k=5))
    finally:
        del PREFILTERS["test_every_kth"], PREFILTERS.settings["test_every_kth"]


def test_a_prefilter_written_for_cls_settings_seed_still_builds_with_a_warning(make_cfg):
    """The earlier contract, `cls(settings, seed)`: built that way, saying what to change, in a run too."""
    from dataclasses import dataclass

    from pods.prefilter import PREFILTERS, build_prefilter, register_prefilter
    from pods.registry import ContractDeprecationWarning

    @dataclass
    class EveryKth:
        k: int = 3

    class OldKeepEveryKth(NoFilter):
        def __init__(self, settings, seed):
            self.k, self.seed = settings.k, seed

        def keep(self, prompt_ids, epoch):
            return [p % self.k == 0 for p in prompt_ids]

    register_prefilter("test_old_kth", settings=EveryKth)(OldKeepEveryKth)
    try:
        with pytest.warns(ContractDeprecationWarning, match=r"OldKeepEveryKth takes \(settings, seed\)"):
            check_prefilter("test_old_kth", EveryKth(k=5))
        with pytest.warns(ContractDeprecationWarning):  # preflight's conformance check builds it too
            c = checked(make_cfg("prefilter.name=test_old_kth", "prefilter.test_old_kth.k=4", "seed=7"))
        with pytest.warns(ContractDeprecationWarning):
            f = build_prefilter(c.prefilter, c.seed)
        assert (f.k, f.seed) == (4, 7) and f.keep([3, 4, 8], 0) == [False, True, True]
    finally:
        del PREFILTERS["test_old_kth"], PREFILTERS.settings["test_old_kth"]


def test_a_backend_gets_its_knobs_as_keywords_and_an_earlier_one_still_builds(make_cfg):
    """from_config(settings, model, tokenizer, device, timer, **knobs); one without the keywords (it read
    settings.rollout.own()) is called the earlier way, with a warning."""
    from dataclasses import dataclass

    from pods.registry import ContractDeprecationWarning
    from pods.rollout.backend import build

    @dataclass
    class Knobs:
        width: int = 2

    class Recorder(HFGenerator):  # HF's generate: the signature preflight checks
        @classmethod
        def from_config(cls, settings, model, tokenizer, device, timer=None, **knobs):
            return knobs

    class Earlier(HFGenerator):
        @classmethod
        def from_config(cls, settings, model, tokenizer, device, timer=None):
            return settings.rollout.own()

    for name, cls in (("test_recorder", Recorder), ("test_earlier", Earlier)):
        register_backend(name, settings=Knobs)(cls)
    try:
        s = RolloutSettings.from_config(
            checked(make_cfg("rollout.name=test_recorder", "rollout.test_recorder.width=5"))
        )
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert build(Recorder, s, None, None, "cpu") == {"width": 5}
        s = RolloutSettings.from_config(
            checked(make_cfg("rollout.name=test_earlier", "rollout.test_earlier.width=5"))
        )
        with pytest.warns(ContractDeprecationWarning, match="Earlier.from_config takes no width"):
            assert build(Earlier, s, None, None, "cpu") == Knobs(width=5)
    finally:
        for name in ("test_recorder", "test_earlier"):
            del BACKENDS[name], BACKENDS.settings[name]
