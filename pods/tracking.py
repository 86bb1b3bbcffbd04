"""Logging: metrics.jsonl in the run directory always; W&B when configured (offline when unreachable)."""

from __future__ import annotations

import json
import logging
import math
import os
import re
import sys
import uuid
from pathlib import Path

from pods.config import LoggerConfig, TrainConfig
from pods.errors import writing
from pods.files import nofollow, refuse_link, write_text
from pods.spelling import current_metrics

log = logging.getLogger("pods")


def _clean(v):
    if isinstance(v, float) and not math.isfinite(v):
        return None  # JSON has no NaN; a null says "not finite" honestly
    return v


def wandb_mode(requested: str) -> str:
    """auto -> online when logged in and the W&B host answers, else offline; never raises."""
    if requested != "auto":
        return requested
    try:
        import wandb

        if not (os.environ.get("WANDB_API_KEY") or wandb.api.api_key):
            return "offline"
        from pods.hub import hub_reachable

        return "online" if hub_reachable("api.wandb.ai") else "offline"
    except Exception:  # noqa: BLE001 - any trouble with W&B means offline, not a crash
        return "offline"


def run_info_for(c: TrainConfig, identity: dict | None = None) -> dict:
    """Who this run is, for run_info.json, W&B and pods.compare: its name, variant and seed, the digest and
    the full defining config (pods.identity). `identity`: pods.identity.describe of the composed config, the
    one the run directory was named from (pods.train passes it); else described from the typed settings."""
    from pods import identity as ident

    s, who = c.selector, identity or ident.describe(c)
    return {
        "name": c.name or who["name"],
        "variant": who["variant"],
        "seed": c.seed,
        "selector": s.name,
        "n": s.n,
        "m": s.m,
        "model": c.model.name,
        "dataset": c.dataset.name,
        "group": c.logger.group or c.experiment,
        "experiment": c.experiment,
        "stages": who["stages"],
        "digest": who["digest"],
        "defining": who["defining"],
    }


def write_run_info(
    c: TrainConfig,
    run_dir: Path,
    data: dict,
    world: int,
    threads: int,
    is_main: bool,
    keep=False,
    decisions=None,
    identity: dict | None = None,
) -> dict:
    """run_info.json: identity, the components (pods.components.summary), data report, world size, threads;
    its W&B id survives a resume.
    `keep` (a resume): the file as the run's first start wrote it is kept (fields it lacks are added); this
    start's world size, threads and any changed key go to history.jsonl instead (pods/history.py).
    Only rank 0 touches the file: another rank reading it while rank 0 writes it would see half a file.
    `decisions`: the settings left `auto` that were decided with the model on the device, and why (the
    rollout backend's: rows per generate call, the decode attention). `identity`: run_info_for's."""
    from pods.components import summary

    path = run_dir / "run_info.json"
    info = run_info_for(c, identity)
    info["components"] = summary(c)  # every active component and its settings, by stage
    if decisions:
        info["decisions"] = decisions
    try:
        old = json.loads(path.read_text()) if is_main and path.exists() else {}
    except (OSError, ValueError):
        old = {}
    old = old if isinstance(old, dict) else {}
    if keep and old.get("name"):
        info = {**info, "data": data, "world_size": world, "torch_threads": threads, **old}
        info.setdefault("wandb_id", uuid.uuid4().hex[:12])
        if is_main and info != old:
            replace_file(path, json.dumps(info, indent=2))
        return info
    info["wandb_id"] = old.get("wandb_id") or uuid.uuid4().hex[:12]  # resume continues the same W&B run
    info["data"] = data
    info["world_size"] = world
    info["torch_threads"] = threads
    if is_main:
        replace_file(path, json.dumps(info, indent=2))
    return info


def replace_file(path: Path, text: str) -> None:
    """Write `path` whole or not at all (a temporary file renamed over it): a full disk leaves the old one.
    A link at `path` or at the temporary file is refused, not followed (pods/files.py)."""
    tmp = path.with_name(f".{path.name}.tmp")
    refuse_link(path)
    refuse_link(tmp)
    try:
        with writing(tmp):
            write_text(tmp, text)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


LOG_REFRESH_S = 30.0  # written to a file, not a terminal, the bar redraws at most this often


