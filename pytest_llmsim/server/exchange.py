"""One request and its answer, as every route handles them: headers, the log record, the JSON body, errors.

Written once for the generation routes and the routes that generate nothing:
a request's headers (case-insensitive, straight from the environ), its
record in the request log (named by the route template, never the path),
its JSON body (read under the backend's limits), and an error answered in
the shape of the route's API.
"""

from __future__ import annotations

import functools
import time
from typing import Any

from werkzeug.datastructures import Headers
from werkzeug.wrappers import Request, Response

from ..api.base import WireAPI
from ..sim import SimError, fast_json
from ..sim.fault_effects import Filter
from ..sim.request_log import RequestRecord
from ..sim.simulator import Simulator
from ..sim.tokens import TokenizeError
from .environ import ACCEPTED_AT, CONNECTION_ID
from .request_body import read_json_body
from .responses import json_response
from .trusted_headers import TrustedHeaders

__all__ = ["API_KEY", "CREDENTIAL_KEY", "RECORD_KEY", "ROUTE_KEY", "answer_error", "content_filtered", "credential_of",
           "headers_of", "new_record", "read_json", "read_logged_json", "untokenizable"]

ROUTE_KEY = "llmsim.route"  # WSGI environ key: the route template that matched
API_KEY = "llmsim.api"  # WSGI environ key: that route's API (its errors' shape: the table is not asked twice)
RECORD_KEY = "llmsim.record"  # WSGI environ key: the request's log record, once made
# WSGI environ key: the API key a request presented, when the backend checks keys (None: any will do). Files,
# batches, stored and background responses and cached contents belong to the key that made them.
CREDENTIAL_KEY = "llmsim.credential"
UNKNOWN_ROUTE = "unknown"


def credential_of(request: Request) -> str | None:
    """The API key ``request`` presented and the backend accepted (None when it checks no keys)."""
    credential: str | None = request.environ.get(CREDENTIAL_KEY)
    return credential


@functools.lru_cache(maxsize=256)
def _header_name(environ_key: str) -> str:
    """``HTTP_X_REQUEST_ID`` -> ``X-Request-Id`` (a server sees few distinct names)."""
    return (environ_key[5:] if environ_key.startswith("HTTP_") else environ_key).replace("_", "-").title()


@functools.lru_cache(maxsize=256)
def _header_keys(environ_keys: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    """The request headers of an environ with these keys: ``(environ key, header name)`` each, in order.
    A server's environs share a few key sets (the same client sends the same headers), so the ~25 keys
    are looked through once per set, not once per request."""
    return tuple((key, _header_name(key)) for key in environ_keys if key.startswith("HTTP_"))


def headers_of(environ: dict[str, Any]) -> Headers:
    """Request headers, case-insensitive (werkzeug's ``Headers``), straight from the environ."""
    pairs = [(name, environ[key]) for key, name in _header_keys(tuple(environ))]
    for key in ("CONTENT_TYPE", "CONTENT_LENGTH"):
        if environ.get(key):
            pairs.append((_header_name(key), environ[key]))
    return TrustedHeaders(pairs)


def new_record(request: Request) -> RequestRecord:
    """The request's entry in the request log, named by its route template (a client must not be able
    to create a metrics series per URL it makes up)."""
    environ = request.environ
    record = RequestRecord(method=request.method, path=request.path, headers=headers_of(environ),
                           body=None, route=environ.get(ROUTE_KEY, UNKNOWN_ROUTE),
                           arrived=environ.get(ACCEPTED_AT) or time.monotonic(), connection=environ.get(CONNECTION_ID))
    request.environ[RECORD_KEY] = record  # the server names it with the answer's request id
    return record


def read_json(request: Request, simulator: Simulator) -> tuple[Any, bytes]:
    """The parsed body and its bytes, under ``max_body_bytes`` (reads wait at most ``keepalive_timeout``)."""
    config = simulator.config
    request.max_content_length = config.max_body_bytes
    return read_json_body(request.environ, config.max_body_bytes, "max_body_bytes", config.keepalive_timeout)


def read_logged_json(request: Request, simulator: Simulator, record: RequestRecord) -> Any:
    """:func:`read_json`, the body kept in ``record`` (within ``max_log_body_bytes``)."""
    body, data = read_json(request, simulator)
    if isinstance(body, dict) and request.environ.get("CONTENT_TYPE", "").startswith("multipart/form-data"):
        # a form is logged as its fields and, for each file, its name and size
        record.keep_body(body, fast_json.dumps({key: value if isinstance(value, (str, list)) else repr(value)
                                                for key, value in body.items()}), simulator.config.max_log_body_bytes)
        return body
    record.keep_body(body, data, simulator.config.max_log_body_bytes)
    return body


def answer_error(simulator: Simulator, request: Request, api: WireAPI, error: SimError,
                 record: RequestRecord | None = None) -> Response:
    """Answer ``error`` in ``api``'s shape, logged and accounted in ``record`` (without one: a new one,
    for a request under ``/v1/``)."""
    status, body, headers = api.render_error(error)
    if record is None and request.path.startswith("/v1/"):
        record = new_record(request)
    if record is not None:
        record.status = status
        record.error = error.fields()
        record.retry_after = told_retry_after(headers)
        simulator.finish(record)
    return json_response(body, status, headers)


def told_retry_after(headers: dict[str, str] | None) -> float | None:
    """The wall seconds an error answer's headers tell the client to wait (``retry-after-ms``, else
    ``Retry-After`` in seconds), for the verdicts on the client; None: not told."""
    for name, value in (headers or {}).items():
        if name.lower() == "retry-after-ms":
            return _seconds(value, 1000.0)
    for name, value in (headers or {}).items():
        if name.lower() == "retry-after":
            return _seconds(value, 1.0)
    return None


def _seconds(text: str, per_second: float) -> float | None:
    try:
        return float(text) / per_second
    except ValueError:
        return None  # an HTTP date: not one this server sends


def untokenizable(error: TokenizeError, param: str | None) -> SimError:
    """A text tiktoken cannot take: the client's input, a 400 naming the field."""
    return SimError(400, f"The request's text cannot be tokenized: {error}", param=param, code="invalid_text")


def content_filtered(api: WireAPI, action: Filter) -> tuple[int, str]:
    """After how many tokens a content filter stops ``api``'s answer, and its finish reason (a blocked
    prompt: 0, ``prompt_filter``); raises the error the API answers with instead, or a 400 where the API
    has no content filter."""
    error = api.content_filter(action.message, action.after_tokens is None)
    if error is not None:
        raise error
    return (0, "prompt_filter") if action.after_tokens is None else (action.after_tokens, "content_filter")
