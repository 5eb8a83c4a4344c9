"""Name -> factory registries with "did you mean" errors (timm-style)."""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from capsbench.errors import CapsbenchError

T = TypeVar("T")
U = TypeVar("U")


def close_matches(name: str, options: list[str]) -> str:
    """A phrase naming the options closest to `name`, or all options when none is close."""
    near = difflib.get_close_matches(name, options, n=3, cutoff=0.5)
    if near:
        return "did you mean " + " or ".join(repr(n) for n in near) + "?"
    return "valid: " + ", ".join(sorted(options))


class Registry(Generic[T]):
    """A named collection of factories; unknown names raise an error listing close matches."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        def decorator(obj: T) -> T:
            if name in self._entries:
                raise ValueError(f"{self.kind} {name!r} is registered twice")
            self._entries[name] = obj
            return obj

        return decorator

    def replace(self, name: str, obj: T) -> None:
        """Register `obj` under `name`, replacing an entry of that name (external models: the latest alias wins)."""
        self._entries[name] = obj

    def get(self, name: str) -> T:
        if name not in self._entries:
            raise CapsbenchError(
                f"unknown {self.kind} {name!r}: {close_matches(name, self.names())} "
                f"(see `capsbench list {self.kind}s`)"
            )
        return self._entries[name]

    def names(self) -> list[str]:
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())


class LoadingView(Generic[T, U]):
    """A registry seen through a loader: the same names, membership and errors, but get(name) returns what the
    entry points at (a class, an instance), imported only then, so the registry itself stays torch-free."""

    def __init__(self, registry: Registry[T], load: Callable[[T], U]) -> None:
        self._registry, self._load = registry, load

    def get(self, name: str) -> U:
        return self._load(self._registry.get(name))

    def names(self) -> list[str]:
        return self._registry.names()

    def __contains__(self, name: object) -> bool:
        return name in self._registry

    def __iter__(self) -> Iterator[str]:
        return iter(self._registry)
