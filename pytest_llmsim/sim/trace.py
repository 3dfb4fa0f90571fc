"""What the backend did, request by request: a bounded recording, exported as Chrome trace events.

Recording is on unless ``max_trace_requests`` is 0, and costs one small entry per finished request (built
from what the engine already keeps on each sequence: arrival, admission,
first and last token, end) plus one sample each time the batch's running or
waiting count changes. Both are bounded per backend: the newest
``max_trace_requests`` requests (default 10,000) and eight samples per kept
request; the oldest drop first and the trace says how many were dropped.

:meth:`TraceRecorder.chrome_trace` renders the Chrome trace-event format
(open it in https://ui.perfetto.dev or ``chrome://tracing``): one track per
request with ``queued``, ``prefill`` and ``decode`` spans, faults, errors and
hang-ups as instant events, and counter tracks for the batch and the
prefix-cache hit rate. Times are *simulated* (the metrics' time); each span
also carries its wall-clock offset.
"""

from __future__ import annotations

import dataclasses
import threading
from array import array
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .request_log import RequestRecord
    from .sequence import SimSequence

__all__ = ["MAX_SEQUENCES_PER_REQUEST", "TraceRecorder", "TracedRequest", "TracedSequence"]

MAX_SEQUENCES_PER_REQUEST = 16  # choices (or prompts x choices) drawn per request; the rest are counted
_SEQUENCE_FIELDS = 9  # a drawn sequence's values in a kept request's row (TracedSequence's fields, in order)
SAMPLES_PER_REQUEST = 8
_MICROS = 1_000_000


@dataclass(frozen=True, slots=True)
class TracedSequence:
    """One choice's life in simulated seconds (None: it never got there)."""

    arrival: float
    admitted: float | None
    first_token: float | None
    last_token: float | None
    finished: float | None
    tokens: int
    cached_tokens: int
    preemptions: int
    state: str


@dataclass(frozen=True, slots=True)
class TracedRequest:
    """One request as the trace keeps it (``number``: 1, 2, ... in order of arrival)."""

    number: int
    at: float  # simulated time it arrived (or, never admitted to the engine, when it was answered)
    method: str
    route: str
    api: str | None
    model: str | None
    status: int
    fault: str | None
    rule: str | None
    error_code: str | None
    cancelled: bool
    stream: bool
    sequences: tuple[TracedSequence, ...] = ()
    more_sequences: int = 0

    @property
    def end(self) -> float:
        ends = [s.finished for s in self.sequences if s.finished is not None]
        return max(ends) if ends else self.at


class _Rows:
    """The newest ``capacity`` rows of ``width`` numbers, in one flat array of doubles.

    A row is kept as numbers, not as an object: a recording that grows to
    its bound (eight samples per kept request) holds nothing the garbage
    collector tracks, so it neither sets off young collections while it
    grows nor adds to what every full collection scans. The newest row is
    the exception, a tuple until a newer one comes: the batch's counts change
    twice at one instant for every request of an instantaneous backend, and
    replacing a tuple costs one store where rewriting the row took a loop.
    """

    __slots__ = ("_data", "_newest", "_oldest", "capacity", "count", "newest_first", "width")

    def __init__(self, width: int, capacity: int) -> None:
        self._data = array("d")  # the rows before the newest: at most capacity - 1
        self._newest: tuple[float, ...] | None = None
        self._oldest = 0  # row index of the oldest row in _data, once it is full
        self.width = width
        self.capacity = max(capacity, 0)
        self.count = 0  # rows in _data
        self.newest_first: float | None = None  # the newest row's first number (a sample's time)

    def append(self, row: tuple[float, ...]) -> None:
        if not self.capacity:
            return
        newest = self._newest
        if newest is not None:
            self._store(newest)
        self._newest, self.newest_first = row, row[0]

    def replace_last(self, row: tuple[float, ...]) -> None:
        self._newest, self.newest_first = row, row[0]

    def rows(self) -> list[tuple[float, ...]]:
        """Every row, oldest first."""
        data, width = self._data, self.width
        order = [*range(self._oldest, self.count), *range(self._oldest)]
        out = [tuple(data[i * width:(i + 1) * width]) for i in order]
        if self._newest is not None:
            out.append(tuple(map(float, self._newest)))
        return out

    def _store(self, row: tuple[float, ...]) -> None:
        """Keep ``row`` in the array, over the oldest once it holds ``capacity - 1`` (the newest is apart)."""
        room = self.capacity - 1
        if self.count < room:
            self._data.extend(row)
            self.count += 1
        elif room > 0:
            start = self._oldest * self.width
            self._data[start:start + self.width] = array("d", row)
            self._oldest = (self._oldest + 1) % room


