"""The request log: what arrived at a backend and what became of it.

The log is bounded twice, oldest dropped first: by entries
(``max_log_entries``) and by bytes (``max_log_bytes``: each record's body and
header bytes as received). A body over ``max_log_body_bytes`` is kept as the
start of its text plus a marker (:data:`TRUNCATED_MARKER`), so a long soak or
a stream of huge bodies keeps flat memory; the counters in
:mod:`pytest_llmsim.sim.metrics` keep counting everything.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import chain
from typing import Any

from werkzeug.datastructures import Headers

from . import fast_json

__all__ = ["TRUNCATED_MARKER", "RequestLog", "RequestRecord"]

TRUNCATED_MARKER = "...[truncated by pytest-llmsim: {size} bytes in all]"


@dataclass(slots=True)
class RequestRecord:
    """One HTTP request to an API route and its outcome.

    Timings are simulated seconds (``None`` where the request never got
    that far, e.g. a 400); ``load_time`` is the wait for a model to load
    (Ollama's API, ``ollama_load_seconds``), included in ``ttft`` and ``e2e``.
    ``status`` is 0 when the connection was dropped before any response,
    and 499 when the client hung up before its answer was complete (then
    ``cancelled`` is True); ``fault`` names the fault the request was given.
    ``completion_tokens`` counts the tokens the client was sent,
    ``generated_tokens`` those the engine produced (more, when the client
    left early). ``route`` is the route template that served the
    request (``/v1/models/{id}``; ``unknown`` when none matched); ``api``
    the wire API of a generation route (``openai.chat``, ``openai.completions``);
    ``rule`` the name of the scripted rule that answered it, if one did;
    ``request_id`` the id its answer carried (``x-request-id``, ``request-id``); ``session`` the WebSocket
    session a response was created in (None: a plain HTTP request);
    ``ignored_fields`` the body's fields no version of its API defines (accepted, no effect);
    ``max_tokens`` the largest answer it was allowed (its ``max_tokens``, or ``default_max_tokens`` when it set
    none; 0 for a request that never reached the engine) and ``n`` its choices per prompt;
    ``ended`` how it ended for the client: ``completed``, ``error`` (a 4xx or 5xx answer), ``client gone``,
    or what the fault that cut it short did (``dropped``, ``error event``, ``malformed``, ``cut``).
    ``body`` is the parsed JSON body (kept as the bytes received until it is
    first read, so a logged record is no graph of objects for the garbage
    collector to scan), or, when it was larger than
    ``max_log_body_bytes`` (``body_truncated``), the start of its text
    followed by a marker; ``body_bytes`` is its size as received. ``headers`` are werkzeug's
    case-insensitive ``Headers`` (``record.headers["x-request-id"]``). For the verdicts on the client, in wall
    seconds of the server's monotonic clock: ``arrived`` (the kernel's receive time) and ``finished`` (its answer
    over); ``connection`` numbers the connection it came on (1 for the server's first); ``retry_after`` the wait
    an error answer told the client (``retry-after-ms`` or ``Retry-After``); ``limit_reset`` the seconds until its
    limit resets, when a successful answer's rate-limit headers told the client it had no requests or tokens left;
    ``cut_answer`` the text a stream that ended short had sent (its first choice's, up to 4,096 characters).
    """

    method: str
    path: str
    headers: Headers  # case-insensitive; a plain mapping given here is converted
    body: Any = None
    status: int = 0
    model: str | None = None
    stream: bool = False
    prompt_tokens: int = 0
    completion_tokens: int = 0
    generated_tokens: int = 0
    cached_tokens: int = 0
    finish_reasons: list[str | None] = field(default_factory=list)
    ttft: float | None = None
    e2e: float | None = None
    queue_time: float | None = None
    load_time: float | None = None
    itl: float | None = None
    cancelled: bool = False
    error: dict[str, Any] | None = None
    fault: str | None = None
    route: str = "unknown"
    api: str | None = None
    rule: str | None = None
    request_id: str | None = None
    session: str | None = None
    ignored_fields: list[str] = field(default_factory=list)
    max_tokens: int = 0
    n: int = 1
    ended: str = ""
    body_bytes: int = 0
    body_truncated: bool = False
    arrived: float | None = None
    finished: float | None = None
    connection: int | None = None
    retry_after: float | None = None
    limit_reset: float | None = None
    cut_answer: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.headers, Headers):
            self.headers = Headers(dict(self.headers))

    def keep_body(self, body: Any, data: bytes, limit: int) -> None:
        """Store the request body: parsed (``data``, its JSON, until first read), or truncated to ``limit``
        bytes of text with a marker."""
        self.body_bytes = len(data)
        if len(data) <= limit:
            # An object or array is kept as its bytes: parsed, it is a graph of tracked objects (an agent's
            # 20 tools: ~120) that every full collection scans for as long as the record is logged.
            self.body = bytes(data) if isinstance(body, (dict, list)) and data else body
            return
        self.body_truncated = True
        self.body = data[:limit].decode("utf-8", "replace") + TRUNCATED_MARKER.format(size=len(data))

    @property
    def size_bytes(self) -> int:
        """What this record counts against ``max_log_bytes``: its body and headers as received."""
        kept = len(self.body) if self.body_truncated else self.body_bytes
        # one join, not a len per string; over werkzeug's list of pairs (its items() is a generator: a resumption
        # per header of every request)
        return kept + len("".join(chain.from_iterable(self.headers._list)))

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300 and not self.cancelled

    def summary(self) -> str:
        """One line for assertion messages."""
        parts = [f"{self.method} {self.path} -> {self.status}"]
        if self.model:
            parts.append(f"model={self.model}")
        if self.prompt_tokens or self.completion_tokens:
            parts.append(f"tokens={self.prompt_tokens}+{self.completion_tokens}")
        if self.cancelled:
            parts.append("cancelled")
        if self.fault:
            parts.append(f"fault={self.fault}")
        if self.error:
            parts.append(f"error={self.error.get('code') or self.error.get('type')}")
        return " ".join(parts)


class _ParsedWhenRead:
    """``RequestRecord.body``: a body kept as its JSON bytes (:meth:`RequestRecord.keep_body`) is parsed the
    first time it is read, and that value kept. A parsed body is never ``bytes`` (JSON has none, a truncated
    body is text), so bytes in the slot can only be that JSON."""

    __slots__ = ("slot",)

    def __init__(self, slot: Any) -> None:
        self.slot = slot  # the dataclass's own slot descriptor

    def __get__(self, record: RequestRecord | None, owner: type | None = None) -> Any:
        if record is None:
            return self
        value = self.slot.__get__(record, owner)
        if type(value) is bytes:
            value = fast_json.loads(value)  # what it was parsed to on arrival: the same reader
            self.slot.__set__(record, value)
        return value

    def __set__(self, record: RequestRecord, value: Any) -> None:
        self.slot.__set__(record, value)


# Over the dataclass's slot for ``body`` (set after the class is made, so the generated __init__, __eq__ and
# __repr__ go through it too, as they access attributes).
setattr(RequestRecord, "body", _ParsedWhenRead(RequestRecord.__dict__["body"]))  # noqa: B010 - mypy: a slot


class RequestLog:
    """Thread-safe list of :class:`RequestRecord`, bounded by entries and by bytes, oldest dropped first.

    The newest record is always kept, whatever its size.
    """

    def __init__(self, max_entries: int, max_bytes: int = 64 * 1024 * 1024) -> None:
        # Each record's size apart from it: a (record, size) pair would be one more object per request
        # for the garbage collector to scan for as long as the record is kept.
        self._records: deque[RequestRecord] = deque()
        self._sizes: deque[int] = deque()
        self._lock = threading.Lock()
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.total_bytes = 0
        self.dropped = 0  # records let go to stay within the bounds

    def append(self, record: RequestRecord) -> None:
        size = record.size_bytes
        with self._lock:
            records, sizes = self._records, self._sizes
            records.append(record)
            sizes.append(size)
            self.total_bytes += size
            while len(records) > 1 and (len(records) > self.max_entries or self.total_bytes > self.max_bytes):
                records.popleft()
                self.total_bytes -= sizes.popleft()
                self.dropped += 1

    def snapshot(self) -> list[RequestRecord]:
        with self._lock:
            return list(self._records)

    def __iter__(self) -> Iterator[RequestRecord]:
        return iter(self.snapshot())

    def __len__(self) -> int:
        return len(self._records)
