"""A tiny name -> object registry, so configs pick components by name and a lookup error lists the choices."""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class Registry(Generic[T], dict):
    def __init__(self, kind: str):
        super().__init__()
        self.kind = kind

    def register(self, name: str) -> Callable[[T], T]:
        def deco(obj: T) -> T:
            if name in self and self[name] is not obj:
                raise ValueError(f"{self.kind} {name!r} is already registered")
            self[name] = obj
            return obj

        return deco

    def get_or_raise(self, name: str, key: str | None = None) -> T:
        if name not in self:
            where = f"{key}={name!r}" if key else f"{self.kind} {name!r}"
            raise KeyError(f"{where} is not registered; valid {self.kind} names: {', '.join(sorted(self))}")
        return self[name]