@dataclass
class _State:
    requests: deque[tuple[Any, ...]]  # (number, the request's fields, its sequences'): see TraceRecorder.request
    samples: _Rows  # (simulated time, running, waiting)
    hit_rates: _Rows  # (simulated time, prefix-cache hit rate so far)
    dropped: int = 0
    numbers: int = 0
    queried: int = 0
    cached: int = 0


class TraceRecorder:
    """A backend's bounded recording (thread-safe)."""

    def __init__(self, max_requests: int) -> None:
        self._lock = threading.Lock()
        self.max_requests = max_requests
        self._state = self._fresh()

    def _fresh(self) -> _State:
        size = max(self.max_requests, 0)
        return _State(deque(maxlen=size), _Rows(3, size * SAMPLES_PER_REQUEST), _Rows(2, size * SAMPLES_PER_REQUEST))

    @property
    def enabled(self) -> bool:
        return self.max_requests > 0

    def clear(self, max_requests: int | None = None) -> None:
        with self._lock:
            if max_requests is not None:
                self.max_requests = max_requests
            self._state = self._fresh()

    # --- recording ---

    def sample(self, now: float, running: int, waiting: int) -> None:
        """The batch's counts changed at simulated time ``now`` (called by the engine, under its lock)."""
        if not self.max_requests:
            return
        with self._lock:
            samples = self._state.samples
            if samples.newest_first == now:  # several changes at one instant: keep the last
                samples.replace_last((now, running, waiting))
            else:
                samples.append((now, running, waiting))

    def request(self, record: RequestRecord, sequences: list[SimSequence], at: float) -> None:
        """A request is over; ``sequences`` are its engine sequences (none if it never reached the engine).

        BoundedCache as one flat tuple of numbers and strings (a few microseconds per request): the request's
        fields, then each drawn sequence's ``_SEQUENCE_FIELDS``. The garbage collector stops tracking such
        a tuple the first time it looks at it; nested tuples, or an object inside (a ``SeqState``), kept
        every recorded request in view of later collections. :meth:`snapshot` builds the objects.
        """
        if not self.max_requests:
            return
        drawn = sequences[:MAX_SEQUENCES_PER_REQUEST] if len(sequences) > MAX_SEQUENCES_PER_REQUEST else sequences
        error = record.error
        row: list[Any] = [at, record.method, record.route, record.api, record.model, record.status, record.fault,
                          record.rule, error.get("code") if error else None, record.cancelled, record.stream,
                          len(sequences) - len(drawn)]
        for seq in drawn:
            row += (seq.arrival, seq.admitted_at, seq.first_token_at, seq.last_token_at, seq.finished_at,
                    seq.emitted, seq.cached_tokens, seq.preemptions, seq.state._value_)  # (.value: a descriptor call)
        with self._lock:
            state = self._state
            state.numbers += 1
            if len(state.requests) == state.requests.maxlen:
                state.dropped += 1
            state.requests.append((state.numbers, *row))
            if sequences:
                first = sequences[0]
                if len(sequences) == 1:
                    state.queried += len(first.prompt_tokens)
                    state.cached += first.cached_tokens
                else:
                    state.queried += sum(len(seq.prompt_tokens) for seq in sequences)
                    state.cached += sum(seq.cached_tokens for seq in sequences)
                when = first.admitted_at if first.admitted_at is not None else first.arrival
                state.hit_rates.append((when, state.cached / state.queried if state.queried else 0.0))

    # --- reading ---

    def snapshot(self) -> tuple[list[TracedRequest], list[tuple[float, int, int]], list[tuple[float, float]], int]:
        """The kept requests (in order of arrival), batch samples, hit-rate samples, and how many were dropped."""
        with self._lock:
            state = self._state
            raw_requests = list(state.requests)
            samples = [(now, int(running), int(waiting)) for now, running, waiting in state.samples.rows()]
            hit_rates = [(now, rate) for now, rate in state.hit_rates.rows()]
            dropped = state.dropped
        requests = []
        for number, at, method, route, api, model, status, fault, rule, code, cancelled, stream, more, *fields \
                in raw_requests:
            traced = tuple(TracedSequence(*fields[start:start + _SEQUENCE_FIELDS])
                           for start in range(0, len(fields), _SEQUENCE_FIELDS))
            arrival = min((seq.arrival for seq in traced), default=at)
            requests.append(TracedRequest(number, arrival, method, route, api, model, status, fault, rule, code,
                                          cancelled, stream, traced, more))
        # Numbered in order of arrival (after the dropped ones), which is how a reader follows a timeline.
        requests.sort(key=lambda r: (r.at, r.number))
        requests = [dataclasses.replace(r, number=dropped + i) for i, r in enumerate(requests, 1)]
        return requests, samples, hit_rates, dropped

    def chrome_trace(self, label: str) -> dict[str, Any]:
        """The recording as a Chrome trace-event JSON object (``{"traceEvents": [...], ...}``)."""
        requests, samples, hit_rates, dropped = self.snapshot()
        pid = 1
        events: list[dict[str, Any]] = [
            {"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": f"llmsim {label}"}},
            {"name": "thread_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": "batch"}},
        ]
        if dropped:
            first = requests[0].at if requests else 0.0
            events.append({"name": f"{dropped} older request(s) dropped (max_trace_requests)", "ph": "i",
                           "s": "g", "pid": pid, "tid": 0, "ts": _us(first)})
        for order, request in enumerate(requests):
            events.extend(_request_events(request, pid, order))
        for now, running, waiting in samples:
            events.append({"name": "batch", "ph": "C", "pid": pid, "tid": 0, "ts": _us(now),
                           "args": {"running": running, "waiting": waiting}})
        for now, rate in hit_rates:
            events.append({"name": "prefix cache hit rate", "ph": "C", "pid": pid, "tid": 0, "ts": _us(now),
                           "args": {"hit_rate": round(rate, 6)}})
        return {"traceEvents": events, "displayTimeUnit": "ms",
                "otherData": {"backend": label, "time": "simulated seconds (ts in microseconds)",
                              "requests": len(requests), "dropped_requests": dropped}}


