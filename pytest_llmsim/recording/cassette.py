"""A cassette: recorded exchanges with a provider, one JSON object a line (diff-friendly), versioned.

The first line says what it is::

    {"llmsim_cassette": 1, "upstream": "https://api.openai.com", "recorded": "2026-12-06T12:00:00Z"}

then one line per exchange::

    {"request": {"method": "POST", "path": "/v1/chat/completions", "query": "", "headers": [[name, value]...],
                 "body": {...} | "body_text": "..." | "body_base64": "..."},
     "response": {"status": 200, "headers": [[name, value]...],
                  "chunks": [{"at": 0.183, "text": "data: {...}\\n\\n"} | {"at": 0.2, "base64": "..."}...]},
     "duration": 0.912, "started": 1796560115.25}

A WebSocket session (status 101) keeps its messages instead of chunks: ``"session": {"messages": [{"at", "from":
"client" | "server", "text" | "base64"}...], "close_code"}``. ``at`` is seconds from when the request was sent
upstream to when the chunk (or message) arrived; a whole answer is one
chunk; ``started`` is the wall clock (Unix seconds) when it was sent, so the requests' overlap (the load they
were recorded at) can be read back (:mod:`pytest_llmsim.calibration.cassettes`). Credentials never reach it
(:mod:`.redaction`): a request's are replaced by fingerprints before it is written.
"""

from __future__ import annotations

import base64
import datetime
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .redaction import redact_body, redact_headers, redact_query

__all__ = ["CASSETTE_VERSION", "Cassette", "Chunk", "Exchange", "SessionMessage", "is_cassette", "read_cassette"]

CASSETTE_VERSION = 1
# Hop-by-hop and framing headers: a replay frames its own answer
_FRAMING = frozenset({"connection", "keep-alive", "transfer-encoding", "content-length", "content-encoding",
                      "proxy-connection", "te", "trailer", "upgrade"})


@dataclass
class Chunk:
    """Bytes the upstream sent, ``at`` seconds after the request went out."""

    at: float
    data: bytes

    def to_json(self) -> dict[str, Any]:
        try:
            return {"at": round(self.at, 6), "text": self.data.decode("utf-8")}
        except UnicodeDecodeError:
            return {"at": round(self.at, 6), "base64": base64.b64encode(self.data).decode()}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Chunk:
        raw = data["text"].encode() if "text" in data else base64.b64decode(data["base64"])
        return cls(float(data["at"]), raw)


@dataclass
class SessionMessage:
    """A WebSocket message of a recorded session: ``side`` ``client`` or ``server``, ``at`` seconds after the
    upgrade was sent."""

    at: float
    side: str
    data: str | bytes

    def to_json(self) -> dict[str, Any]:
        if isinstance(self.data, str):
            return {"at": round(self.at, 6), "from": self.side, "text": self.data}
        return {"at": round(self.at, 6), "from": self.side, "base64": base64.b64encode(self.data).decode()}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SessionMessage:
        raw: str | bytes = data["text"] if "text" in data else base64.b64decode(data["base64"])
        return cls(float(data["at"]), data["from"], raw)


