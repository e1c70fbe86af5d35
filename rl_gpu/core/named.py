"""A registry of named entries (algorithms, policy kinds): what registering, removing, listing and looking one up
mean, once, with one-line errors."""

from __future__ import annotations

import importlib
from typing import Any, Generic, TypeVar

from rl_gpu.core.errors import UsageError

T = TypeVar("T")


def load_entry(entry: str) -> Any:
    """The object an ``"package.module:name"`` string names (its module imported on first use)."""
    module, name = entry.split(":")
    return getattr(importlib.import_module(module), name)


class NamedRegistry(Generic[T]):
    """Entries of type ``kind``, each with a ``name``, in registration order (built-in ones first).

    Args:
        kind: the entries' class (anything else is refused).
        what: how an entry is called in messages (``"algorithm"``, ``"policy kind"``).
    """

    def __init__(self, kind: type[T], what: str) -> None:
        self.kind, self.what = kind, what
        self._entries: dict[str, T] = {}

    def register(self, entry: T, override: bool = False) -> None:
        """Add ``entry``; ``ValueError`` when its name is taken by another entry, unless ``override``."""
        if not isinstance(entry, self.kind):
            raise TypeError(f"registering a {self.what} takes a {self.kind.__name__}, got {type(entry).__name__}")
        name = entry.name  # type: ignore[attr-defined]
        if name in self._entries and not override and self._entries[name] != entry:
            raise ValueError(f"{self.what} {name!r} is already registered; pass override=True")
        self._entries[name] = entry

    def unregister(self, name: str) -> None:
        self._entries.pop(name, None)

    def names(self) -> tuple[str, ...]:
        return tuple(self._entries)

    def get(self, name: object) -> T:
        """The entry named ``name``; :class:`~rl_gpu.core.errors.UsageError` naming the known ones otherwise."""
        entry = self._entries.get(name) if isinstance(name, str) else None
        if entry is None:
            raise UsageError(f"unknown {self.what} {name!r}; known: {', '.join(map(repr, self._entries))}")
        return entry
