"""A backend's load over the last minutes of wall time, one sample a second: what the live page charts.

The backend keeps it, so a page opened after the traffic still draws it. Noted
where the numbers change (a request ends; the batch or the queue changes):
a second's sample keeps that second's last values, and a second with no
change has no sample (the page draws a line to the next one). Bounded:
``seconds`` samples at most.
"""

from __future__ import annotations

import threading
import time
from collections import deque

__all__ = ["HISTORY_SECONDS", "LoadHistory"]

HISTORY_SECONDS = 300  # the live page's charts: the last five minutes


class LoadHistory:
    """Samples ``[second, requests ended, running, waiting]`` of the last ``seconds`` wall seconds."""

    def __init__(self, seconds: int = HISTORY_SECONDS) -> None:
        self.seconds = seconds
        self._lock = threading.Lock()
        self._samples: deque[list[int]] = deque(maxlen=seconds)
        self._ended = self._running = self._waiting = 0

    def request_ended(self) -> None:
        with self._lock:
            self._ended += 1
            self._note()

    def counts(self, now: float, running: int, waiting: int) -> None:
        """The batch or the queue changed (the engine's ``on_counts``; ``now`` is simulated and unused)."""
        with self._lock:
            self._running, self._waiting = running, waiting
            self._note()

    def _note(self) -> None:
        second = int(time.monotonic())
        samples = self._samples
        if samples and samples[-1][0] == second:
            samples[-1][1:] = self._ended, self._running, self._waiting
        else:
            samples.append([second, self._ended, self._running, self._waiting])

    def clear(self) -> None:
        with self._lock:
            self._samples.clear()
            self._ended = self._running = self._waiting = 0

    def recent(self) -> list[dict[str, float]]:
        """The samples of the last ``seconds``, oldest first: ``ago`` (wall seconds before now), ``total``
        (requests ended since the backend started or was reset), ``running``, ``waiting``."""
        now = time.monotonic()
        with self._lock:
            rows = [sample for sample in self._samples if now - sample[0] <= self.seconds]
        return [{"ago": round(now - second, 3), "total": total, "running": running, "waiting": waiting}
                for second, total, running, waiting in rows]
