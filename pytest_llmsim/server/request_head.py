"""What RFC 9110 and RFC 9112 say to refuse in a request's line and framing, for every serving mode.

Each check returns why a head is refused (answered 400 and closed, before the
request is logged or routed), or None. The threaded server and the loop core
both ask them, so a malformed head gets the same answer whoever frames it.
"""

from __future__ import annotations

import re
import urllib.parse

__all__ = ["HeadRefused", "content_length_problem", "method_problem", "split_request_line", "target_problem"]

_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+\Z")  # RFC 9110 §5.6.2: a method is a token
_MAX_LENGTH_DIGITS = 19  # a length past 2**63 is no body this server would take


class HeadRefused(Exception):
    """A request head refused: the status to answer and why."""

    def __init__(self, status: int, why: str) -> None:
        super().__init__(why)
        self.status, self.why = status, why


def split_request_line(line: str) -> tuple[str, str, str | None]:
    """``(method, target, version)`` of a request line (RFC 9112 §3: one space apart; the version None for
    HTTP/0.9's ``GET target``), as ``http.server`` splits it, with the checks below; raises
    :class:`HeadRefused` (400, or 505 for HTTP/2 and later)."""
    words = line.split()
    if not words:
        raise HeadRefused(400, "Bad request line (empty)")
    if len(words) >= 2 and "" in line.split(" "):
        raise HeadRefused(400, f"Bad request line ({line[:100]!r}): one space apart")
    version = None
    if len(words) >= 3:
        version = words[-1]
        numbers = version[5:].split(".") if version.startswith("HTTP/") else []
        if len(numbers) != 2 or not all(n.isdigit() and len(n) <= 10 for n in numbers):
            raise HeadRefused(400, f"Bad request version ({version!r})")
        if (int(numbers[0]), int(numbers[1])) >= (2, 0):
            raise HeadRefused(505, f"Invalid HTTP version ({version[5:]})")
    if not 2 <= len(words) <= 3 or (len(words) == 2 and words[0] != "GET"):
        raise HeadRefused(400, f"Bad request syntax ({line!r})")
    method, target = words[0], words[1]
    refused = method_problem(method) or target_problem(method, target)
    if refused is not None:
        raise HeadRefused(400, refused)
    return method, target, version


def method_problem(method: str) -> str | None:
    """A method that is not a token (a control character, a space): it would reach the log and the trace."""
    if _TOKEN.match(method):
        return None
    return f"Bad request method ({method[:40]!r}: not a token)"


def target_problem(method: str, target: str) -> str | None:
    """A request target this server cannot serve: CONNECT's authority form (this is no proxy), or an
    absolute form whose authority does not parse (an empty host, a port past 65535, an unclosed ``[``)."""
    if method == "CONNECT":
        return f"CONNECT is not served ({target[:100]!r}): this server is not a proxy"
    if target.startswith("/") or target == "*":
        return None
    try:
        parts = urllib.parse.urlsplit(target)
        port = parts.port  # raises for one out of range or not a number
    except ValueError as error:
        return f"Bad request target ({target[:100]!r}: {error})"
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        return f"Bad request target ({target[:100]!r}: an absolute target needs http(s) and a host)"
    if port == 0:
        return f"Bad request target ({target[:100]!r}: port 0)"
    return None


def content_length_problem(values: list[str]) -> str | None:
    """``Content-Length`` given more than once, or not a plain decimal (``+5``, ``5x``, ``5, 5``): RFC 9112
    §6.3 makes the framing unknowable, so the request is refused and its connection closed."""
    if len(values) > 1:
        return f"Content-Length given {len(values)} times"
    if values:
        value = values[0].strip()
        if not (value.isdigit() and value.isascii() and len(value) <= _MAX_LENGTH_DIGITS):
            return f"Bad Content-Length ({values[0][:40]!r})"
    return None
