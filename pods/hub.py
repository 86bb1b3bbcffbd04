"""Hub access that fails fast and clearly when there is no network (no silent multi-minute retries)."""

from __future__ import annotations

import os
import socket
from functools import cache


class OfflineError(RuntimeError):
    """A hub model or dataset was requested, but the hub cannot be reached and nothing is cached."""


@cache
def hub_reachable(host: str = "huggingface.co", timeout: float = 3.0) -> bool:
    if os.environ.get("HF_HUB_OFFLINE") == "1":
        return False
    try:
        socket.create_connection((host, 443), timeout=timeout).close()
        return True
    except OSError:
        return False


def prepare_hub_access() -> None:
    """Switch the HF libraries to offline mode when the hub is unreachable, so cache hits still work
    and misses fail at once instead of retrying."""
    if not hub_reachable():
        os.environ["HF_HUB_OFFLINE"] = "1"
        os.environ["HF_DATASETS_OFFLINE"] = "1"


def offline_message(kind: str, ident: str, key: str, hint: str) -> str:
    state = "reachable" if hub_reachable() else "unreachable (offline)"
    return (
        f"could not load {kind} '{ident}' ({key}): the Hugging Face hub is {state} and it is not in the local "
        f"cache. {hint}"
    )
