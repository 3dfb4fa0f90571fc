"""One request as a connection's parser delivers it: its head, then its body, read on demand.

The body is the application's ``wsgi.input``: it asks the connection to receive more only when the
application reads past what has arrived, within the body's deadline.
"""

from __future__ import annotations

import io
from collections import deque
from typing import Any, Protocol

__all__ = ["BodySource", "Refused", "RequestBody", "RequestMessage"]


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

    __slots__ = ("body_deadline", "complete", "consumed", "early", "has_body", "headers", "length", "method",
                 "parts", "problem", "received_at", "target", "upgrade", "version")

    def __init__(self, received_at: float | None, early: bool) -> None:
        self.received_at = received_at
        self.early = early  # pipelined behind an earlier request: it arrives when it is taken
        self.target = bytearray()
        self.headers: list[tuple[str, str]] = []
        self.method = self.version = ""
        self.parts: deque[bytes] = deque()
        self.complete = False
        self.has_body = False
        self.length: int | None = None
        self.consumed = 0
        self.body_deadline: float | None = None
        self.problem: Refused | None = None
        self.upgrade = b""  # the bytes after a request that asked to upgrade (the new protocol's)


class RequestBody(io.RawIOBase):
    """``wsgi.input``: the request's body as the parser decodes it, read from the socket on demand.

    A read past the body's deadline (or after the client stopped sending) ends short; the
    application answers 408 for that (``BODY_DEADLINE``).
    """

    def __init__(self, connection: BodySource, message: RequestMessage) -> None:
        super().__init__()
        self._connection = connection
        self._message = message

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[:len(data)] = data
        return len(data)

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