def _us(seconds: float) -> float:
    return round(seconds * _MICROS, 3)


def request_title(request: TracedRequest) -> str:
    what = request.api or request.route
    return f"#{request.number} {request.method} {what} -> {request.status}"


def _request_events(request: TracedRequest, pid: int, order: int) -> list[dict[str, Any]]:
    """The spans and instants of one request: one track per traced sequence (the first carries the title)."""
    base_tid = request.number * 32  # room for MAX_SEQUENCES_PER_REQUEST tracks per request
    title = request_title(request)
    args = {"model": request.model, "route": request.route, "status": request.status, "stream": request.stream}
    if request.rule:
        args["rule"] = request.rule
    events: list[dict[str, Any]] = [{"name": "thread_name", "ph": "M", "pid": pid, "tid": base_tid,
                                     "args": {"name": title}},
                                    {"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": base_tid,
                                     "args": {"sort_index": order + 1}}]  # tracks in order of arrival
    if request.fault:
        events.append({"name": f"fault: {request.fault}", "ph": "i", "s": "t", "pid": pid, "tid": base_tid,
                       "ts": _us(request.at), "args": args})
    if not request.sequences:  # answered before reaching the engine (a 4xx, an HTTP fault, a route)
        name = f"{request.status} {request.error_code or ''}".strip()
        events.append({"name": name, "ph": "i", "s": "t", "pid": pid, "tid": base_tid, "ts": _us(request.at),
                       "args": args})
        return events
    for index, seq in enumerate(request.sequences):
        tid = base_tid + index
        if index:
            events.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid,
                           "args": {"name": f"{title} choice {index}"}})
        spans: list[tuple[str, float, float | None, dict[str, Any]]] = []
        if seq.admitted is not None:
            spans.append(("queued", seq.arrival, seq.admitted, {}))
            prefill_end = seq.first_token if seq.first_token is not None else seq.finished
            if prefill_end is not None:
                spans.append(("prefill", seq.admitted, prefill_end, {"cached_tokens": seq.cached_tokens}))
        elif seq.finished is not None:
            spans.append(("queued", seq.arrival, seq.finished, {}))
        if seq.first_token is not None:
            end = seq.finished if seq.finished is not None else seq.last_token
            spans.append(("decode", seq.first_token, end or seq.first_token,
                          {"tokens": seq.tokens, "last_token": seq.last_token, "preemptions": seq.preemptions}))
        for name, start, stop, extra in spans:
            if stop is None or stop < start:
                continue
            events.append({"name": name, "ph": "X", "pid": pid, "tid": tid, "ts": _us(start),
                           "dur": _us(stop - start), "args": {**args, **extra}})
        if request.cancelled and seq.finished is not None:
            events.append({"name": "client hung up", "ph": "i", "s": "t", "pid": pid, "tid": tid,
                           "ts": _us(seq.finished), "args": {"tokens_sent": seq.tokens}})
        elif seq.state not in ("finished",) and seq.finished is not None:
            events.append({"name": seq.state, "ph": "i", "s": "t", "pid": pid, "tid": tid,
                           "ts": _us(seq.finished), "args": args})
    if request.more_sequences:
        events.append({"name": f"{request.more_sequences} more sequence(s) not drawn", "ph": "i", "s": "t",
                       "pid": pid, "tid": base_tid, "ts": _us(request.at)})
    return events
