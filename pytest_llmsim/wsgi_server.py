"""werkzeug's threaded WSGI server with pooled handler threads and Nagle off.

werkzeug starts a thread per connection and closes every connection after
one response, so a client pays a thread start per request. Here finished
handler threads wait for the next connection instead; a new thread starts
only when none is idle, so concurrency stays unbounded like werkzeug's.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any

from werkzeug.serving import ThreadedWSGIServer, WSGIRequestHandler

__all__ = ["PooledWSGIServer", "QuietRequestHandler"]


class QuietRequestHandler(WSGIRequestHandler):
    """No access log, and Nagle off so each SSE chunk leaves when written.

    werkzeug writes a chunk's size line, data and CRLF separately; with Nagle
    on, the later writes wait for the peer's delayed ACK (tens of ms).
    """

    disable_nagle_algorithm = True

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        pass  # a test session's output is no place for an access log


class _WorkerPool:
    """Daemon threads that run jobs; grows when no worker is idle, never shrinks until closed."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._jobs: queue.SimpleQueue[tuple[Callable[..., None], tuple[Any, ...]] | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._idle = 0
        self._threads: list[threading.Thread] = []
        self._closed = False

    def submit(self, job: Callable[..., None], *args: Any) -> None:
        with self._lock:
            if self._closed:
                raise RuntimeError("worker pool is closed")
            if self._idle:
                self._idle -= 1
            else:
                thread = threading.Thread(target=self._work, name=f"{self._name}-{len(self._threads)}",
                                          daemon=True)
                self._threads.append(thread)
                thread.start()
        self._jobs.put((job, args))

    def _work(self) -> None:
        while True:
            item = self._jobs.get()
            if item is None:
                return
            job, args = item
            job(*args)
            with self._lock:
                self._idle += 1

    def close(self, timeout: float = 5.0) -> None:
        """Stop every worker once its current job ends; wait up to ``timeout`` for each."""
        with self._lock:
            self._closed = True
            threads = list(self._threads)
        for _ in threads:
            self._jobs.put(None)
        for thread in threads:
            thread.join(timeout)


class PooledWSGIServer(ThreadedWSGIServer):
    """``ThreadedWSGIServer`` whose connections are handled by a worker pool."""

    block_on_close = False  # the pool joins its workers in server_close

    def __init__(self, host: str, port: int, app: Any, handler: type[WSGIRequestHandler] | None = None,
                 **kwargs: Any) -> None:
        super().__init__(host, port, app, handler or QuietRequestHandler, **kwargs)
        self._pool = _WorkerPool("llmsim-http-worker")

    def process_request(self, request: Any, client_address: Any) -> None:
        self._pool.submit(self.process_request_thread, request, client_address)

    def server_close(self) -> None:
        super().server_close()
        self._pool.close()
