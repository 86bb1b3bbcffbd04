"""Which runs are seeds of one experiment: pods.compare's rows.

A row is one experiment: runs of one variant whose defining config (pods.identity: every key but the free
ones, the seed and the labels) is the same. The config is read from run_info.json's `defining` when every
run dir records it, else from each run's config.yaml (runs of an older pods), so that all runs are read one
way; a key a config lacks is at today's default when it is a schema field (a field added since). A run dir
with neither, a W&B export and a long table are grouped by name (the variant: the name without its seed
token), and the header says so. Rows that share a variant are labelled by the keys in which they differ:
`max_variance-n4-m2 [loss.name=sequence]`; keys in which rows of different variants also differ are named
in the header.

Refused in one line (CompareError), unless asked for, and then said in the header:
- rows scored on different eval sets (pods.identity.EVAL_SET_KEYS): `--pool KEY,...` reads runs that differ
  only in those keys as one experiment;
- one experiment's seed twice (a copied run dir, or one seed run twice): `--allow-copies` keeps both.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from pods.analysis.errors import CompareError
from pods.identity import EVAL_SET_KEYS, default_config, digest, schema_fields, under

MAX_LABEL_KEYS = 3  # keys shown in a row's label; more are counted
VARIANT_GROUPS = ("selector", "prefilter", "dynamic_sampling")  # the variant's stages


@dataclass
class RunMeta:
    """What a run dir says about who it is, for grouping."""

    run: str  # the run's name in the table
    variant: str
    seed: str
    where: str  # its directory
    recorded: dict | None = None  # run_info.json's `defining` (flat)
    saved: dict | None = None  # the defining keys of its config.yaml (flat)
    fingerprint: str | None = None  # sha256 of its metrics.jsonl: a copied dir has the same
    wandb_id: str | None = None


@dataclass
class Rows:
    """run -> its row's label, and what the header says about how the rows were made."""

    label: dict[str, str]
    grouping: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def _show(v: Any) -> str:
    return v if isinstance(v, str) else json.dumps(v, default=str)


def configs(metas: list[RunMeta]) -> tuple[list[dict | None], str]:
    """Each run's defining config, all read one way, and a line saying which."""
    if metas and all(m.recorded is not None for m in metas):
        return [m.recorded for m in metas], "run_info.json's defining config"
    older = sum(m.recorded is None for m in metas)
    why = f" ({older} run(s) record no defining config in run_info.json: an older pods)" if older else ""
    return [m.saved for m in metas], f"each run's config.yaml{why}"


def complete(flat: dict, pool: Iterable[str], defaults: dict, fields: frozenset[str]) -> dict:
    """A defining config with the pooled keys left out and a schema field it lacks at today's default."""
    out = {k: v for k, v in flat.items() if not under(k, pool)}
    for k, v in defaults.items():
        if k in fields and k not in out and not under(k, pool):
            out[k] = v
    return out


def key_of(variant: str, flat: dict | None) -> str:
    return json.dumps([variant, sorted(flat.items()) if flat is not None else None], default=str)


def differing(flats: list[dict]) -> list[str]:
    """Keys whose value is not the same in every config."""
    keys = set().union(*flats) if flats else set()
    return sorted(k for k in keys if len({_show(f.get(k, "<absent>")) for f in flats}) > 1)


def labels(groups: dict[str, tuple[str, dict | None]]) -> dict[str, str]:
    """group key -> label: the variant, and where several groups share it, the keys they differ in (a group
    of runs without a config beside ones with: `[no config]`)."""
    by_variant: dict[str, list[str]] = {}
    for key, (variant, _) in groups.items():
        by_variant.setdefault(variant, []).append(key)
    out = {}
    for variant, keys in by_variant.items():
        known = [k for k in keys if groups[k][1] is not None]
        out.update({k: f"{variant} [no config]" for k in keys if groups[k][1] is None and len(keys) > 1})
        diff = differing([groups[k][1] for k in known])
        for k in known if len(known) > 1 else []:
            f = groups[k][1]
            shown = ", ".join(f"{d}={_show(f.get(d, '<absent>'))}" for d in diff[:MAX_LABEL_KEYS])
            more = f", +{len(diff) - MAX_LABEL_KEYS} more" if len(diff) > MAX_LABEL_KEYS else ""
            out[k] = f"{variant} [{shown}{more}]"
        out.update({k: variant for k in keys if k not in out})
    if len(set(out.values())) < len(out):  # labels cut short that collide: a digest of the group tells them
        out = {k: f"{v} #{digest({'group': k})}" for k, v in out.items()}
    return out


