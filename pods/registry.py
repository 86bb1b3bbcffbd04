"""Name -> component registries, so configs pick components by name and a lookup error lists the choices.

Each stage package keeps one (selectors, prefilters, rewards, rollout backends) and imports all of its
modules on import (`import_submodules`), so a new file in the package registers itself. Code outside the
package is named in the config's `plugins:` list and imported before the config is checked
(`load_plugins`). An entry may bring its own settings, a dataclass: `register("greso", settings=GresoConfig)`;
the config then holds them under the group, in a section named after the entry (`prefilter.greso.p_init`),
checked and typed with the rest of the config before anything loads (pods/components.py).
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Iterable
from typing import Generic, TypeVar

T = TypeVar("T")


class Registry(Generic[T], dict):
    def __init__(self, kind: str):
        super().__init__()
        self.kind = kind
        self.settings: dict[str, type] = {}  # name -> the entry's settings dataclass, if it has one

    def register(self, name: str, settings: type | None = None) -> Callable[[T], T]:
        def deco(obj: T) -> T:
            if name in self and self[name] is not obj:
                raise ValueError(f"{self.kind} {name!r} is already registered")
            self[name] = obj
            if settings is not None:
                self.settings[name] = settings
            return obj

        return deco

    def get_or_raise(self, name: str, key: str | None = None) -> T:
        if name not in self:
            where = f"{key}={name!r}" if key else f"{self.kind} {name!r}"
            raise KeyError(f"{where} is not registered; valid {self.kind} names: {', '.join(sorted(self))}")
        return self[name]


def import_submodules(package: str) -> None:
    """Import every module of `package` (not its subpackages' modules), so each registers what it defines."""
    pkg = importlib.import_module(package)
    for info in pkgutil.iter_modules(pkg.__path__, f"{package}."):
        importlib.import_module(info.name)


def load_plugins(modules: Iterable[str]) -> None:
    """Import the config's `plugins:` modules (dotted names on sys.path); their decorators register them."""
    for name in modules:
        importlib.import_module(name)
