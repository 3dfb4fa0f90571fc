"""werkzeug's threaded WSGI server with pooled handler threads and Nagle off.

werkzeug starts a thread per connection and closes every connection after
one response, so a client pays a thread start per request. Here finished
handler threads wait for the next connection instead; a new thread starts
only when none is idle, so concurrency stays unbounded like werkzeug's.
"""

from __future__ import annotations

import http.client
import io
import queue
import socket
import struct
import sys
import threading
import time
from collections.abc import Callable
from http import HTTPStatus
from typing import Any

from werkzeug.serving import ThreadedWSGIServer, WSGIRequestHandler

__all__ = ["ACCEPTED_AT", "PooledWSGIServer", "QuietRequestHandler"]


# WSGI environ key: time.monotonic() when the request reached the server.
ACCEPTED_AT = "llmsim.accepted_at"
_accepted = threading.local()  # the accept time of the connection this thread handles

# Linux stamps each received packet with the kernel's receive time when asked
# (SO_TIMESTAMP; Python names neither constant). The stamp of a request's first
# bytes is when it really arrived, however late a handler thread gets to it.
_SO_TIMESTAMP = 29 if sys.platform.startswith("linux") else None
_TIMEVAL = struct.Struct("@ll")


class _PrefixedSocketReader(io.RawIOBase):
    """A socket's byte stream, with bytes already received put back in front."""

    def __init__(self, sock: socket.socket, prefix: bytes) -> None:
        super().__init__()
        self._sock = sock
        self._prefix = memoryview(prefix)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if self._prefix:
            count = min(len(buffer), len(self._prefix))
            buffer[:count] = self._prefix[:count]
            self._prefix = self._prefix[count:]
            return count
        return self._sock.recv_into(buffer)


def _first_bytes(sock: socket.socket) -> tuple[bytes, float | None]:
    """The first bytes a client sent, and when they arrived (``time.monotonic()``), if the kernel says."""
    data, ancillary, _, _ = sock.recvmsg(65536, socket.CMSG_SPACE(_TIMEVAL.size))
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == _SO_TIMESTAMP and len(payload) >= _TIMEVAL.size:
            seconds, micros = _TIMEVAL.unpack_from(payload)
            age = time.time() - (seconds + micros / 1e6)
            return data, time.monotonic() - max(0.0, age)
    return data, None


_MAX_LINE = 65536  # http.client's limits
_MAX_HEADERS = 100


def _read_headers(rfile: Any) -> http.client.HTTPMessage:
    """The header block as an ``HTTPMessage``, without the ``email`` parser."""
    message = http.client.HTTPMessage()
    count = 0
    while True:
        line = rfile.readline(_MAX_LINE + 1)
        if len(line) > _MAX_LINE:
            raise http.client.LineTooLong("header line")
        if line in (b"\r\n", b"\n", b""):
            return message
        count += 1
        if count > _MAX_HEADERS:
            raise http.client.HTTPException(f"got more than {_MAX_HEADERS} headers")
        name, colon, value = line.decode("iso-8859-1").partition(":")
        if colon and name.strip():
            message[name.strip()] = value.strip()


class _CoalescingWriter:
    """Holds writes until ``flush()``, then sends them with one ``sendall``.

    werkzeug writes a chunk's size line, its data and a CRLF separately and
    flushes after each chunk: unbuffered, that is three packets per SSE event.
    It writes the final ``0\r\n\r\n`` without a flush, so that goes out at once.
    A plain class: an ``io`` object per connection costs more than it gives.
    """

    __slots__ = ("_parts", "_sock", "closed")

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._parts: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> int:
        self._parts.append(data)
        if data == b"0\r\n\r\n":
            self.flush()
        return len(data)

    def flush(self) -> None:
        if self._parts:
            data = b"".join(self._parts)
            self._parts.clear()
            self._sock.sendall(data)

    def close(self) -> None:
        self.closed = True


class QuietRequestHandler(WSGIRequestHandler):
    """No access log; one packet per flushed write, sent at once (Nagle off)."""

    def setup(self) -> None:
        # StreamRequestHandler.setup, with our writer in place of its unbuffered one
        self.connection = self.request
        if self.timeout is not None:
            self.connection.settimeout(self.timeout)
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, True)
        self.wfile = _CoalescingWriter(self.connection)  # type: ignore[assignment]
        self.arrived_at = getattr(_accepted, "at", None)
        if _SO_TIMESTAMP is None:
            self.rfile = self.connection.makefile("rb", self.rbufsize)
            return
        try:
            first, stamp = _first_bytes(self.connection)
        except OSError:
            first, stamp = b"", None
        if stamp is not None:
            self.arrived_at = stamp
        self.rfile = io.BufferedReader(_PrefixedSocketReader(self.connection, first))

    def parse_request(self) -> bool:
        """``http.server``'s ``parse_request`` with a lean header parser.

        The standard one runs every header block through the ``email``
        package, a sizeable share of a small request's cost. Same checks,
        same errors (400, 431, 505), same ``HTTPMessage`` result; the
        ``Expect: 100-continue`` answer is werkzeug's, in ``run_wsgi``.
        """
        self.command = None  # type: ignore[assignment]
        self.request_version = self.default_request_version
        self.close_connection = True
        self.requestline = requestline = str(self.raw_requestline, "iso-8859-1").rstrip("\r\n")
        words = requestline.split()
        if not words:
            return False
        if len(words) >= 3:
            version = words[-1]
            numbers = version[5:].split(".") if version.startswith("HTTP/") else []
            if len(numbers) != 2 or not all(n.isdigit() and len(n) <= 10 for n in numbers):
                self.send_error(HTTPStatus.BAD_REQUEST, f"Bad request version ({version!r})")
                return False
            if (int(numbers[0]), int(numbers[1])) >= (2, 0):
                self.send_error(HTTPStatus.HTTP_VERSION_NOT_SUPPORTED,
                                f"Invalid HTTP version ({version[5:]})")
                return False
            self.request_version = version
        if not 2 <= len(words) <= 3 or (len(words) == 2 and words[0] != "GET"):
            self.send_error(HTTPStatus.BAD_REQUEST, f"Bad request syntax ({requestline!r})")
            return False
        self.command, self.path = words[0], words[1]
        if self.path.startswith("//"):
            self.path = "/" + self.path.lstrip("/")
        try:
            self.headers = _read_headers(self.rfile)
        except http.client.LineTooLong as error:
            self.send_error(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE, "Line too long", str(error))
            return False
        except http.client.HTTPException as error:
            self.send_error(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE, "Too many headers", str(error))
            return False
        return True

    def make_environ(self) -> Any:
        environ = super().make_environ()
        environ[ACCEPTED_AT] = self.arrived_at
        return environ

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        pass  # a test session's output is no place for an access log

    def log_error(self, format: str, *args: Any) -> None:
        pass  # malformed requests already get their 4xx answer


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
        if _SO_TIMESTAMP is not None:  # inherited by accepted sockets; stamps from the first packet on
            self.socket.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMP, 1)

    def process_request(self, request: Any, client_address: Any) -> None:
        self._pool.submit(self._handle, request, client_address, time.monotonic())

    def _handle(self, request: Any, client_address: Any, accepted_at: float) -> None:
        _accepted.at = accepted_at
        self.process_request_thread(request, client_address)

    def server_close(self) -> None:
        super().server_close()
        self._pool.close()
