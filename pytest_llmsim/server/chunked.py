"""Request bodies in ``Transfer-Encoding: chunked``, read as RFC 9112 §7.1 says.

werkzeug's development decoder refuses what the RFC allows (chunk extensions,
trailer fields) and takes what it forbids (``0x10``, ``+5`` and ``1_0`` are
Python integers, not HEXDIG). This one takes a chunk size of hex digits with
optional extensions, the chunk's data and its CRLF, then the last chunk and
any trailer fields (read and dropped: nothing here acts on them), and raises
``OSError`` naming what is wrong, which the server answers 400.
"""

from __future__ import annotations

import io
import re
from typing import IO, Any

__all__ = ["ChunkedBody", "transfer_coding_problem"]

MAX_SIZE_LINE = 8192  # a chunk-size line with its extensions
MAX_TRAILERS = 100
MAX_SIZE_DIGITS = 16  # 64 bits of hex: no chunk is larger than a body may be anyway

_TOKEN = r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+"
_QUOTED = r'"(?:[^"\\\r\n]|\\.)*"'
# chunk-size [ chunk-ext ] CRLF; chunk-ext = *( BWS ";" BWS ext-name [ BWS "=" BWS ext-val ] )
_SIZE_LINE = re.compile(rf"([0-9A-Fa-f]{{1,{MAX_SIZE_DIGITS}}})((?:[ \t]*;[ \t]*{_TOKEN}"
                        rf"(?:[ \t]*=[ \t]*(?:{_TOKEN}|{_QUOTED}))?)*)[ \t]*\r?\n\Z")
_FIELD_LINE = re.compile(rf"{_TOKEN}:[ \t]*[^\x00\r\n]*\r?\n\Z")


def transfer_coding_problem(values: list[str]) -> tuple[int, str] | None:
    """``(status, why)`` when a request's ``Transfer-Encoding`` cannot be served, else None.

    RFC 9112 §6.1 and §6.3: the final coding must be ``chunked``, applied once (else 400); any
    other coding (``gzip, chunked``) is one this server does not decode (501).
    """
    codings = [coding.strip().lower() for value in values for coding in value.split(",") if coding.strip()]
    if not codings or codings[-1] != "chunked" or codings.count("chunked") > 1:
        return 400, f"Transfer-Encoding {', '.join(codings) or '(empty)'!r} does not end in a single 'chunked'"
    if len(codings) > 1:
        return 501, f"Transfer-Encoding {', '.join(codings[:-1])!r} is not supported (only chunked)"
    return None


class ChunkedBody(io.RawIOBase):
    """The decoded bytes of a chunked request body; ``_done`` once its last chunk and trailers are read."""

    def __init__(self, rfile: IO[bytes] | io.BufferedIOBase) -> None:
        super().__init__()
        self._rfile = rfile
        self._done = False  # the keep-alive handler reads it: is the body read to its end?
        self._left = 0  # bytes of the current chunk not read yet

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        read = 0
        while read < len(view) and not self._done:
            if self._left == 0:
                self._left = self._size_line()
                if self._left == 0:
                    self._trailers()
                    self._done = True
                    break
            data = self._rfile.read(min(self._left, len(view) - read))
            if not data:
                raise OSError("the body ended inside a chunk")
            view[read:read + len(data)] = data
            read += len(data)
            self._left -= len(data)
            if self._left == 0 and self._rfile.read(2) != b"\r\n":
                raise OSError("a chunk's data is not followed by CRLF")
        return read

    def _size_line(self) -> int:
        line = self._rfile.readline(MAX_SIZE_LINE + 1)
        if not line:
            raise OSError("the body ended before its last chunk")
        if len(line) > MAX_SIZE_LINE:
            raise OSError(f"a chunk-size line is longer than {MAX_SIZE_LINE} bytes")
        match = _SIZE_LINE.match(line.decode("latin-1"))
        if match is None:
            raise OSError(f"invalid chunk-size line {line[:80]!r} (hex digits, then optional ;extensions)")
        return int(match.group(1), 16)

    def _trailers(self) -> None:
        for _ in range(MAX_TRAILERS + 1):
            line = self._rfile.readline(MAX_SIZE_LINE + 1)
            if line in (b"\r\n", b"\n"):
                return
            if not line:
                raise OSError("the body ended inside its trailer section")
            if len(line) > MAX_SIZE_LINE or _FIELD_LINE.match(line.decode("latin-1")) is None:
                raise OSError(f"invalid trailer field {line[:80]!r}")
        raise OSError(f"more than {MAX_TRAILERS} trailer fields")
