"""``llmsim replay --mode exact``: a cassette's answers, byte for byte, at their recorded times (scaled by ``speed``).

A request is matched to a recorded exchange by its method, path, query and JSON body, credentials set aside
(both sides redacted alike): the first recorded exchange of that request not yet played, then the last one again
once all were. Each chunk is sent at its recorded time after the request arrived, divided by ``speed``. A request
nothing in the cassette matches is answered 404 with what it was (``llmsim_unmatched``), so a test sees what it
asked that was never recorded.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from werkzeug.wrappers import Request, Response

from . import sessions
from .cassette import Exchange
from .redaction import redact_body, redact_query

__all__ = ["ReplayApp", "exchange_key", "plan"]


def exchange_key(method: str, path: str, query: str, body: bytes) -> str:
    """What matches a request to a recorded exchange: method, path, query and JSON body, credentials set aside."""
    try:
        parsed = json.loads(body) if body else None
        canonical = json.dumps(redact_body(parsed), sort_keys=True, separators=(",", ":")) if parsed is not None else ""
    except ValueError:
        canonical = hashlib.sha256(body).hexdigest()
    return f"{method} {path}?{redact_query(query)} {canonical}"


def plan(exchange: Exchange, speed: float = 1.0) -> list[tuple[float, bytes]]:
    """When each chunk of ``exchange`` is sent, in seconds after the request arrived, at ``speed``."""
    return [(chunk.at / speed, chunk.data) for chunk in exchange.chunks]


class ReplayApp:
    """A WSGI app answering from recorded exchanges (see the module's text)."""

    def __init__(self, exchanges: Sequence[Exchange], speed: float = 1.0) -> None:
        if speed <= 0:
            raise ValueError("speed must be positive")
        self.speed = speed
        self._lock = threading.Lock()
        self._by_key: dict[str, list[Exchange]] = {}
        for exchange in exchanges:
            key = exchange_key(exchange.method, exchange.path, exchange.query, exchange.body)
            self._by_key.setdefault(key, []).append(exchange)
        self._played: dict[str, int] = {}
        self.unmatched: list[str] = []

    def find(self, method: str, path: str, query: str, body: bytes) -> Exchange | None:
        """The recorded exchange that answers this request (the next not played, then the last), or None."""
        return self._next(exchange_key(method, path, query, body), remember_miss=False)

    def _next(self, key: str, remember_miss: bool = True) -> Exchange | None:
        with self._lock:
            recorded = self._by_key.get(key)
            if not recorded:
                if remember_miss:
                    self.unmatched.append(key)
                return None
            index = self._played.get(key, 0)
            self._played[key] = index + 1
            return recorded[min(index, len(recorded) - 1)]

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        arrived = time.monotonic()
        request = Request(environ)
        key = exchange_key(request.method, request.path, environ.get("QUERY_STRING", ""), request.get_data())
        exchange = self._next(key, remember_miss=False)
        if exchange is None:
            return self.unmatched_answer(key, environ, start_response)
        if exchange.status == 101:
            return sessions.replay(exchange, request, self.speed, start_response)
        return self.play(exchange, arrived, start_response)

    def play(self, exchange: Exchange, arrived: float, start_response: Any) -> Iterator[bytes]:
        """Answer with ``exchange``: its status and headers, then each chunk at its time after ``arrived``."""
        start_response(f"{exchange.status} {_reason(exchange.status)}", list(exchange.response_headers))
        return self._chunks(exchange, arrived)

    def unmatched_answer(self, key: str, environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        """The 404 of a request nothing recorded matches (it is kept in :attr:`unmatched`)."""
        with self._lock:
            self.unmatched.append(key)
        request = Request(environ)
        body = json.dumps({"error": {"message": f"No recorded exchange matches {request.method} {request.path} "
                                                f"with this body (llmsim replay, exact mode).",
                                     "type": "llmsim_unmatched", "request": key[:2000]}})
        return Response(body, status=404, content_type="application/json")(environ, start_response)

    def _chunks(self, exchange: Exchange, arrived: float) -> Iterator[bytes]:
        for at, data in plan(exchange, self.speed):
            wait = arrived + at - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            yield data


def _reason(status: int) -> str:
    from http import HTTPStatus

    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Unknown"
