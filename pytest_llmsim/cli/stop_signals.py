"""``llmsim serve``'s Ctrl-C and SIGTERM: the first asks for a clean stop, a second exits at once.

The handler only notes the signal. Python runs a handler in the main thread between two of its bytecodes,
also where that thread holds a lock; a handler that takes a lock the main thread may hold waits on itself
forever. ``threading.Event.set()`` takes the lock ``Event.wait()`` holds around its bookkeeping, and a
replica whose parent was killed (its death signal, SIGTERM) stayed serving, its main thread in a futex
wait, while ``llmsim serve``'s loop waited on such an event (a fresh-clone CI run of
``test_replicas_exit_quietly_when_their_parent_is_killed``).
"""

from __future__ import annotations

import os
import signal
import time
from types import FrameType

__all__ = ["StopSignals"]

#: How often :meth:`StopSignals.wait` looks whether a signal came (a handler that returns does not cut a
#: ``time.sleep`` short: Python sleeps on for what was left).
GLANCE_SECONDS = 0.05


class StopSignals:
    """SIGINT and SIGTERM, once :meth:`install` ed: :attr:`signum` is the first one's number (None before)."""

    def __init__(self) -> None:
        self.signum: int | None = None

    def install(self) -> None:
        signal.signal(signal.SIGINT, self.on_signal)
        signal.signal(signal.SIGTERM, self.on_signal)

    def on_signal(self, signum: int, frame: FrameType | None) -> None:
        """The handler: notes the first signal and takes no lock; a second exits at once (``128 + signum``)."""
        if self.signum is not None:
            os._exit(128 + signum)
        self.signum = signum

    def wait(self, seconds: float) -> bool:
        """Waits up to ``seconds``, less once a signal has come; whether one has."""
        deadline = time.monotonic() + seconds
        while self.signum is None:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            time.sleep(min(left, GLANCE_SECONDS))
        return True