def _isatty(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


class Progress:
    """The run's progress bar: training-clock seconds for a run bounded by max_train_time, else steps.

    In a terminal it redraws up to 10 times a second. Written to a file (nohup, a batch system's log) it
    redraws at most every LOG_REFRESH_S seconds: a long run's log gets a line per half minute, not a line
    per step (tqdm's default redraws on every set_postfix).
    """

    def __init__(
        self,
        max_steps: int,
        max_train_time: float,
        clock: float,
        step: int,
        name: str,
        disable: bool = False,
        file=None,
    ):
        from tqdm.auto import tqdm

        file = sys.stderr if file is None else file
        every = 0.1 if _isatty(file) else LOG_REFRESH_S
        self.by_time = max_train_time > 0
        self.bar = tqdm(
            total=round(max_train_time) if self.by_time else max_steps,
            initial=round(clock) if self.by_time else step,
            unit="s" if self.by_time else "step",
            desc=name,
            file=file,
            dynamic_ncols=_isatty(file),
            mininterval=every,
            maxinterval=max(every, 10.0),
            disable=disable,
        )

    def advance(self, step: int, clock: float, reward: float) -> None:
        """After a step: move to `clock` seconds (or one step on), show the step's reward."""
        bar = self.bar
        bar.set_postfix(step=step, reward=f"{reward:.3f}", clock=f"{clock:.0f}s", refresh=False)
        bar.update(min(round(clock), bar.total) - bar.n if self.by_time else 1)  # redraws when due

    def close(self) -> None:
        self.bar.close()


STEP_METRIC = "train/clock"  # the training clock in seconds: metrics.jsonl's train_time


def bind_metrics(run) -> None:
    """Plot every logged metric against the training clock, as metrics.jsonl has it.

    A glob per namespace would miss new ones (reward/*, timing/*, selector/*, prefilter/*, ...)
    and leave them on W&B's _step, which counts log calls; "*" binds them all.
    """
    run.define_metric(STEP_METRIC)
    run.define_metric("*", step_metric=STEP_METRIC)


class MetricsLogger:
    """Append-only metrics.jsonl plus optional W&B. On resume (load_state_dict) the file is truncated to the
    checkpoint's step first, so a resumed run continues it without duplicates or gaps."""

    def __init__(self, logger: LoggerConfig, run_dir: Path, run_info: dict, config: dict | None = None):
        """`config`: the run's settings as a plain dict, W&B's run config."""
        self.path = run_dir / "metrics.jsonl"
        refuse_link(self.path)  # appended to line by line: a link would have the records written elsewhere
        self.lines = _count_lines(self.path)  # complete lines so far; a checkpoint records how many it covers
        self.wandb = None
        if logger.backend == "wandb":
            self.wandb = self._init_wandb(logger, run_dir, run_info, config or {})

    def _init_wandb(self, logger: LoggerConfig, run_dir: Path, run_info: dict, config: dict):
        try:
            import wandb

            mode = wandb_mode(logger.mode)
            run = wandb.init(
                project=logger.project,
                entity=logger.entity,
                group=logger.group or run_info.get("group"),
                name=run_info["name"],
                id=run_info["wandb_id"],
                resume="allow",
                dir=str(run_dir),
                mode=mode,
                config=config,
                settings=wandb.Settings(init_timeout=60),
            )
            bind_metrics(run)
            log.info("W&B run %s (%s)", run.name, mode)
            return run
        except Exception as e:  # noqa: BLE001 - logging must never kill a training run
            log.warning("W&B unavailable (%s: %s); metrics go to %s only", type(e).__name__, e, self.path)
            return None

    def log(self, record: dict) -> None:
        rec = {k: _clean(v) for k, v in record.items()}
        with writing(self.path), open(self.path, "a", opener=nofollow) as f:  # closed per line: none lost
            end = f.tell()
            try:
                f.write(json.dumps(rec) + "\n")
                f.flush()
            except OSError:
                f.truncate(end)  # no torn line left by a full disk (best effort: the disk may refuse)
                raise
        self.lines += 1
        if self.wandb is not None:
            try:
                data = {k: v for k, v in rec.items() if isinstance(v, (int, float)) and k != "kind"}
                data[STEP_METRIC], data["train/step"] = rec["train_time"], rec["step"]
                self.wandb.log(data)
            except Exception as e:  # noqa: BLE001
                log.warning("W&B log failed: %s", e)

    def state_dict(self) -> dict:
        """Where the records stand: how many complete lines metrics.jsonl holds (a checkpoint's meta.json)."""
        return {"metrics_lines": self.lines}

    def load_state_dict(self, state: dict) -> None:
        """Continue from a checkpoint at state["step"]: drop the records written after it (truncate_metrics);
        state["metrics_lines"] (None for old checkpoints) says which torn lines it covers."""
        truncate_metrics(self.path, state["step"], state.get("metrics_lines"))
        self.lines = _count_lines(self.path)

    def sync(self) -> None:
        """fsync before a checkpoint, so the metrics it covers survive even a machine crash."""
        if self.path.exists():
            with writing(self.path), open(self.path, "a", opener=nofollow) as f:
                os.fsync(f.fileno())

    def finish(self) -> None:
        if self.wandb is not None:
            self.wandb.finish()


class MetricsGapError(ValueError):
    """metrics.jsonl lacks records that the checkpoint a resume starts from covers: a gap that resuming from
    this checkpoint would leave for good. `step` is the earliest step affected: a checkpoint before it
    (step < `step`) recomputes the lost records."""

    def __init__(self, msg: str, step: int):
        super().__init__(msg)
        self.step = step


_STEP = re.compile(r'"step":\s*(-?\d+)')


def check_metrics(path: Path, step: int, covered_lines: int | None = None) -> list[str]:
    """The lines of metrics.jsonl to keep when resuming from a checkpoint at `step`: records with step <= step,
    each (kind, step) once. Lines after the checkpoint are dropped (a resume recomputes them), including a
    line torn by a kill mid-write. A line that does not parse but that the checkpoint covers, or a missing
    train record of a step <= `step`, is a gap that resuming from this checkpoint would make permanent:
    raises MetricsGapError naming the file and line. `covered_lines`: how many lines metrics.jsonl had when
    the checkpoint was saved (its meta.json); without it, a corrupt line is covered if its step (when still
    readable) is <= `step` or a later record of step <= `step` follows it."""
    path = Path(path)
    lines = path.read_text(errors="replace").splitlines() if path.exists() else []
    parsed: list[tuple[int, str, dict | None]] = []
    for i, line in enumerate(lines, 1):
        if line.strip():
            parsed.append((i, line, pods_record(line)))
    keep, seen, problems, corrupt = [], set(), [], []
    last_covered = max((i for i, _, r in parsed if r is not None and r.get("step", 0) <= step), default=0)
    prev_step = 0
    for i, line, rec in parsed:
        if rec is None:
            m = _STEP.search(line)
            at = int(m.group(1)) if m else prev_step  # written after prev_step's records: at least prev_step
            if covered_lines is not None:
                covered = i <= covered_lines
            else:
                covered = (m is not None and at <= step) or i < last_covered
            corrupt.append((i, line))
            if covered and step >= 0:
                problems.append((i, at, line))
            else:
                log.info(
                    "%s line %d: a record torn after the checkpoint (step %d); resume recomputes it",
                    path,
                    i,
                    step,
                )
            continue
        prev_step = max(prev_step, int(rec.get("step", 0)))
        if rec.get("step", 0) > step:
            continue
        key = (rec.get("kind"), rec.get("step"))
        if key in seen:
            log.warning("%s line %d: a second %s record of step %s dropped", path, i, *key)
            continue
        seen.add(key)
        keep.append(line)
    trained = {s for k, s in seen if k == "train"}
    missing = [s for s in range(1, step + 1) if s not in trained]
    if problems or missing:
        first = min([at for _, at, _ in problems] + missing)
        shown = corrupt if missing else [(i, line) for i, _, line in problems]  # with a gap, every bad line
        what = "; ".join(f"line {i} {_why(line)} ({line[:60]!r}...)" for i, line in shown[:3])
        if missing:
            runs = _ranges(missing)
            what += (
                "; " if what else ""
            ) + f"no train record for step{'s' if len(missing) > 1 else ''} {runs}"
        raise MetricsGapError(
            f"{path}: {what}, at or before the checkpoint at step {step}. Resuming from it would leave a "
            f"permanent gap. Repair the file, or move it aside and start a new run (another run_dir)",
            step=max(first, 0),
        )
    return keep


def pods_record(line: str) -> dict | None:
    """The record a metrics.jsonl line holds, or None: a line torn by a kill, or one pods did not write (a
    record always has a string `kind` and an integer `step`)."""
    try:
        rec = json.loads(line)
    except (ValueError, RecursionError):
        return None
    ok = isinstance(rec, dict) and isinstance(rec.get("kind"), str) and type(rec.get("step")) is int
    return rec if ok else None


def _why(line: str) -> str:
    try:
        json.loads(line)
    except (ValueError, RecursionError):
        return "does not parse"
    return "is not a record pods wrote"


def _ranges(steps: list[int]) -> str:
    out, start = [], steps[0]
    for a, b in zip(steps, [*steps[1:], None]):
        if b != a + 1:
            out.append(f"{start}" if start == a else f"{start}-{a}")
            start = b
    return ", ".join(out)


def truncate_metrics(path: Path, step: int, covered_lines: int | None = None) -> None:
    """Drop records after `step` (they were written after the checkpoint a resume starts from), a torn last
    line and duplicates; refuse (MetricsGapError, file untouched) if that would leave a gap at or before
    `step` (see check_metrics). Written to a temp file and renamed, so a crash here loses nothing."""
    path = Path(path)
    if not path.exists() and step <= 0:
        return
    refuse_link(path)  # its records would be read from, and its rewrite replace, a file outside the run
    keep = check_metrics(path, step, covered_lines)
    tmp = path.with_suffix(".tmp")
    refuse_link(tmp)
    try:
        with writing(tmp), open(tmp, "w", opener=nofollow) as f:
            f.write("".join(x + "\n" for x in keep))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _count_lines(path: Path) -> int:
    if not path.exists():
        return 0
    with open(path, "rb") as f:
        return sum(1 for line in f if line.endswith(b"\n"))


def read_metrics(path: Path) -> list[dict]:
    """The records of a metrics.jsonl, metrics under today's names (pods.spelling.current_metrics)."""
    return [current_metrics(json.loads(x)) for x in Path(path).read_text().splitlines() if x.strip()]
