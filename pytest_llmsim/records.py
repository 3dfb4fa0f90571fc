"""The request log: what arrived at a backend and what became of it.

The log is bounded (``max_log_entries``, oldest dropped) so a long soak keeps
flat memory; the counters in :mod:`pytest_llmsim.metrics` keep counting.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

__all__ = ["RequestLog", "RequestRecord"]


@dataclass(slots=True)
class RequestRecord:
    """One HTTP request to an API route and its outcome.

    Timings are simulated seconds (``None`` where the request never got
    that far, e.g. a 400). ``status`` is 0 when the connection was dropped
    before any response; ``fault`` names the fault the request was given.
    """

    method: str
    path: str
    headers: dict[str, str]
    body: Any = None
    status: int = 0
    model: str | None = None
    stream: bool = False
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    finish_reasons: list[str | None] = field(default_factory=list)
    ttft: float | None = None
    e2e: float | None = None
    queue_time: float | None = None
    itl: float | None = None
    cancelled: bool = False
    error: dict[str, Any] | None = None
    fault: str | None = None

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300 and not self.cancelled

    def summary(self) -> str:
        """One line for assertion messages."""
        parts = [f"{self.method} {self.path} -> {self.status}"]
        if self.model:
            parts.append(f"model={self.model}")
        if self.prompt_tokens or self.completion_tokens:
            parts.append(f"tokens={self.prompt_tokens}+{self.completion_tokens}")
        if self.cancelled:
            parts.append("cancelled")
        if self.fault:
            parts.append(f"fault={self.fault}")
        if self.error:
            parts.append(f"error={self.error.get('code') or self.error.get('type')}")
        return " ".join(parts)


class RequestLog:
    """Thread-safe, bounded list of :class:`RequestRecord`, oldest dropped first."""

    def __init__(self, max_entries: int) -> None:
        self._records: deque[RequestRecord] = deque(maxlen=max_entries)
        self._lock = threading.Lock()

    def append(self, record: RequestRecord) -> None:
        with self._lock:
            self._records.append(record)

    def snapshot(self) -> list[RequestRecord]:
        with self._lock:
            return list(self._records)

    def __iter__(self) -> Iterator[RequestRecord]:
        return iter(self.snapshot())

    def __len__(self) -> int:
        return len(self._records)
