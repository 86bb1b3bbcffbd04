"""Writing inside the run directory without following a symbolic link out of it.

Every file pods writes in a run directory (run.lock, metrics.jsonl and its rewrite, history.jsonl,
run_info.json, config.yaml, the checkpoints and their temporary copies) is opened with O_NOFOLLOW, or its
path is checked with lstat where a library opens it: a link in its place would have pods overwrite the file
it points to, outside the run. Such a link is refused in one line (LinkRefused, a RunError). The run
directory itself may lie under a link (scratch space mounted elsewhere): only the names inside it are checked.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from pods.errors import RunError

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)  # Linux and macOS; elsewhere the lstat check alone
_FLAGS = {"a": os.O_WRONLY | os.O_CREAT | os.O_APPEND, "r+": os.O_RDWR | os.O_CREAT}


class LinkRefused(RunError):
    """A file pods was about to write in its run directory is a symbolic link."""

    def __init__(self, path):
        try:
            target = f" (to {os.readlink(path)})"
        except OSError:
            target = ""
        super().__init__(
            f"{path} is a symbolic link{target}: pods writes only inside its run directory and follows no link "
            "there, so the file it points to is left untouched. Remove the link (a run directory that itself "
            "lies under a link is fine), then run again"
        )


# What pods writes directly in a run directory (pods.train checks them before the model loads; each write checks
# its own file again): the lock, the records and their rewrite, the history, run_info.json and its temporary
# file, the config, the checkpoints
RUN_FILES = ("run.lock", "metrics.jsonl", "metrics.tmp", "history.jsonl", "run_info.json", ".run_info.json.tmp",
             "config.yaml", "checkpoints")  # fmt: skip


def refuse_links_in(run_dir) -> None:
    """LinkRefused for the first of RUN_FILES in `run_dir` that is a symbolic link."""
    for name in RUN_FILES:
        refuse_link(Path(run_dir) / name)


def refuse_link(path) -> None:
    """LinkRefused if `path` is a symbolic link (dangling or not); nothing if it is anything else or absent."""
    if os.path.islink(path):
        raise LinkRefused(path)


def nofollow(path, flags: int, perms: int = 0o666) -> int:
    """os.open that does not follow a link at `path` (LinkRefused instead); also an `opener` for open():
    `open(path, "a", opener=nofollow)`."""
    refuse_link(path)  # where O_NOFOLLOW is missing, and for a clearer error than ELOOP
    try:
        return os.open(path, flags | _NOFOLLOW | getattr(os, "O_CLOEXEC", 0), perms)
    except OSError as e:
        if e.errno == errno.ELOOP and os.path.islink(path):  # a link put there since the check
            raise LinkRefused(path) from None
        raise


def open_fd(path, mode: str = "a", perms: int = 0o644) -> int:
    """A file descriptor of `path` opened for writing ("a", "w" or "r+", created if missing), no link followed."""
    return nofollow(path, _FLAGS[mode], perms)


def open_write(path, mode: str = "a", encoding: str = "utf-8"):
    """open(path, mode) for writing ("a" or "w") that follows no link at `path`."""
    return open(path, mode, encoding=encoding, opener=nofollow)


def write_text(path, text: str) -> None:
    """Path.write_text without following a link at `path`."""
    with open_write(path, "w") as f:
        f.write(text)


def fresh_dir(path: Path) -> None:
    """`path` as a directory pods may fill: not a link (refused), created if missing."""
    refuse_link(path)
    Path(path).mkdir(parents=True, exist_ok=True)
    refuse_link(path)
