"""Reading a request's body: sized or chunked, bounded in size, and on time.

Straight from ``wsgi.input`` (werkzeug's stream wrappers cost ~4 % of a small
request). The server gives each body a deadline (``keepalive_timeout`` after
its head, ``BODY_DEADLINE`` in the environ): a client that stops sending
mid-body has its socket's reading side shut at the deadline, and the read
here ends as :class:`BodyTimeout`, a 408, instead of holding a handler for good.
"""

from __future__ import annotations

import time
from typing import Any

from werkzeug.exceptions import BadRequest, RequestEntityTooLarge

from .wsgi import BODY_DEADLINE

__all__ = ["BodyTimeout", "read_body"]


def _read_sized_body(environ: dict[str, Any], limit: int) -> bytes | None:
    """A body with a ``Content-Length``, read straight from ``wsgi.input`` (None: use werkzeug's stream).

    The usual request, without werkzeug's stream wrappers (about 4 % of a
    non-streamed request); raises as werkzeug's would for a body over
    ``limit`` (413) or one shorter than its length (400).
    """
    length = environ.get("CONTENT_LENGTH")
    if not length or not length.isdigit() or environ.get("wsgi.input_terminated"):
        return None
    size = int(length)
    if size > limit:
        raise RequestEntityTooLarge()
    stream = environ["wsgi.input"]
    data = stream.read(size) if size else b""
    while len(data) < size:  # a raw stream may return part of what was asked
        more = stream.read(size - len(data))
        if not more:
            raise BadRequest(f"the body ended after {len(data)} of its {size} bytes")
        data += more
    return data


class BodyTimeout(Exception):
    """The request body did not arrive by its deadline (``keepalive_timeout`` after the head): a 408."""


def _past_body_deadline(environ: dict[str, Any]) -> bool:
    deadline = environ.get(BODY_DEADLINE)
    return deadline is not None and time.monotonic() >= deadline


def read_body(environ: dict[str, Any], limit: int) -> bytes | None:
    """The request body (sized or chunked), or None for neither (werkzeug's stream: an empty body).

    Raises :class:`BodyTimeout` when the body stopped arriving and its deadline passed (the
    server shut the socket's reading side), else as :func:`_read_sized_body` and
    :func:`_read_terminated_body` do.
    """
    try:
        data = _read_sized_body(environ, limit)
        return data if data is not None else _read_terminated_body(environ, limit)
    except (BadRequest, OSError, ValueError):
        if _past_body_deadline(environ):
            raise BodyTimeout() from None
        raise


def _read_terminated_body(environ: dict[str, Any], limit: int) -> bytes | None:
    """A body the server delimits itself (chunked: ``wsgi.input_terminated``), read to its end; None for others.

    It has no length to refuse up front, so it is read up to ``limit`` + 1
    bytes: over ``limit`` is a 413 as for a sized body (werkzeug's stream
    stops at the limit and returns what it has, which then parsed as
    truncated JSON). A malformed chunk raises ``OSError`` (werkzeug's), a 400.
    """
    if not environ.get("wsgi.input_terminated"):
        return None
    stream = environ["wsgi.input"]
    parts: list[bytes] = []
    size = 0
    while size <= limit:
        part = stream.read(min(65536, limit + 1 - size))
        if not part:
            return b"".join(parts)
        parts.append(part)
        size += len(part)
    raise RequestEntityTooLarge()
