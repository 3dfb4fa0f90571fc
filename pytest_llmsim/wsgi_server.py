"""werkzeug's threaded WSGI server with pooled handler threads and Nagle off.

werkzeug starts a thread per connection and closes every connection after
one response, so a client pays a thread start per request. Here finished
handler threads wait for the next connection instead; a new thread starts
only when none is idle, so concurrency stays unbounded like werkzeug's.
"""

from __future__ import annotations

import io
import queue
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from werkzeug.serving import ThreadedWSGIServer, WSGIRequestHandler

__all__ = ["ACCEPTED_AT", "PooledWSGIServer", "QuietRequestHandler"]


# WSGI environ key: time.monotonic() when the connection was accepted.
ACCEPTED_AT = "llmsim.accepted_at"
_accepted = threading.local()  # the accept time of the connection this thread handles


class _CoalescingWriter(io.BufferedIOBase):
    """Holds writes until ``flush()``, then sends them with one ``sendall``.

    werkzeug writes a chunk's size line, its data and a CRLF separately and
    flushes after each chunk: unbuffered, that is three packets per SSE event.
    It writes the final ``0\r\n\r\n`` without a flush, so that goes out at once.
    """

    def __init__(self, sock: socket.socket) -> None:
        super().__init__()
        self._sock = sock
        self._parts: list[bytes] = []

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        chunk = bytes(data)
        self._parts.append(chunk)
        if chunk == b"0\r\n\r\n":
            self.flush()
        return len(chunk)

    def flush(self) -> None:
        if self._parts:
            data = b"".join(self._parts)
            self._parts.clear()
            self._sock.sendall(data)

    def fileno(self) -> int:
        return self._sock.fileno()


class QuietRequestHandler(WSGIRequestHandler):
    """No access log; one packet per flushed write, sent at once (Nagle off)."""

    disable_nagle_algorithm = True

    def setup(self) -> None:
        super().setup()
        self.wfile = _CoalescingWriter(self.connection)

    def make_environ(self) -> Any:
        environ = super().make_environ()
        environ[ACCEPTED_AT] = getattr(_accepted, "at", None)
        return environ

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
    # socketserver's default backlog of 5 drops SYNs from a burst of clients,
    # which then retry a second later: a load test's TTFT would show that.
    request_queue_size = 1024

    def __init__(self, host: str, port: int, app: Any, handler: type[WSGIRequestHandler] | None = None,
                 **kwargs: Any) -> None:
        super().__init__(host, port, app, handler or QuietRequestHandler, **kwargs)
        self._pool = _WorkerPool("llmsim-http-worker")

    def process_request(self, request: Any, client_address: Any) -> None:
        self._pool.submit(self._handle, request, client_address, time.monotonic())

    def _handle(self, request: Any, client_address: Any, accepted_at: float) -> None:
        _accepted.at = accepted_at
        self.process_request_thread(request, client_address)

    def server_close(self) -> None:
        super().server_close()
        self._pool.close()
