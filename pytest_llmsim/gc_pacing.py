"""The garbage collector's pauses: paced by requests in ``llmsim serve``, frozen out of a test process's
way on request (``--llmsim-gc-freeze``), and watched so a lag warning can name them.

CPython starts a young collection when allocations of tracked objects
outnumber their deallocations by 700. A busy backend in a steady state
rarely gets there: each request leaves a log record behind (five tracked
objects: the record, its headers and their list, its finish reasons and
ignored fields; its body is kept as bytes) and the bounded log frees the
oldest record's five. So collections come seldom and each scans
the records of thousands of requests at once — 35 to 80 ms with the whole
server stopped, every few thousand requests: at 3,700 requests/s, the p99
latency of a zero-latency request was 25 ms against a 4 ms median
(``docs/performance.md``). Paced, the young generation is collected every
``young_every`` requests and the middle one every ``middle_every``, so a
pause scans a few hundred requests' objects; :func:`freeze_startup` puts
what start-up built (modules, the tokenizer, the configuration) out of the
collector's way for good.

Pacing is only for processes that exist to serve: a test process that
embeds the server keeps its own collector settings unless asked. There a
full collection of what a test session imported (LiteLLM and LangChain
make ~560,000 tracked objects) stops every thread for ~280 ms, an embedded
backend's streams included; :class:`PauseWatch` sees such pauses, and
:func:`freeze_startup` after collection (``--llmsim-gc-freeze``) takes the
imports out of the collector's way (the same collection then takes ~3 ms).
"""

from __future__ import annotations

import gc
import itertools
import time
from collections import deque
from typing import Any

__all__ = ["CollectionPacer", "PauseWatch", "freeze_startup"]


class CollectionPacer:
    """Collects the young generation every ``young_every`` requests, the middle one every ``middle_every``.

    ``request_done`` is called once per request by whichever thread finished
    it; the counter is an ``itertools.count`` (atomic under the GIL), and a
    collection running in one handler stops the others as any would.
    """

    def __init__(self, young_every: int = 64, middle_every: int = 640) -> None:
        if young_every < 1 or middle_every < young_every:
            raise ValueError("expected 1 <= young_every <= middle_every")
        self.young_every = young_every
        self.middle_every = middle_every
        self._served = itertools.count(1)

    def request_done(self) -> None:
        served = next(self._served)
        if served % self.middle_every == 0:
            gc.collect(1)  # the middle generation with the young one
        elif served % self.young_every == 0:
            gc.collect(0)


def freeze_startup() -> None:
    """Collect once, then move every object alive now to the permanent generation (``gc.freeze``)."""
    gc.collect()
    gc.freeze()


class PauseWatch:
    """The collector's pauses in this process as they happen (``gc.callbacks``), those of ``floor`` seconds
    or more, the latest ``keep`` of them; :meth:`longest_since` answers "did one stop a test?".

    A collection runs whole in the thread that triggered it, holding the GIL,
    so its start and stop callbacks pair up without interleaving.
    """

    def __init__(self, floor: float = 0.005, keep: int = 256) -> None:
        self.floor = floor
        self._pauses: deque[tuple[float, float]] = deque(maxlen=keep)  # (ended at, seconds), monotonic
        self._started = 0.0

    def install(self) -> None:
        if self._on_gc not in gc.callbacks:
            gc.callbacks.append(self._on_gc)

    def uninstall(self) -> None:
        if self._on_gc in gc.callbacks:
            gc.callbacks.remove(self._on_gc)

    def _on_gc(self, phase: str, info: dict[str, Any]) -> None:
        now = time.monotonic()
        if phase == "start":
            self._started = now
        elif now - self._started >= self.floor:
            self._pauses.append((now, now - self._started))

    def longest_since(self, since: float) -> float:
        """The longest pause (seconds) that ended at or after ``since`` (``time.monotonic()``); 0.0 if none."""
        return max((seconds for ended, seconds in list(self._pauses) if ended >= since), default=0.0)