@dataclass
class Exchange:
    """One request and its answer, credentials already removed."""

    method: str
    path: str
    query: str
    request_headers: list[tuple[str, str]]
    body: bytes
    status: int
    response_headers: list[tuple[str, str]]
    chunks: list[Chunk] = field(default_factory=list)
    duration: float = 0.0
    started: float | None = None  # the wall clock (Unix seconds) when the request went upstream
    messages: list[SessionMessage] = field(default_factory=list)  # a WebSocket session's (status 101)
    close_code: int | None = None  # how the upstream closed a session

    @classmethod
    def recorded(cls, method: str, path: str, query: str, headers: list[tuple[str, str]], body: bytes, status: int,
                 response_headers: list[tuple[str, str]], chunks: list[Chunk], duration: float,
                 started: float | None = None) -> Exchange:
        """An exchange as it went over the wire, its credentials replaced by fingerprints."""
        return cls(method, path, redact_query(query), redact_headers(headers), _redacted_body(body), status,
                   [(k, v) for k, v in redact_headers(response_headers)], chunks, duration, started)

    @property
    def json_body(self) -> Any:
        """The request's JSON body (None when it is not JSON)."""
        try:
            return json.loads(self.body) if self.body else None
        except ValueError:
            return None

    @property
    def answer(self) -> bytes:
        """The whole answer's bytes."""
        return b"".join(chunk.data for chunk in self.chunks)

    def to_json(self) -> dict[str, Any]:
        request: dict[str, Any] = {"method": self.method, "path": self.path, "query": self.query,
                                   "headers": [list(pair) for pair in self.request_headers]}
        parsed = self.json_body
        if parsed is not None:
            request["body"] = parsed
        elif self.body:
            try:
                request["body_text"] = self.body.decode("utf-8")
            except UnicodeDecodeError:
                request["body_base64"] = base64.b64encode(self.body).decode()
        return {"request": request,
                "response": {"status": self.status, "headers": [list(pair) for pair in self.response_headers
                                                                if pair[0].lower() not in _FRAMING],
                             "chunks": [chunk.to_json() for chunk in self.chunks]},
                "duration": round(self.duration, 6),
                **({"started": round(self.started, 6)} if self.started is not None else {}),
                **({"session": {"messages": [m.to_json() for m in self.messages], "close_code": self.close_code}}
                   if self.status == 101 else {})}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Exchange:
        request, response = data["request"], data["response"]
        if "body" in request:
            body = json.dumps(request["body"], separators=(",", ":")).encode()
        elif "body_text" in request:
            body = request["body_text"].encode()
        else:
            body = base64.b64decode(request.get("body_base64", ""))
        session = data.get("session") or {}
        return cls(request["method"], request["path"], request.get("query", ""),
                   [(k, v) for k, v in request.get("headers", [])], body, int(response["status"]),
                   [(k, v) for k, v in response.get("headers", [])],
                   [Chunk.from_json(chunk) for chunk in response.get("chunks", [])], float(data.get("duration", 0.0)),
                   float(data["started"]) if data.get("started") is not None else None,
                   [SessionMessage.from_json(m) for m in session.get("messages", [])], session.get("close_code"))


def _redacted_body(body: bytes) -> bytes:
    try:
        parsed = json.loads(body) if body else None
    except ValueError:
        return body  # a form or binary upload: kept as sent (no API takes a key in one)
    return body if parsed is None else json.dumps(redact_body(parsed), separators=(",", ":")).encode()


class Cassette:
    """A cassette file being written: exchanges appended as they finish (thread-safe), the header first."""

    def __init__(self, path: str | Path, upstream: str) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        if not self.path.exists() or self.path.stat().st_size == 0:
            stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
            self.path.write_text(json.dumps({"llmsim_cassette": CASSETTE_VERSION, "upstream": upstream,
                                             "recorded": stamp}) + "\n")

    def append(self, exchange: Exchange) -> None:
        line = json.dumps(exchange.to_json(), ensure_ascii=False, separators=(",", ":"))
        with self._lock, self.path.open("a", encoding="utf-8") as out:
            out.write(line + "\n")


def read_cassette(path: str | Path) -> Iterator[Exchange]:
    """The exchanges of a cassette file (a ValueError names a line that is not one)."""
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    if not lines:
        return
    head = json.loads(lines[0])
    if head.get("llmsim_cassette") != CASSETTE_VERSION:
        raise ValueError(f"{path}: not a version {CASSETTE_VERSION} llmsim cassette")
    for number, line in enumerate(lines[1:], 2):
        if line.strip():
            try:
                yield Exchange.from_json(json.loads(line))
            except (ValueError, KeyError, TypeError) as error:
                raise ValueError(f"{path}, line {number}: not a recorded exchange ({error})") from None


def is_cassette(path: str | Path) -> bool:
    """Whether the file at ``path`` is an llmsim cassette (its first line says so)."""
    try:
        with Path(path).open(encoding="utf-8") as source:
            head = json.loads(source.readline() or "null")
    except (OSError, ValueError, UnicodeDecodeError):
        return False
    return isinstance(head, dict) and "llmsim_cassette" in head
