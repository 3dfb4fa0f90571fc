"""A response's head on the wire, the same in every serving mode.

The status line with ``Server`` and ``Date`` first, written as one piece, and the
whole answer to a protocol-level error (a JSON body, ``Connection: close``).
"""

from __future__ import annotations

import email.utils
import time
from http import HTTPStatus

__all__ = ["HTTP_ERROR_CODES", "error_response", "http_date", "response_head"]

# The error code in an HTTP-level error's body, by status (bad_request for the others)
HTTP_ERROR_CODES = {
    400: "bad_request", 408: "request_timeout", 414: "uri_too_long", 431: "request_header_fields_too_large",
    501: "not_implemented", 503: "service_unavailable", 505: "http_version_not_supported",
}

_date_header: tuple[int, str] = (0, "")


def http_date() -> str:
    """The ``Date`` header's value, formatted once per second (``email.utils`` is slow for every response)."""
    global _date_header
    second = int(time.time())
    if _date_header[0] != second:
        _date_header = (second, email.utils.formatdate(second, usegmt=True))
    return _date_header[1]


def response_head(protocol: str, code: int, reason: str, server: str, headers: list[tuple[str, str]]) -> bytes:
    """A response's status line and headers, ``Server`` and ``Date`` first, as one piece."""
    head = f"{protocol} {code} {reason}\r\nServer: {server}\r\nDate: {http_date()}\r\n"
    return (head + "".join([f"{key}: {value}\r\n" for key, value in headers]) + "\r\n").encode("latin-1")


def error_response(code: int, body: bytes, head_only: bool = False) -> bytes:
    """A protocol-level error's whole response (JSON ``body``, ``Connection: close``)."""
    head = (f"HTTP/1.1 {code} {HTTPStatus(code).phrase}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode("latin-1")
    return head if head_only else head + body
