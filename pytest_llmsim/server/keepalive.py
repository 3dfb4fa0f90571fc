"""HTTP/1.1 persistent connections for werkzeug's request handler.

werkzeug answers every request with ``Connection: close`` (http.server cannot
tell where an unread request body ends), so a gateway's upstream connection
pool is never exercised. This handler mixin keeps a connection open after a
response when the client allows it (HTTP/1.1 without ``Connection: close``)
and the response is delimited (a length, chunked, or no body), and when the
request's body was read to its end, or its rest is small enough to discard;
otherwise it closes as werkzeug does. Two connection-level settings close a
kept-alive connection *without telling the client first*, so a gateway's
retry-on-stale-connection path can be tested: after ``keepalive_max_requests``
requests, and after ``keepalive_timeout`` seconds idle (the same deadline a
connection has to send a request head).
"""

from __future__ import annotations

import io
import socket
import time
from collections.abc import Callable, Iterable
from typing import Any

from werkzeug.serving import WSGIRequestHandler

__all__ = ["KeepAliveHandler", "KeepAlivePolicy", "drain_before_close", "response_framing"]

# A request body the application left unread is discarded up to this size to keep
# the connection; a larger rest closes it instead.
DISCARD_LIMIT = 1024 * 1024
# Closing that connection drains what the client still sends first (see drain_before_close):
# until it stops for LINGER_IDLE seconds or LINGER_SECONDS have passed (nginx: lingering_timeout
# and lingering_time, 5 s and 30 s; a test's client sends at loopback speed).
LINGER_IDLE = 0.25
LINGER_SECONDS = 2.0


def drain_before_close(sock: socket.socket) -> None:
    """Half-close ``sock``, then read and drop what the peer still sends, for a while, before it is closed.

    Closing a socket with received bytes unread makes the kernel answer with
    a reset: the client's send fails, and the answer it had not read yet
    (a 413 for the body it was sending) can be discarded with it. Ends when
    the peer closes, pauses ``LINGER_IDLE`` seconds, or after ``LINGER_SECONDS``.
    """
    try:
        sock.shutdown(socket.SHUT_WR)  # the answer is complete: the client sees its end now
        deadline = time.monotonic() + LINGER_SECONDS
        while (left := deadline - time.monotonic()) > 0:
            sock.settimeout(min(left, LINGER_IDLE))
            if not sock.recv(65536):
                return  # the client closed
    except OSError:  # a pause (timeout), a reset, or already closed
        pass


def response_framing(code: int, headers: list[tuple[str, str]], *, head_only: bool, version: str,
                     body_can_finish: bool, keep: bool) -> tuple[bool, bool, list[tuple[str, str]]]:
    """How a response goes on the wire, the same in both serving cores: (chunked, keep the connection,
    headers to add).

    ``keep`` is what the client and the settings allow; it is dropped for a request body too large to
    discard unread (``body_can_finish`` False), an application's ``Connection: close``, or a body
    without a length on HTTP/1.0 (it ends with the connection). A closing response says so.
    """
    keys = {key.lower() for key, _ in headers}
    if not body_can_finish or ("connection" in keys and any(
            key.lower() == "connection" and "close" in value.lower() for key, value in headers)):
        keep = False  # a chunked or large unread body, or the application says so: say it now
    no_body = head_only or 100 <= code < 200 or code in (204, 304)
    chunked = False
    extra: list[tuple[str, str]] = []
    if "content-length" not in keys and not no_body:
        if version == "HTTP/1.1":
            chunked = True
            extra.append(("Transfer-Encoding", "chunked"))
        else:
            keep = False  # the body ends when the connection does
    if not keep and "connection" not in keys:
        extra.append(("Connection", "close"))
    return chunked, keep, extra


class KeepAlivePolicy:
    """What the server allows: persistent connections at all, and how many requests on one."""

    __slots__ = ("enabled", "max_requests")

    def __init__(self, enabled: bool = True, max_requests: int | None = None) -> None:
        self.enabled = enabled
        self.max_requests = max_requests


class _CountingInput(io.RawIOBase):
    """The request body stream, counting what the application read of it."""

    def __init__(self, stream: Any) -> None:
        super().__init__()
        self._stream = stream
        self.consumed = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        count: int = self._stream.readinto(buffer)
        self.consumed += count or 0
        return count

    def read(self, size: int = -1) -> bytes:
        data: bytes = self._stream.read(size)
        self.consumed += len(data)
        return data

    def readline(self, size: int | None = -1) -> bytes:
        data: bytes = self._stream.readline(size)
        self.consumed += len(data)
        return data


