"""Preset groups apply in one fixed order, whatever order the command line names them in.

conf/train.yaml lists every group in its defaults, in the order their values are merged (later wins):

    _self_ < dataset, reward, selector, hardware, rollout, logger < model < experiment < scale < variant < debug

then command-line `key=value` overrides win over all of them. A model preset's `rollout.temperature` thus
survives `rollout: hf`, a scale shrinks any experiment, and a variant picks the selector of any experiment.

Hydra appends `+group=option` to the end of the defaults list in command-line order, and refuses it for a
group already in the list ("Multiple values for debug"). `install()` makes `+experiment=greso` mean
`experiment=greso` for the preset groups below, so both spellings work and the order of the defaults list,
not of the command line, decides which value wins.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

# Groups listed in conf/train.yaml as `optional <group>: null`, in merge order.
PRESET_GROUPS = ("experiment", "scale", "variant", "debug")

CONF = (Path(__file__).resolve().parent.parent / "conf").resolve()
_installed = False


def _as_choice(override):
    """`+scale=cpu` -> `scale=cpu` for a preset group (its slot is already in the defaults list)."""
    from hydra.core.override_parser.types import OverrideType

    if (
        override.type == OverrideType.ADD
        and override.key_or_group in PRESET_GROUPS
        and override.package is None
    ):
        return dataclasses.replace(override, type=OverrideType.CHANGE)
    return override


def _is_pods(repo) -> bool:
    """Whether Hydra is composing from this package's conf/ (the one with the preset slots)."""
    try:
        return any(Path(src.path.split("://", 1)[-1]).resolve() == CONF for src in repo.get_sources())
    except Exception:  # noqa: BLE001 - an unexpected Hydra internals change: apply the rule anyway
        return True


def install() -> None:
    """Patch Hydra's defaults-list override handling once (idempotent). Used by every entry point that
    composes conf/ (pods.train, pods.config.register_schema, the tests)."""
    global _installed
    if _installed:
        return
    from hydra._internal import defaults_list

    original = defaults_list.Overrides.__init__

    def __init__(self, repo, overrides_list):
        if _is_pods(repo):  # another Hydra app in the same process keeps Hydra's own rules
            overrides_list = [_as_choice(o) for o in overrides_list]
        original(self, repo, overrides_list)

    defaults_list.Overrides.__init__ = __init__
    _installed = True
