"""A response's head on the wire, the same from both serving cores (werkzeug's handler and the loop's).

The status line with ``Server`` and ``Date`` first, written as one piece, and the
whole answer to a protocol-level error (a JSON body, ``Connection: close``).
"""

from __future__ import annotations

import email.utils
import time
from http import HTTPStatus

__all__ = ["error_response", "http_date", "response_head"]

_date_header: tuple[int, str] = (0, "")


def http_date() -> str:
    """The ``Date`` header's value, formatted once per second (``email.utils`` is slow for every response)."""
    global _date_header
    second = int(time.time())
    if _date_header[0] != second:
        _date_header = (second, email.utils.formatdate(second, usegmt=True))
    return _date_header[1]


def response_head(protocol: str, code: int, reason: str, server: str, headers: list[tuple[str, str]]) -> bytes:
    """A response's status line and headers, ``Server`` and ``Date`` first, as one piece (both cores')."""
    lines = [f"{protocol} {code} {reason}\r\nServer: {server}\r\nDate: {http_date()}\r\n"]
    lines.extend(f"{key}: {value}\r\n" for key, value in headers)
    lines.append("\r\n")
    return "".join(lines).encode("latin-1")


def error_response(code: int, body: bytes, head_only: bool = False) -> bytes:
    """A protocol-level error's whole response (JSON ``body``, ``Connection: close``), as both cores send it."""
    head = (f"HTTP/1.1 {code} {HTTPStatus(code).phrase}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode("latin-1")
    return head if head_only else head + body
