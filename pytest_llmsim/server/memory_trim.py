"""Giving the memory of a wave of closed connections back to the system.

A thousand WebSocket sessions (or streams) hold their buffers and deflate states; when they close,
CPython frees them, but glibc's allocator keeps most of the freed pages, so the server's RSS stays
at its peak and grows with each wave (measured: 204, 283, 333, 366, 408, 445 MiB over six waves of
1,000 sessions, while the Python heap stayed at 30 MiB). ``malloc_trim(0)`` returns them
(200 -> 100 MiB) but stops the process for 7-12 ms, so it runs once a wave has ended: at least
``TRIM_AFTER_CLOSES`` connections closed since the last trim and the open ones down to a sixteenth
of their peak since then (a quarter left a quarter of each wave's memory behind). Elsewhere than glibc it does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import sys
import threading
import time
from collections.abc import Callable

__all__ = ["WaveTrimmer"]

TRIM_AFTER_CLOSES = 256
WAVE_END = 16  # a wave has ended when this many times fewer connections are open than at its peak


def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, or None where there is none (musl, macOS, Windows)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim: Callable[[int], int] = libc.malloc_trim
    except (OSError, AttributeError):
        return None
    return trim


class WaveTrimmer:
    """Told of each connection opened and closed, trims the heap once a wave of them has closed."""

    def __init__(self, trim: Callable[[int], int] | None = None) -> None:
        self._trim = trim if trim is not None else _malloc_trim()
        self._lock = threading.Lock()
        self._closed = 0
        self._peak = 0
        self.trims = 0
        self.last_seconds = 0.0  # how long the last trim stopped the process (with its collection)

    def opened(self, now_open: int) -> None:
        """A connection opened; ``now_open`` are open."""
        if now_open > self._peak:  # a racy read is harmless: the peak is a rule of thumb
            self._peak = now_open

    def closed(self, still_open: int) -> None:
        """A connection closed; ``still_open`` remain."""
        if self._trim is None:
            return
        with self._lock:
            self._closed += 1
            if self._closed < TRIM_AFTER_CLOSES or still_open * WAVE_END > self._peak:
                return
            self._closed, self._peak = 0, still_open
        started = time.perf_counter()
        gc.collect()  # what the closed connections left in reference cycles, freed first
        self._trim(0)
        self.trims += 1
        self.last_seconds = time.perf_counter() - started
