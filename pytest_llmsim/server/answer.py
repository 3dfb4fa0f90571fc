"""One response on the wire: the WSGI ``start_response`` and ``write`` of every serving mode.

The head goes out with the first write, as one piece with the status line,
``Server`` and ``Date``; a body without a length is framed as HTTP/1.1 chunks
(or ends with the connection, for HTTP/1.0). Whether the connection stays
open is decided by ``keepalive.response_framing``: the client's wish, the
application's ``Connection: close``, a body too large to drop unread.
"""

from __future__ import annotations

import importlib.metadata
import platform
from collections.abc import Callable, Iterable
from typing import Any

from .keepalive import response_framing
from .response_head import response_head
from .sockets import CoalescingWriter

__all__ = ["SERVER_HEADER", "Answer"]

# What werkzeug's development server said (clients and tests have seen it since the first release).
SERVER_HEADER = f"Werkzeug/{importlib.metadata.version('werkzeug')} Python/{platform.python_version()}"


class Answer:
    """One response on the wire: the head with the first write, chunked framing when it has no length."""

    __slots__ = ("_body_can_finish", "_head_only", "_identity", "_version", "_writer", "chunked", "headers", "keep",
                 "sent", "status", "upgraded")

    def __init__(self, writer: CoalescingWriter, head_only: bool, version: str,
                 body_can_finish: Callable[[], bool], keep: bool,
                 identity: tuple[tuple[str, str], ...] = ()) -> None:
        self._writer = writer
        self._identity = identity  # headers every answer of this server carries (pod_identity)
        self._head_only = head_only
        self._version = version
        self._body_can_finish = body_can_finish
        self.status = ""
        self.headers: list[tuple[str, str]] = []
        self.sent = self.chunked = False
        self.keep = keep  # False: the head says Connection: close
        self.upgraded = False  # the connection switched protocols: nothing more of HTTP goes out

    def switched(self) -> None:
        """The application accepted an upgrade and wrote its 101 itself: this answer writes nothing."""
        self.upgraded = self.sent = True
        self.keep = False

    def start_response(self, status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Callable[..., Any]:
        if exc_info and self.sent:
            raise exc_info[1].with_traceback(exc_info[2])
        self.status, self.headers = status, headers
        return self.write

    def _head(self) -> bytes:
        self.sent = True
        code_text, _, reason = self.status.partition(" ")
        code = int(code_text)
        self.chunked, self.keep, extra = response_framing(
            code, self.headers, head_only=self._head_only, version=self._version,
            body_can_finish=self._body_can_finish(), keep=self.keep)
        return response_head("HTTP/1.1", code, reason, SERVER_HEADER, [*self.headers, *extra, *self._identity])

    def write(self, data: bytes, flush: bool = True) -> None:
        writer = self._writer
        if not self.sent:
            writer.write(self._head())
        if data:
            writer.write(b"%x\r\n%s\r\n" % (len(data), data) if self.chunked else data)
        if flush:
            writer.flush()

    def run(self, app: Callable[..., Iterable[bytes]], environ: dict[str, Any]) -> None:
        """Call ``app`` and write what it returns: a list at once, an iterator piece by piece."""
        body = app(environ, self.start_response)
        try:
            if self.upgraded:
                return
            if isinstance(body, (list, tuple)):
                for data in body:
                    self.write(data, flush=False)
                if not self.sent:
                    self.write(b"", flush=False)
            else:
                for data in body:
                    self.write(data)  # each piece now: a stream's `yield b""` sends the head on admission
                if not self.sent:
                    self.write(b"", flush=False)
            if self.chunked:
                self._writer.write(b"0\r\n\r\n")  # sends what is held with it
            self._writer.flush()
        finally:
            close = getattr(body, "close", None)
            if close is not None:
                close()

    def fail(self) -> None:
        """The application raised: a bare 500 if nothing went out yet."""
        if not self.sent:
            self.status, self.headers = "500 Internal Server Error", [("Content-Length", "0")]
            try:
                self.write(b"")
            except OSError:
                pass
