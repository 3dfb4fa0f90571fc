"""Stored conversations: what an API that chains requests (``previous_response_id``) reads back.

Protocol-blind: an id maps to the messages of that exchange (its whole
history plus the answer) and the API's own rendering of the answer, for
retrieval. Bounded: the oldest entries are dropped past ``max_entries``;
a backend's :meth:`reset` empties it.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from .request import ChatMessage

__all__ = ["ConversationStore", "StoredExchange"]


@dataclass(frozen=True)
class StoredExchange:
    """One stored answer: the conversation through it, and its rendered body."""

    messages: tuple[ChatMessage, ...]
    body: dict[str, Any]


class ConversationStore:
    """Thread-safe, bounded map of response id to :class:`StoredExchange`, oldest dropped first."""

    def __init__(self, max_entries: int) -> None:
        self.max_entries = max_entries
        self._entries: OrderedDict[str, StoredExchange] = OrderedDict()
        self._lock = threading.Lock()

    def put(self, response_id: str, exchange: StoredExchange) -> None:
        with self._lock:
            self._entries[response_id] = exchange
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)

    def get(self, response_id: str) -> StoredExchange | None:
        with self._lock:
            return self._entries.get(response_id)

    def delete(self, response_id: str) -> bool:
        with self._lock:
            return self._entries.pop(response_id, None) is not None

    def __len__(self) -> int:
        return len(self._entries)
