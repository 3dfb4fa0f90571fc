"""What RFC 9110 and RFC 9112 say to refuse in a request's line and framing, for every serving mode.

Each check returns why a head is refused (answered 400 and closed, before the
request is logged or routed), or None; :class:`~.connection.Connection` asks
them once its parser has the head.
"""

from __future__ import annotations

import re
import urllib.parse

__all__ = ["content_length_problem", "method_problem", "target_problem", "transfer_coding_problem"]

_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+\Z")  # RFC 9110 §5.6.2: a method is a token
_MAX_LENGTH_DIGITS = 19  # a length past 2**63 is no body this server would take


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
