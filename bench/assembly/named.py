"""Named registrations of one kind (corpus sources, detectors): each name registered once, and an unknown name a
ConfigError that lists the valid ones."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Generic, TypeVar

from bench.errors import ConfigError, choice_error

T = TypeVar("T")


class Registry(Mapping, Generic[T]):
    """A read-only mapping name → item that only `add` extends."""

    def __init__(self, kind: str):
        self.kind = kind  # what an item is, in messages ("corpus source")
        self._items: dict[str, T] = {}

    def add(self, name: str, item: T) -> T:
        if name in self._items:
            raise ConfigError(f"{self.kind} {name!r} is registered twice")
        self._items[name] = item
        return item

    def lookup(self, name: str) -> T:
        if name not in self._items:
            raise choice_error(self.kind, name, sorted(self._items))
        return self._items[name]

    def __getitem__(self, name: str) -> T:
        return self._items[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)
