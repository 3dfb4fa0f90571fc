"""A backend's load over the last minutes of wall time, one sample a second: what the live page charts.

The backend keeps it, so a page opened after the traffic still draws it. Noted
where the numbers change (a request ends; the batch or the queue changes):
a second's sample keeps that second's last values, and a second with no
change has no sample (the page draws a line to the next one). Bounded:
``seconds`` samples at most.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import deque

__all__ = ["HISTORY_SECONDS", "LoadHistory"]

HISTORY_SECONDS = 300  # the live page's charts: the last five minutes


class LoadHistory:
    """Samples ``(second, requests ended, running, waiting)`` of the last ``seconds`` wall seconds.

    On a request's path: each change only sets the current values, and the first change of a new second
    files the one before (under the lock); a request pays no lock otherwise.
    """

    def __init__(self, seconds: int = HISTORY_SECONDS) -> None:
        self.seconds = seconds
        self._lock = threading.Lock()
        self._samples: deque[tuple[int, int, int, int]] = deque(maxlen=seconds)
        self._second: int | None = None  # the second the current values belong to
        self._ended_numbers = itertools.count(1)  # next() is atomic: handler threads end requests at once
        self._ended = self._running = self._waiting = 0

    def request_ended(self) -> None:
        self._roll()
        self._ended = next(self._ended_numbers)

    def counts(self, now: float, running: int, waiting: int) -> None:
        """The batch or the queue changed (the engine's ``on_counts``; ``now`` is simulated and unused)."""
        self._roll()
        self._running, self._waiting = running, waiting

    def _roll(self) -> None:
        second = int(time.monotonic())
        if second != self._second:
            with self._lock:
                if second != self._second:
                    if self._second is not None:
                        self._samples.append((self._second, self._ended, self._running, self._waiting))
                    self._second = second

    def clear(self) -> None:
        with self._lock:
            self._samples.clear()
            self._second = None
            self._ended_numbers = itertools.count(1)
            self._ended = self._running = self._waiting = 0

    def recent(self) -> list[dict[str, float]]:
        """The samples of the last ``seconds``, oldest first (the current second's values last): ``ago`` (wall
        seconds before now), ``total`` (requests ended since the backend started or was reset), ``running``,
        ``waiting``. A second with no change has no sample."""
        now = time.monotonic()
        with self._lock:
            rows = list(self._samples)
            if self._second is not None:
                rows.append((self._second, self._ended, self._running, self._waiting))
        return [{"ago": round(now - second, 3), "total": total, "running": running, "waiting": waiting}
                for second, total, running, waiting in rows if now - second <= self.seconds]
