"""Named plug-in points: one registry per kind of name, and no guessing.

A name used in more than one place (a metric, a judge, a retrieval mode, an
agent kind) is registered once. Looking up an unknown name is an error that
lists the known ones — never a silent fallback to some default.

Entries may be given lazily as ``"package.module:attribute"`` strings, so a
registry can name heavy implementations (FAISS, torch) without importing them
until they are used.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from typing import Generic, TypeVar

from ragtrack.errors import RagtrackError

T = TypeVar("T")


class UnknownNameError(RagtrackError, ValueError):
    """A name that is not in its registry (a ValueError too, so pydantic reports it as a bad value)."""


class Registry(Generic[T]):
    """Name → entry; ``what`` names the kind of entry in error messages ("retrieval mode")."""

    def __init__(self, what: str, entries: dict[str, T | str] | None = None):
        self.what = what
        self._entries: dict[str, T | str] = dict(entries or {})

    def add(self, name: str, entry: T | str) -> T | str:
        """Register ``entry`` (or a lazy ``"module:attribute"`` path) under ``name``."""
        if name in self._entries:
            raise ValueError(f"{self.what} {name!r} is already registered")
        self._entries[name] = entry
        return entry

    def remove(self, name: str) -> None:
        self._entries.pop(name, None)

    def get(self, name: str) -> T:
        """The entry for ``name``, importing it on first use when it was registered lazily."""
        self.check(name)
        entry = self._entries[name]
        if isinstance(entry, str):
            entry = self._entries[name] = load_object(entry)
        return entry

    def check(self, name: str) -> str:
        """``name`` itself when registered; otherwise an error listing what is."""
        if name not in self._entries:
            raise UnknownNameError(f"unknown {self.what} {name!r}; expected one of: {', '.join(self.names())}")
        return name

    def names(self) -> list[str]:
        return list(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)


def load_object(path: str) -> object:
    """The object a ``"package.module:attribute"`` path names."""
    module, _, attribute = path.partition(":")
    return getattr(importlib.import_module(module), attribute)
