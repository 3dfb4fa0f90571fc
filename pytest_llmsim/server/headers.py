"""An HTTP/1.1 request's header block, parsed by RFC 9112 without the ``email`` parser."""

from __future__ import annotations

import http.client
from typing import Any

__all__ = ["BadHeader", "ParsedHeaders", "read_headers"]

_MAX_LINE = 65536  # http.client's limits
_MAX_HEADERS = 100


class ParsedHeaders(http.client.HTTPMessage):
    """An ``HTTPMessage`` whose ``get`` and ``items`` skip the ``email`` policy's pass over each value.

    That pass (``Compat32.header_fetch_parse``) only changes values with
    surrogates, and values decoded from Latin-1 have none: same answers, at a
    third of the cost of a request's three lookups and its environ. ``get``
    reads an index of the block's lower-cased names built while it was parsed
    (a server reads five or six names per request, each a pass over every
    header before: an SDK sends 17); a block changed after parsing (no server
    path changes one) is read by a pass again.
    """

    def __init__(self) -> None:
        super().__init__()
        self.first_values: dict[str, str] = {}  # lower-cased name -> its first value, as get() answers
        self.repeated: list[str] = []  # lower-cased names met again after their first line
        self.indexed: tuple[list[tuple[str, str]], int] | None = None  # the lines the two above cover, and how many

    def _index_current(self) -> bool:
        """Whether the index covers the lines as they are: ``email``'s setters append to the list, its
        deleters replace it, and ``replace_header`` (which changes a line in place) drops the index."""
        lines = self._headers  # type: ignore[attr-defined]  # email.message.Message's storage
        return self.indexed is not None and self.indexed[0] is lines and self.indexed[1] == len(lines)

    def get(self, name: str, failobj: Any = None) -> Any:
        wanted = name.lower()
        if self._index_current():
            return self.first_values.get(wanted, failobj)
        for key, value in self._headers:  # type: ignore[attr-defined]
            if key.lower() == wanted:
                return value
        return failobj

    def count(self, name: str) -> int:
        """How many lines name ``name`` (any case)."""
        wanted = name.lower()
        if self._index_current():
            return int(wanted in self.first_values) + self.repeated.count(wanted)
        lines: list[tuple[str, str]] = self._headers  # type: ignore[attr-defined]
        return sum(1 for key, _ in lines if key.lower() == wanted)

    def replace_header(self, _name: str, _value: Any) -> None:
        self.indexed = None
        super().replace_header(_name, _value)

    def items(self) -> list[tuple[str, str]]:
        return list(self._headers)  # type: ignore[attr-defined]


def read_headers(rfile: Any) -> ParsedHeaders:
    """The header block as an ``HTTPMessage``, without the ``email`` parser."""
    message = ParsedHeaders()
    lines: list[tuple[str, str]] = message._headers  # type: ignore[attr-defined]
    first, repeated = message.first_values, message.repeated
    count = 0
    while True:
        line = rfile.readline(_MAX_LINE + 1)
        if len(line) > _MAX_LINE:
            raise http.client.LineTooLong("header line")
        if line in (b"\r\n", b"\n", b""):
            message.indexed = (lines, count)
            return message
        count += 1
        if count > _MAX_HEADERS:
            raise http.client.HTTPException(f"got more than {_MAX_HEADERS} headers")
        name, colon, value = line.decode("iso-8859-1").partition(":")
        # RFC 9112 §5: a field name is a token right before its colon; no folded lines (§5.2);
        # no NUL or bare CR in a value (RFC 9110 §5.5). Each is a 400, never a guess.
        if not colon or not name or name != name.strip() or name[0] in " \t":
            raise BadHeader(f"invalid header line {line[:80]!r}")
        value = value.strip(" \t\r\n")
        if "\x00" in value or "\r" in value or "\n" in value:
            raise BadHeader(f"invalid character in the value of header {name!r}")
        lines.append((name, value))  # what ``message[name] = value`` stores, without the policy
        lowered = name.lower()
        if lowered in first:
            repeated.append(lowered)
        else:
            first[lowered] = value


class BadHeader(http.client.HTTPException):
    """A header line that RFC 9112 says to refuse."""


