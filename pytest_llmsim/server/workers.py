"""The threads behind the threaded serving mode: a pool of handler threads that retire when idle.

A burst of a thousand streams leaves a few threads behind, not a thousand.
"""

from __future__ import annotations

import itertools
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

__all__ = ["WorkerPool"]


class WorkerPool:
    """Daemon threads that run jobs.

    Grows when no worker is idle; a worker idle for ``idle_seconds`` retires
    unless only ``min_idle`` are idle, so a burst of a thousand streams does
    not leave a thousand threads behind.
    """

    def __init__(self, name: str, idle_seconds: float = 10.0, min_idle: int = 4) -> None:
        self._name = name
        self._jobs: queue.SimpleQueue[tuple[Callable[..., None], tuple[Any, ...]] | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._idle = 0  # idle workers not yet claimed by a submitted job
        self._threads: set[threading.Thread] = set()
        self._serial = itertools.count()
        self._closed = False
        self.idle_seconds = idle_seconds
        self.min_idle = min_idle

    @property
    def size(self) -> int:
        with self._lock:
            return len(self._threads)

    def submit(self, job: Callable[..., None], *args: Any) -> bool:
        """Run ``job(*args)`` on a worker; False when none is idle and no thread can start."""
        with self._lock:
            if self._closed:
                return False
            if self._idle:
                self._idle -= 1
            else:
                thread = threading.Thread(target=self._work, name=f"{self._name}-{next(self._serial)}",
                                          daemon=True)
                try:
                    thread.start()
                except RuntimeError:  # "can't start new thread": out of memory or a thread limit
                    return False
                self._threads.add(thread)
        self._jobs.put((job, args))
        return True

    def _work(self) -> None:
        while True:
            try:
                item = self._jobs.get(timeout=self.idle_seconds)
            except queue.Empty:
                with self._lock:
                    # _idle counts unclaimed idle workers; if a job claimed us since the
                    # timeout, it is in the queue and we must stay to take it.
                    if self._idle > self.min_idle:
                        self._idle -= 1
                        self._threads.discard(threading.current_thread())
                        return
                continue
            if item is None:
                return
            job, args = item
            try:
                job(*args)
            except BaseException:
                pass  # a job reports its own errors; a worker must survive them
            with self._lock:
                self._idle += 1

    def close(self, timeout: float = 1.0) -> None:
        """Stop every worker once its current job ends; wait ``timeout`` seconds in all, not per worker."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            threads = list(self._threads)
        for _ in threads:
            self._jobs.put(None)
        deadline = time.monotonic() + timeout
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
