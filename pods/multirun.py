"""A multirun stopped by a signal names the jobs it did not run, and how to run them.

Hydra's basic launcher runs a sweep's jobs one after another in one process: a SIGTERM in job 2 of 6 ends the
process, and jobs 3-6 never start. The stopped job prints its own resume command (pods/signals.py); this
module writes `<sweep dir>/jobs_not_run.sh`, one command a job, each a multirun of that one job into the same
sweep directory (so its run directory is the one the sweep would have made), and logs one line naming them.
Other launchers (Slurm's submitit, joblib) start every job on its own: a signal to one stops only that one.
"""

from __future__ import annotations

import itertools
import logging
import re
import shlex
import signal
import sys
from pathlib import Path

log = logging.getLogger("pods")
SCRIPT = "jobs_not_run.sh"
BASIC_LAUNCHER = "core_plugins.basic_launcher.BasicLauncher"  # the end of Hydra's _target_ (a name only)
BASIC_SWEEPER = "core_plugins.basic_sweeper.BasicSweeper"
_VALUED_FLAGS = ("-cn", "-cp", "-cd", "--config-name", "--config-path", "--config-dir")


def sweep_arguments(argv: list[str]) -> list[str]:
    """The overrides of a `python -m pods.train -m ...` command line (Hydra's flags and their values left out)."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a in _VALUED_FLAGS:
            skip = True
        elif not a.startswith("-"):
            out.append(a)
    return out


def sweep_jobs(params: dict, argv: list[str]) -> list[list[str]]:
    """Every job of the basic sweeper, in its order: each a list of overrides. The basic sweeper's expansion, by
    Hydra's public parser: the cartesian product of each override's values (a sweep's, or the one it sets)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    args = [f"{k}={v}" for k, v in (params or {}).items()] + sweep_arguments(argv)
    axes: dict[str, list[str]] = {}  # key -> its values; a key given again replaces its values in place
    for o in OverridesParser.create().parse_overrides(args):
        key = o.get_key_element()
        values = o.sweep_string_iterator() if o.is_sweep_override() else [o.get_value_element_as_str()]
        axes[key] = [f"{key}={v}" for v in values]
    return [list(job) for job in itertools.product(*axes.values())]


def jobs_not_run() -> tuple[Path, int, list[list[str]], list[list[str]]] | None:
    """(sweep dir, this job's number, the jobs after it, every job) in a multirun of the basic launcher."""
    try:
        from hydra.core.hydra_config import HydraConfig
        from hydra.types import RunMode

        hc = HydraConfig.get()
    except Exception:  # noqa: BLE001 - not under Hydra
        return None
    if hc.mode != RunMode.MULTIRUN or not str(hc.launcher.get("_target_")).endswith(BASIC_LAUNCHER):
        return None
    if not str(hc.sweeper.get("_target_")).endswith(BASIC_SWEEPER):
        return None
    jobs = sweep_jobs(dict(hc.sweeper.get("params") or {}), sys.argv[1:])
    return Path(hc.sweep.dir), int(hc.job.num), jobs[int(hc.job.num) + 1 :], jobs


def note_jobs_not_run(signum: int) -> None:
    """Write jobs_not_run.sh and log one line, when a stopped multirun leaves jobs unrun."""
    try:
        found = jobs_not_run()
    except Exception as e:  # noqa: BLE001 - naming the jobs must never hide the stop itself
        log.warning("multirun stopped: could not list the jobs not run (%s: %s)", type(e).__name__, e)
        return
    if not found or not found[2]:
        return
    sweep_dir, num, rest, every = found

    sweep = shlex.quote(f"hydra.sweep.dir={hydra_value(str(sweep_dir))}")
    rest = [[o for o in job if not o.startswith("hydra.sweep.dir=")] for job in rest]  # given once, below
    lines = [" ".join(["python -m pods.train -m", *map(shlex.quote, job), sweep]) for job in rest]
    script = sweep_dir / SCRIPT
    try:
        script.write_text("# the jobs a signal stopped this multirun before\n" + "\n".join(lines) + "\n")
        how = f"run them with: sh {shlex.quote(str(script))}"
    except OSError as e:
        how = f"{script} not written ({e.strerror}); run each with: python -m pods.train -m <its overrides> {sweep}"
    common = set.intersection(*map(set, every))  # the overrides every job shares: not shown
    swept = [" ".join(o for o in job if o not in common) or "(defaults)" for job in rest]
    shown = "; ".join(swept[:5]) + ("; ..." if len(rest) > 5 else "")
    log.warning(
        "multirun stopped by %s in job %d: %d job(s) not run (%s); %s",
        signal.Signals(signum).name,
        num,
        len(rest),
        shown,
        how,
    )


def hydra_value(value: str) -> str:
    """`value` as Hydra's override grammar reads it back exactly: as is when it parses so, else quoted (a
    path with spaces, commas or non-ASCII letters); the shell's quoting comes on top (shlex.quote)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser = OverridesParser.create()
    for text in (value, _quoted(value, "'"), _quoted(value, '"')):
        try:
            if parser.parse_override(f"k={text}").value() == value:
                return text
        except Exception:  # noqa: BLE001 - Hydra's lexer and parser raise several types
            continue
    return value


def _quoted(value: str, q: str) -> str:
    """Inside Hydra's quotes a backslash is literal unless it precedes the quote or ends the string: double
    those, and escape the quote."""
    return q + re.sub(rf"(\\*)({q}|$)", lambda m: m[1] * 2 + ("\\" + m[2] if m[2] else ""), value) + q