def check_eval_sets(groups: dict[str, tuple[str, dict | None]], label: dict[str, str]) -> None:
    """Refuse rows scored on different eval sets (a key of EVAL_SET_KEYS differs between them)."""
    known = {label[k]: f for k, (_, f) in groups.items() if f is not None}
    flats = list(known.values())
    bad = [k for k in differing(flats) if under(k, EVAL_SET_KEYS)]
    if bad:
        k = bad[0]
        values: dict[str, list[str]] = {}
        for row, f in known.items():
            values.setdefault(_show(f.get(k, "<absent>")), []).append(row)
        shown = "; ".join(f"{k}={v} ({', '.join(rows)})" for v, rows in values.items())
        raise CompareError(
            f"the rows were evaluated on different eval sets: {shown}; compare them apart, or pass --pool "
            f"{','.join(bad)} to read them as one experiment"
        )


def check_copies(metas: list[RunMeta], row_of: dict[str, str], allow: bool) -> list[str]:
    """Refuse a row that holds one seed twice (or, with `allow`, return the warning that says it kept them)."""
    seen: dict[tuple[str, str], RunMeta] = {}
    said = []
    for m in metas:
        other = seen.setdefault((row_of[m.run], m.seed), m)
        if other is m:
            continue
        copy = (m.fingerprint and m.fingerprint == other.fingerprint) or (
            m.wandb_id and m.wandb_id == other.wandb_id
        )
        what = "copies of one run" if copy else f"one experiment's seed {m.seed} twice"
        where = f"{other.run} ({other.where}) and {m.run} ({m.where})"
        if not allow:
            raise CompareError(
                f"runs {where} are {what} (row {row_of[m.run]!r}, seed {m.seed}): two runs of one seed are not "
                "two seeds; read one of them, or pass --allow-copies to keep both"
            )
        said.append(f"--allow-copies: runs {where} are {what}, both kept as seeds of {row_of[m.run]!r}")
    return said


def rows(metas: list[RunMeta], pool: Iterable[str] = (), allow_copies: bool = False) -> Rows:
    """The rows of run dirs (the module docstring)."""
    pool = tuple(pool)
    read, source = configs(metas)
    defaults, fields = default_config(), schema_fields()
    flats = [complete(f, pool, defaults, fields) if f is not None else None for f in read]
    groups: dict[str, tuple[str, dict | None]] = {}
    key_for = {}
    for m, f in zip(metas, flats):
        key_for[m.run] = key_of(m.variant, f)
        groups.setdefault(key_for[m.run], (m.variant, f))
    label = labels(groups)
    check_eval_sets(groups, label)
    row_of = {run: label[k] for run, k in key_for.items()}
    out = Rows(row_of)
    nameless = [m.run for m, f in zip(metas, flats) if f is None]
    if len(nameless) < len(metas):
        out.grouping.append(f"rows: runs of one variant with the same defining config, read from {source}")
    if nameless:
        out.grouping.append(
            f"rows by name: {len(nameless)} run(s) have no saved config (run_info.json, config.yaml), grouped "
            f"by the variant their name gives: {', '.join(nameless[:8])}{', ...' if len(nameless) > 8 else ''}"
        )
    out.grouping += pooled_text(pool, read)
    out.grouping += across_text(groups, label)
    out.warnings += check_copies(metas, row_of, allow_copies)
    return out


def pooled_text(pool: tuple[str, ...], flats: list[dict | None]) -> list[str]:
    """--pool: the keys read as one experiment, with the values found."""
    lines = []
    for p in pool:
        values = sorted({_show(v) for f in flats if f for k, v in f.items() if under(k, (p,))})
        found = ", ".join(values) or "none found"
        lines.append(
            f"pooled over {p} (--pool): runs that differ in it alone are seeds of one row; its values: {found}"
        )
    return lines


def across_text(groups: dict[str, tuple[str, dict | None]], label: dict[str, str]) -> list[str]:
    """Keys in which rows of different variants differ besides their variant (a per-row lr, say): not the
    sampling stages' own (selector, prefilter, dynamic_sampling: what the variant says), nor a key some rows
    lack (a section of a component another row does not use), nor one a label shows."""
    known = [(label[k], f) for k, (_, f) in groups.items() if f is not None]
    by_variant: dict[str, list[dict]] = {}
    for variant, f in groups.values():
        by_variant.setdefault(variant, []).extend([f] if f is not None else [])
    labelled = {k for flats in by_variant.values() for k in differing(flats)}
    diff = [
        k
        for k in differing([f for _, f in known])
        if not under(k, VARIANT_GROUPS) and all(k in f for _, f in known) and k not in labelled
    ]
    if not diff or len(known) < 2:
        return []
    shown = "; ".join(f"{k}: " + ", ".join(f"{row} {_show(f[k])}" for row, f in known) for k in diff[:4])
    more = f"; +{len(diff) - 4} more keys" if len(diff) > 4 else ""
    return [f"rows also differ in {shown}{more}"]
