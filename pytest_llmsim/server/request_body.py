"""Reading a request's body: sized or chunked, bounded in size (also after a Content-Encoding), and on time.

Straight from ``wsgi.input`` (werkzeug's stream wrappers cost ~4 % of a small
request). The server gives each body a deadline (``keepalive_timeout`` after
its head, ``BODY_DEADLINE`` in the environ): a client that stops sending
mid-body has its socket's reading side shut at the deadline, and the read
here ends as :class:`BodyTimeout`, a 408, instead of holding a handler for good.
"""

from __future__ import annotations

import io
import time
from typing import Any

from werkzeug.exceptions import BadRequest, RequestEntityTooLarge
from werkzeug.formparser import parse_form_data

from ..api.validation import MAX_JSON_DEPTH, json_depth_exceeds, lone_surrogate
from ..sim import SimError, fast_json
from .compression import UnsupportedCoding, decode_body
from .environ import BODY_DEADLINE

__all__ = ["BodyTimeout", "FormFile", "read_body", "read_json_body"]


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
        if data is None:
            data = _read_terminated_body(environ, limit)
    except (BadRequest, OSError, ValueError):
        if _past_body_deadline(environ):
            raise BodyTimeout() from None
        raise
    coding = environ.get("HTTP_CONTENT_ENCODING")
    if coding is None or data is None:
        return data
    try:  # the limit holds for what the body decodes to, too
        return decode_body(data, coding, limit)
    except OverflowError:
        raise RequestEntityTooLarge() from None


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


def read_json_body(environ: dict[str, Any], limit: int, limit_name: str, timeout: float,
                   empty: Any = ...) -> tuple[Any, bytes]:
    """The parsed JSON body and its bytes, or a :class:`SimError` saying what is wrong with it.

    The one JSON reader of every route (the APIs' and the control API's): a
    body over ``limit`` bytes is a 413 naming ``limit_name``, one that stopped
    arriving a 408 (after ``timeout`` s), unreadable or bad chunking a 400,
    then invalid JSON, JSON nested past :data:`MAX_JSON_DEPTH` and strings with
    a lone surrogate (nothing that echoes them could be encoded) 400s.
    ``empty``, when given, is the body an empty request stands for.
    """
    try:
        data = read_body(environ, limit)
        if data is None:  # no length and not chunked: an empty body
            data = b""
    except BodyTimeout:
        raise SimError(408, f"The request body did not arrive within {timeout:g} s of its head "
                            f"(keepalive_timeout).", code="request_timeout", headers={"Connection": "close"}) from None
    except RequestEntityTooLarge:
        raise SimError(413, f"Request body too large: the limit is {limit} bytes ({limit_name}).",
                       code="request_too_large") from None
    except UnsupportedCoding as error:
        raise SimError(415, f"Content-Encoding {error} is not supported: send the body as is, or in gzip, "
                            f"deflate or br.", code="unsupported_content_encoding",
                       headers={"Accept-Encoding": "gzip, deflate, br"}) from None
    except (BadRequest, OSError, ValueError) as error:  # short body, bad chunking
        raise SimError(400, f"The request body could not be read: {error}", code="invalid_body") from None
    if not data and empty is not ...:
        return empty, data
    content_type = environ.get("CONTENT_TYPE", "")
    if content_type.startswith("multipart/form-data"):
        return _form(data, content_type, limit), data
    try:
        body = fast_json.loads(data)
    except (ValueError, RecursionError):
        raise SimError(400, "We could not parse the JSON body of your request. The API expects "
                            "a JSON payload, but what was sent was not valid JSON.", code="invalid_json") from None
    if json_depth_exceeds(data):
        raise SimError(400, f"The JSON body of your request is nested too deeply "
                            f"(more than {MAX_JSON_DEPTH} levels of objects and arrays).", code="invalid_json")
    where = lone_surrogate(data, body)
    if where is not None:
        raise SimError(400, f"Invalid '{where}': the string contains a lone surrogate (an unpaired "
                            f"\\ud800-\\udfff escape), which is not valid Unicode.", param=where,
                       code="invalid_value")
    return body, data


class FormFile:
    """A file of a multipart body (an API's upload: an image to edit, audio to transcribe)."""

    __slots__ = ("content_type", "data", "filename")

    def __init__(self, filename: str | None, content_type: str | None, data: bytes) -> None:
        self.filename = filename
        self.content_type = content_type
        self.data = data

    def read(self) -> bytes:
        return self.data

    def __repr__(self) -> str:  # what the request log shows of it
        return f"<file {self.filename!r}, {len(self.data)} bytes>"


def _form(data: bytes, content_type: str, limit: int) -> dict[str, Any]:
    """A multipart body as the APIs read a JSON one: each field its text (a field given more than once, or
    named ``name[]``, a list of them), each file a :class:`FormFile`."""
    environ = {"wsgi.input": io.BytesIO(data), "CONTENT_LENGTH": str(len(data)), "CONTENT_TYPE": content_type,
               "REQUEST_METHOD": "POST"}
    try:
        _, form, files = parse_form_data(environ, max_content_length=limit, silent=False)
    except (BadRequest, ValueError) as error:
        raise SimError(400, f"The multipart body could not be read: {error}", code="invalid_body") from None
    body: dict[str, Any] = {}
    for name in form:
        values = form.getlist(name)
        key = name[:-2] if name.endswith("[]") else name
        body[key] = values if name.endswith("[]") or len(values) > 1 else values[0]
    for name in files:
        read = []
        for upload in files.getlist(name):
            try:
                read.append(FormFile(upload.filename, upload.mimetype or None, upload.read()))
            finally:
                upload.close()  # a large file is spooled to a temporary file: never left for the collector
        key = name[:-2] if name.endswith("[]") else name
        body[key] = read if name.endswith("[]") or len(read) > 1 else read[0]
    return body
