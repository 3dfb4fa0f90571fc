"""One request as a connection's parser delivers it: its head, then its body, read on demand.

The body is the application's ``wsgi.input``: it asks the connection to receive more only when the
application reads past what has arrived, within the body's deadline.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Protocol

from .keepalive import DISCARD_LIMIT

__all__ = ["CODING", "HOST", "LENGTH", "METHODS", "NAMES", "OTHER", "BodySource", "Refused", "RequestBody",
           "RequestMessage", "header_name", "method_name"]

# What a header name means to the framing of a request: the three that decide it, and the rest.
OTHER, LENGTH, CODING, HOST = 0, 1, 2, 3
_FRAMING = {"content-length": LENGTH, "transfer-encoding": CODING, "host": HOST}

# A server sees few distinct header names and methods: their text, decoded once. Bounded (emptied when full).
NAMES: dict[bytes, tuple[str, int]] = {}
METHODS: dict[bytes, str] = {}
MAX_REMEMBERED = 1024


def header_name(raw: bytes) -> tuple[str, int]:
    """``raw`` (a header name) as text, with what it means to the framing (``LENGTH``, ``CODING``,
    ``HOST`` or ``OTHER``), remembered."""
    if len(NAMES) >= MAX_REMEMBERED:
        NAMES.clear()
    name = raw.decode("iso-8859-1")
    known = NAMES[raw] = (name, _FRAMING.get(name.lower(), OTHER))
    return known


def method_name(raw: bytes) -> str:
    """``raw`` (a request method) as text, remembered."""
    if len(METHODS) >= MAX_REMEMBERED:
        METHODS.clear()
    method = METHODS[raw] = raw.decode("ascii", "replace")
    return method


class BodySource(Protocol):
    """What a body reads from (:class:`~.connection.Connection`)."""

    body_error: str | None

    def fill(self, deadline: float | None) -> bool:
        """Receive and parse once, waiting at most until ``deadline``; False at the end of input."""


class Refused(Exception):
    """A request head the server will not take (stops the parser); the answer is ``status``, ``message``."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


class RequestMessage:
    """One request as the parser delivers it: its head, then its body's pieces as they arrive."""

    __slots__ = ("body_deadline", "codings", "complete", "consumed", "early", "has_body", "headers", "hosts", "length",
                 "lengths", "method", "parts", "problem", "received_at", "target", "upgrade", "version")

    def __init__(self, received_at: float | None, early: bool) -> None:
        self.received_at = received_at
        self.early = early  # pipelined behind an earlier request: it arrives when it is taken
        self.target = bytearray()
        self.headers: list[tuple[str, str]] = []
        # The framing headers' values as they came, gathered by the parser's header callback.
        self.lengths: tuple[str, ...] = ()
        self.codings: tuple[str, ...] = ()
        self.hosts = 0
        self.method = self.version = ""
        self.parts: deque[bytes] = deque()
        self.complete = False
        self.has_body = False
        self.length: int | None = None
        self.consumed = 0
        self.body_deadline: float | None = None
        self.problem: Refused | None = None
        self.upgrade = b""  # the bytes after a request that asked to upgrade (the new protocol's)

    def can_finish(self) -> bool:
        """Whether what is left of the body is small enough to read and drop after the answer."""
        return self.complete or (self.length is not None and self.length - self.consumed <= DISCARD_LIMIT)


class RequestBody:
    """``wsgi.input``: the request's body as the parser decodes it, read from the socket on demand.

    A read past the body's deadline (or after the client stopped sending) ends short; the
    application answers 408 for that (``BODY_DEADLINE``). A plain class with the stream methods WSGI
    and werkzeug call (an ``io`` object per request cost more than its body usually weighs).
    """

    __slots__ = ("_connection", "_message")

    def __init__(self, connection: BodySource, message: RequestMessage) -> None:
        self._connection = connection
        self._message = message

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[:len(data)] = data
        return len(data)

    def readline(self, size: int | None = -1) -> bytes:
        """Up to the next newline (WSGI's ``readline``; nothing here reads bodies by lines)."""
        line = bytearray()
        while size is None or size < 0 or len(line) < size:
            piece = self.read(1)
            if not piece:
                break
            line += piece
            if piece == b"\n":
                break
        return bytes(line)

    def __iter__(self) -> Any:
        return iter(self.readline, b"")

    def read(self, size: int | None = -1) -> bytes:
        message = self._message
        while not message.parts and not message.complete:
            if not self._connection.fill(message.body_deadline):
                break
        if self._connection.body_error is not None:  # bad chunking: the application answers 400
            raise OSError(self._connection.body_error)
        parts = message.parts
        if size is None or size < 0:
            data = b"".join(parts)
            parts.clear()
        elif not parts:
            return b""
        else:
            data = parts.popleft()
            if len(data) > size:
                data, rest = data[:size], data[size:]
                parts.appendleft(rest)
        message.consumed += len(data)
        return data
