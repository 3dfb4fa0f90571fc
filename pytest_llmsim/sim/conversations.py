"""Stored conversations: what an API that chains requests (``previous_response_id``) reads back.

Protocol-blind: an id maps to the messages of that exchange (its whole
history plus the answer) and the API's own rendering of the answer, for
retrieval. Bounded: the oldest entries are dropped past ``max_entries`` or
``max_bytes`` (their text's size: a chain of long requests stores each whole
history again, 250 of ~3.6 MB took a gigabyte); the newest is always kept. A
backend's :meth:`reset` empties it.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from .fast_json import dumps
from .request import ChatMessage, SimError

__all__ = ["ConversationStore", "StoredExchange", "continued_not_found"]


@dataclass(frozen=True)
class StoredExchange:
    """One stored answer: the conversation through it, its rendered body, and the API key that made it
    (``owner``; None when the backend checks no keys)."""

    messages: tuple[ChatMessage, ...]
    body: dict[str, Any]
    owner: str | None = None

    def size_bytes(self) -> int:
        """About what it holds: its messages' text and its body's JSON (characters, plus a little per message)."""
        text = sum(len(m.content) + len(m.role) + len(m.name or "") + 64 for m in self.messages)
        return text + len(dumps(self.body))


class ConversationStore:
    """Thread-safe, bounded map of response id to :class:`StoredExchange`, oldest dropped first."""

    def __init__(self, max_entries: int, max_bytes: int = 256 * 1024 * 1024) -> None:
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.total_bytes = 0
        self._entries: OrderedDict[str, tuple[StoredExchange, int]] = OrderedDict()
        self._lock = threading.Lock()

    def put(self, response_id: str, exchange: StoredExchange) -> None:
        size = exchange.size_bytes()
        with self._lock:
            previous = self._entries.pop(response_id, None)
            if previous is not None:
                self.total_bytes -= previous[1]
            self._entries[response_id] = (exchange, size)
            self.total_bytes += size
            while len(self._entries) > 1 and (len(self._entries) > self.max_entries
                                              or self.total_bytes > self.max_bytes):
                self.total_bytes -= self._entries.popitem(last=False)[1][1]
            if len(self._entries) > self.max_entries:  # max_entries 0: nothing is kept
                self._entries.clear()
                self.total_bytes = 0

    def get(self, response_id: str, owner: str | None = None) -> StoredExchange | None:
        """The entry, if ``owner`` (the asking request's API key) made it: another key's is not found."""
        with self._lock:
            entry = self._entries.get(response_id)
        return entry[0] if entry is not None and entry[0].owner == owner else None

    def delete(self, response_id: str, owner: str | None = None) -> bool:
        """Delete the entry if ``owner`` made it; whether it did."""
        with self._lock:
            entry = self._entries.get(response_id)
            if entry is None or entry[0].owner != owner:
                return False
            del self._entries[response_id]
            self.total_bytes -= entry[1]
        return True

    def named(self, prefix: str, owner: str | None = None) -> list[tuple[str, StoredExchange]]:
        """``owner``'s entries whose names start with ``prefix``, oldest first."""
        with self._lock:
            return [(name, entry[0]) for name, entry in self._entries.items()
                    if name.startswith(prefix) and entry[0].owner == owner]

    def __len__(self) -> int:
        return len(self._entries)


def continued_not_found(param: str, response_id: str) -> SimError:
    """The answer to a request continuing a conversation the store does not have (or another key's): the
    Responses API's 400 for ``previous_response_id``, else a 404 naming ``param``."""
    if param != "previous_response_id":
        return SimError(404, f"{param} {response_id!r} was not found (or it expired).", param=param,
                        code="not_found")
    return SimError(400, f"Previous response with id '{response_id}' not found.", param="previous_response_id",
                    code="previous_response_not_found")
