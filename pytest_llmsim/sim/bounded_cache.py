"""A bounded store of what a request computed, for the next request that brings the same thing.

An agent sends the same tools, schemas and system prompt with every request: what they cost to
check, parse or write is kept by their JSON text (:func:`.fast_json.exact`) and reused. Reads take
no lock (a dict read is atomic); an insert takes one, so another thread's eviction never changes the
dict under it. The oldest entry goes first once ``most`` are kept.
"""

from __future__ import annotations

import threading
from typing import Generic, TypeVar

__all__ = ["BoundedCache"]

K = TypeVar("K")
V = TypeVar("V")


class BoundedCache(Generic[K, V]):
    """At most ``most`` values by key, the oldest dropped first."""

    __slots__ = ("_lock", "_values", "most")

    def __init__(self, most: int) -> None:
        self.most = most
        self._values: dict[K, V] = {}
        self._lock = threading.Lock()

    def get(self, key: K, default: V | None = None) -> V | None:
        return self._values.get(key, default)

    def keep(self, key: K, value: V) -> None:
        with self._lock:
            values = self._values
            values[key] = value
            if len(values) > self.most:
                del values[next(iter(values))]

    def clear(self) -> None:
        with self._lock:
            self._values.clear()

    def __len__(self) -> int:
        return len(self._values)
