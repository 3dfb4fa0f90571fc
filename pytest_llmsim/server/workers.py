"""The threads behind the threaded serving mode: handler threads that retire when idle, and the deadline watchdog.

A burst of a thousand streams leaves a few threads behind, not a thousand; a
connection that does not send its request head (or body) by its deadline is cut
by one watchdog thread, so no socket needs a timeout (measured: timeouts on every
receive cost the threads mode 10-15 % of its chat requests per second, the poll
before each receive and its GIL hand-offs).
"""

from __future__ import annotations

import itertools
import math
import queue
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

__all__ = ["HeadWatchdog", "WorkerPool"]


# A handler past its deadline but busy with bytes the client did send is looked at again this much later.
RECHECK_SECONDS = 0.25


class HeadWatchdog:
    """Closes connections that have not sent a complete request head by their deadline.

    Sockets stay blocking (a socket with a timeout polls before every send
    and receive, a syscall per operation on the hot path); instead this one
    thread per server shuts down, at its deadline, any connection still
    reading its head, so the blocked read returns and the handler ends.

    The deadline is the client's: a connection whose ``waiting_on_client``
    says its handler is not blocked reading (it has the bytes and the server
    is slow to parse them: a thousand handler threads under one GIL can
    starve one for seconds) is looked at again later, not cut.
    """

    def __init__(self) -> None:
        # socket -> (deadline, waiting_on_client, how to shut it down at the deadline)
        self._deadlines: dict[socket.socket, tuple[float, Callable[[], bool] | None, int]] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._closed = False
        self._next_wake = math.inf  # when the thread wakes next, unless told sooner
        self._thread = threading.Thread(target=self._run, name="llmsim-head-watchdog", daemon=True)
        self._thread.start()

    def watch(self, sock: socket.socket, deadline: float,
              waiting_on_client: Callable[[], bool] | None = None, how: int = socket.SHUT_RDWR) -> None:
        """Cut ``sock`` at ``deadline`` (``time.monotonic()``) unless released, if its handler is then
        ``waiting_on_client()`` (without one: whatever the handler is doing).

        ``how`` is the ``shutdown`` it gets: a request body's deadline shuts only the reading side,
        so the blocked read ends and the handler can still answer 408.
        """
        with self._lock:
            self._deadlines[sock] = (deadline, waiting_on_client, how)
            sooner = deadline < self._next_wake
        if sooner:  # usually not: deadlines are now + a constant, later than those waiting
            self._wake.set()

    def release(self, sock: socket.socket) -> None:
        with self._lock:
            self._deadlines.pop(sock, None)

    def close(self) -> None:
        self._closed = True
        self._wake.set()
        self._thread.join(1.0)

    def _run(self) -> None:
        while not self._closed:
            now = time.monotonic()
            with self._lock:
                expired = [(sock, waiting_on_client, how) for sock, (deadline, waiting_on_client, how)
                           in self._deadlines.items() if deadline <= now]
                to_cut = []
                for sock, waiting_on_client, how in expired:
                    if waiting_on_client is None or waiting_on_client():
                        del self._deadlines[sock]
                        to_cut.append((sock, how))
                    else:  # the server is behind, not the client
                        self._deadlines[sock] = (now + RECHECK_SECONDS, waiting_on_client, how)
                upcoming = min((deadline for deadline, _, _ in self._deadlines.values()), default=math.inf)
                self._next_wake = upcoming
                self._wake.clear()
            for sock, how in to_cut:
                try:
                    sock.shutdown(how)
                except OSError:
                    pass  # already gone
            # Sleep to the earliest deadline; watch() wakes us for a sooner one.
            self._wake.wait(None if math.isinf(upcoming) else max(0.0, upcoming - time.monotonic()) + 0.005)


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
