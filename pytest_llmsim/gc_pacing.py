"""Garbage collection paced by requests served, for a process that only serves (``llmsim serve``).

CPython starts a young collection when allocations of tracked objects
outnumber their deallocations by 700. A busy backend in a steady state
rarely gets there: each request leaves a log record behind (about a dozen
tracked objects: the record, its headers, its body) and the bounded log
frees the oldest record's dozen. So collections come seldom and each scans
the records of thousands of requests at once — 35 to 80 ms with the whole
server stopped, every few thousand requests: at 3,700 requests/s, the p99
latency of a zero-latency request was 25 ms against a 4 ms median
(``docs/performance.md``). Paced, the young generation is collected every
``young_every`` requests and the middle one every ``middle_every``, so a
pause scans a few hundred requests' objects; :func:`freeze_startup` puts
what start-up built (modules, the tokenizer, the configuration) out of the
collector's way for good.

Only for processes that exist to serve: a test process that embeds the
server keeps its own collector settings.
"""

from __future__ import annotations

import gc
import itertools

__all__ = ["CollectionPacer", "freeze_startup"]


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