class KeepAliveHandler(WSGIRequestHandler):
    """``run_wsgi`` that may keep the connection open; a mixin base for the server's handler."""

    requests_served = 0
    _body: _CountingInput | None = None
    _linger = False  # the connection closes with request bytes unread: drain them first

    def keepalive_policy(self) -> KeepAlivePolicy:  # the server supplies the real one
        return KeepAlivePolicy(enabled=False)

    def _client_allows_keepalive(self) -> bool:
        connection = (self.headers.get("Connection") or "").lower()
        return self.request_version == "HTTP/1.1" and "close" not in connection

    def make_environ(self) -> Any:
        environ = self.build_environ()
        self._body = None
        if not environ.get("wsgi.input_terminated"):  # a chunked body: no counting, the connection closes
            self._body = _CountingInput(environ["wsgi.input"])
            environ["wsgi.input"] = self._body
        return environ

    def _content_length(self) -> int | None:
        try:
            return int(self.headers.get("Content-Length") or 0)
        except ValueError:
            return None

    def _body_can_finish(self) -> bool:
        """Whether what is left of the request body is small enough to discard after the answer."""
        length = self._content_length()
        return self._body is not None and length is not None and length - self._body.consumed <= DISCARD_LIMIT

    def _body_finished(self) -> bool:
        """Whether the request body was read to its end (or its small rest now discarded)."""
        length = self._content_length()
        if self._body is None or length is None:  # chunked (werkzeug's decoder knows if it read the end)
            self._linger = self._body_unread()
            return False
        rest = length - self._body.consumed
        if rest <= 0:
            return True
        if rest > DISCARD_LIMIT:
            self._linger = True
            return False
        try:
            while rest > 0:
                data = self._body.read(min(rest, 65536))
                if not data:
                    return False
                rest -= len(data)
        except OSError:
            return False
        return True

    def _body_unread(self) -> bool:
        """Whether the client may still be sending the request body (nothing is read here)."""
        if self._body is None:  # chunked
            return not getattr(self.environ.get("wsgi.input"), "_done", True)
        length = self._content_length()
        return length is not None and length > self._body.consumed

    def finish(self) -> None:
        super().finish()
        if self._linger:
            self._linger = False
            drain_before_close(self.connection)

    def write_head(self, code: int, message: str, headers: list[tuple[str, str]]) -> None:
        """Write the status line and headers (http.server's way; a server may do it in one piece)."""
        self.send_response(code, message)
        for key, value in headers:
            self.send_header(key, value)
        self.end_headers()

    def build_environ(self) -> Any:
        """The WSGI environ of the request just parsed (werkzeug's; a server may build it faster)."""
        return super().make_environ()

    def run_wsgi(self) -> None:
        if self.headers.get("Expect", "").lower().strip(" \t") == "100-continue":
            self.wfile.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        self.requests_served += 1
        policy = self.keepalive_policy()
        keep = policy.enabled and self._client_allows_keepalive()
        silent_close = policy.max_requests is not None and self.requests_served >= policy.max_requests
        self.environ = environ = self.make_environ()
        state: dict[str, Any] = {"status": None, "headers": None, "sent": False, "chunked": False}

        def write(data: bytes) -> None:
            nonlocal keep
            if not state["sent"]:
                state["sent"] = True
                code_text, _, message = str(state["status"]).partition(" ")
                code = int(code_text)
                headers = state["headers"]
                version = self.request_version if self.protocol_version >= "HTTP/1.1" else "HTTP/1.0"
                state["chunked"], keep, extra = response_framing(
                    code, headers, head_only=environ["REQUEST_METHOD"] == "HEAD", version=version,
                    body_can_finish=self._body_can_finish(), keep=keep)
                self.write_head(code, message, [*headers, *extra])
            if data:
                if state["chunked"]:
                    self.wfile.write(b"%x\r\n" % len(data))
                self.wfile.write(data)
                if state["chunked"]:
                    self.wfile.write(b"\r\n")
            self.wfile.flush()

        def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Callable[..., Any]:
            if exc_info and state["sent"]:
                raise exc_info[1].with_traceback(exc_info[2])
            state["status"], state["headers"] = status, headers
            return write

        def execute(app: Callable[..., Iterable[bytes]]) -> None:
            body = app(environ, start_response)
            try:
                for data in body:
                    write(data)
                if not state["sent"]:
                    write(b"")
                if state["chunked"]:
                    self.wfile.write(b"0\r\n\r\n")
            finally:
                if hasattr(body, "close"):
                    body.close()

        try:
            execute(self.server.app)
        except (ConnectionError, TimeoutError, OSError) as error:
            self.connection_dropped(error, environ)
            keep = False
        except Exception:
            keep = False
            if not state["sent"]:
                state["status"], state["headers"] = "500 Internal Server Error", [("Content-Length", "0")]
                try:
                    write(b"")
                except OSError:
                    pass
        if keep and not silent_close:
            self.close_connection = not self._body_finished()  # discards a small rest, marks a large one
        else:
            self.close_connection = True
            self._linger = self._body_unread()  # drained at the close, within its time bounds
