"""Answers to generation requests: JSON or SSE, and the faults that spoil them.

The server validates a request and starts its generation; this module turns
the engine's events into the bytes a client sees, and applies a request's
fault on the way (a stall, a stream cut after N tokens, a dropped
connection, an empty or malformed body).
"""

from __future__ import annotations

import functools
import json
import socket
import threading
from collections.abc import Callable, Generator, Iterator, Sequence
from typing import Any

from werkzeug.wrappers import Request, Response

from ..api.base import StreamRenderer, WireAPI
from ..sim import SimError, fast_json
from ..sim.engine import SeqState, SimSequence
from ..sim.fault_effects import Drop, Empty, ErrorEvent, Fail, Malformed, Stall, Truncate
from ..sim.faults import Fault
from ..sim.request_log import RequestRecord
from ..sim.simulator import Generation, Outcome, Simulator
from ..sim.token_feed import FINISH, ClientGone, TokenFeed
from .background import BackgroundJob, BackgroundJobs
from .compression import STREAMING_KEY
from .sockets import blocking_socket, can_send_now, client_gone, drop_connection, nonblocking_socket, send_chunk_now
from .trusted_headers import TrustedHeaders, valid_pairs

__all__ = ["CompleteResponse", "GenerationResponder", "complete_response", "json_response"]

JSON = "application/json"
SSE_TYPE = "text/event-stream; charset=utf-8"
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
# Most token events rendered into one write: a backlog (a client that reads
# slowly, or thousands of tokens due at once) is written in pieces of this
# size, each waiting for the socket, never rendered whole in memory.
CHUNK_EVENTS = 256


class CompleteResponse(Response):
    """A complete answer (JSON, or a fixed body such as ``/health``'s): werkzeug's ``Response``, sent
    without its general-purpose WSGI path.

    Its body is one bytes object whose length is known when it is built, so
    ``Content-Length`` is set then and a call hands the headers and the body
    straight to the server (werkzeug's path re-derives both on every call:
    about 5 % of a non-streamed request). A HEAD request, a 204 or 304, or a
    body replaced after construction takes werkzeug's path.
    """

    def __init__(self, data: bytes, status: int, headers: dict[str, str] | None, content_type: str = JSON) -> None:
        extra = list(headers.items()) if headers else []
        if extra and (not valid_pairs(extra) or any(name.lower() in _FRAMING for name, _ in extra)):
            super().__init__(data, status=status, headers=headers, content_type=content_type)  # and its length
        else:  # what werkzeug's __init__ would build, without its general-purpose steps (~4 % of a request)
            self.headers = TrustedHeaders([*extra, ("Content-Type", content_type), ("Content-Length", str(len(data)))])
            # werkzeug's status setter, through a cache: it builds the status line from the code every time
            self._status, self._status_code = _status_line(status)
            self.direct_passthrough = False
            self._on_close = []
            self.response = [data]
        self._sent_body = self.response

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        if (self.response is not self._sent_body or environ.get("REQUEST_METHOD") == "HEAD"
                or self.status_code in (204, 304)):
            return super().__call__(environ, start_response)
        start_response(self.status, self.headers.to_wsgi_list())
        return self.response


_FRAMING = ("content-type", "content-length")


@functools.lru_cache(maxsize=64)
def _status_line(status: int) -> tuple[str, int]:
    """``(status line, code)`` as werkzeug's ``Response.status`` setter stores them."""
    return Response._clean_status(Response(), status)  # (a method that reads nothing of the response)


def json_response(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return CompleteResponse(fast_json.dumps(body), status, headers)


def complete_response(data: bytes, content_type: str, status: int = 200) -> Response:
    """A fixed body of ``content_type`` (``/health``'s empty text, the metrics page)."""
    return CompleteResponse(data, status, None, content_type)


class _DirectWriter:
    """Writes a single-choice stream's token events from the engine's thread.

    Waking a handler thread per token costs a GIL hand-off each; with many
    streams those pile up and tokens go out late. Whoever runs the engine
    (its thread, or a handler submitting work) writes the due events straight
    to the socket instead, framed as werkzeug frames chunks. It never blocks:
    if the handler thread is writing (it holds ``lock``), or the socket would
    block, the event goes through the handler as before; bytes a short send
    left over go in ``pending``, the event wakes the handler to write them,
    and the fast path stops; a send that fails (the client is gone) wakes
    it too, which is how a handler whose stream this writes learns of a
    hang-up (it looks itself only every ``QUIET_CHECK_INTERVAL``).
    """

    __slots__ = (
        "_events",
        "_feed",
        "_lag",
        "_pieces",
        "_sock",
        "enabled",
        "lock",
        "opened",
        "pending",
        "written",
    )

    def __init__(self, sock: socket.socket, events: StreamRenderer, pieces: Sequence[str],
                 lag: Callable[[float], None], feed: TokenFeed) -> None:
        self._sock = nonblocking_socket(sock)  # sends here must never wait
        self._events = events
        self._pieces = pieces
        self._lag = lag  # told the virtual time of each token it wrote, to measure lateness
        self._feed = feed  # counts the sends that went out (its reader then looks for hang-ups less often)
        self.lock = threading.Lock()
        self.enabled = False  # set once the response headers are out
        self.opened = False  # the role event has been written
        self.written = 0  # token events on the wire (by either writer)
        self.pending = b""

    def render(self, upto: int) -> bytes:
        """The events not yet written, through token ``upto`` but at most ``CHUNK_EVENTS`` of them
        (call holding ``lock``)."""
        written = self.written
        if upto == written + 1 and self.opened and upto <= len(self._pieces):  # the usual call: one token due
            self.written = upto
            return self._events.token(0, written, self._pieces[written])
        parts = [] if self.opened else [self._events.opening(0)]
        self.opened = True
        upto = min(upto, self.written + CHUNK_EVENTS)
        token = self._events.token
        parts.extend(token(0, position, piece)
                     for position, piece in enumerate(self._pieces[self.written:upto], self.written))
        self.written = max(self.written, upto)
        return b"".join(parts)

    def __call__(self, seq: SimSequence, emitted: int, due: float) -> bool:
        if (not self.enabled or emitted - self.written > CHUNK_EVENTS  # a backlog: the handler writes it
                or not self.lock.acquire(blocking=False)):
            return False
        try:
            before = self.written
            data = self.render(emitted)
            if not data:
                return True
            try:
                framed, sent = send_chunk_now(self._sock, data)
            except OSError:  # the client is gone: wake the handler (this event is posted), it cancels
                self.enabled = False
                self.written = before  # these never reached it
                return False
            if sent < len(framed):  # the rest goes through the handler, woken by this event
                self.pending, self.enabled = framed[sent:], False
                return False
            self._feed.direct_writes += 1  # only a send proves the client there (empty events do not)
            self._lag(due)
            return True
        finally:
            self.lock.release()


STREAM_RESET = SimError(500, "The backend was reset while this answer was streaming (pytest-llmsim); the "
                              "answer is incomplete.", type="server_error", code="backend_reset")


class GenerationResponder:
    """Builds the response of a started generation, applying the request's fault."""

    def __init__(self, simulator: Simulator, background: BackgroundJobs | None = None) -> None:
        self.simulator = simulator
        self.background = background if background is not None else BackgroundJobs()

    def respond(self, request: Request, record: RequestRecord, generation: Generation,
                response_id: str, fault: Fault | None, api: WireAPI) -> Response:
        """The answer to a started generation, in ``api``'s wire format."""
        record.status = 200
        limits = {} if generation.rate_limit is None else api.rate_limit_headers(generation.rate_limit)
        extra = api.answer_headers()  # headers an API puts on every answer (a request id)
        if extra:
            limits = {**limits, **extra}
        if generation.request.background and api.answers_in_background:
            return self._in_background(record, generation, response_id, api, limits)
        if generation.request.stream:
            headers = {**SSE_HEADERS, **limits}
            if fault is not None and isinstance(fault.effect.before_headers(fault, stream=True), Empty):
                self._abandon(record, generation, Outcome.CUT_BY_FAULT, 0)
                return Response(b"", status=200, content_type=SSE_TYPE, headers=headers)
            events = api.stream(generation, response_id)
            remember = self._remember(generation, response_id, api)
            body = self._stream(request, record, generation, events, fault, remember)
            return Response(body, status=200, content_type=getattr(events, "content_type", SSE_TYPE), headers=headers)
        return self._complete(request, record, generation, response_id, fault, api, limits)

    def _in_background(self, record: RequestRecord, generation: Generation, response_id: str, api: WireAPI,
                       headers: dict[str, str]) -> Response:
        """Answer at once (the queued object, or a stream that follows the job); the job runs on without us."""
        job = BackgroundJob(self.simulator, record, generation, api, response_id)
        queued = job.body()
        self.background.add(job, self.simulator.config.max_stored_response_bytes)  # its events count
        job.start()
        if generation.request.stream:
            return Response(job.read(), status=200, content_type=SSE_TYPE, headers={**SSE_HEADERS, **headers})
        return json_response(queued, headers=headers)

    def _remember(self, generation: Generation, response_id: str, api: WireAPI) -> Callable[[], None] | None:
        """What stores a complete exchange, for requests that ask for it (chaining, retrieval)."""
        if not generation.request.store:
            return None
        return lambda: self.simulator.remember(response_id, generation, api.response_body(generation, response_id))

    # --- non-streamed ---

    def _complete(self, request: Request, record: RequestRecord, generation: Generation,
                  response_id: str, fault: Fault | None, api: WireAPI, limits: dict[str, str]) -> Response:
        before = fault.effect.before_headers(fault, stream=False) if fault is not None else None
        gone = functools.partial(client_gone, request)
        try:
            if isinstance(before, Stall) and self.simulator.stall(before.seconds, gone):
                raise ClientGone
            generation.feed.wait(gone)
        except ClientGone:  # the client gave up (e.g. its timeout): free the slot, count it
            self._abandon(record, generation, Outcome.CLIENT_GONE, 0)
            drop_connection(request)  # 499 is the log's word for it: nothing is written to a client that has gone
            return Response(b"", status=499)  # never reaches the client
        action = fault.effect.at_end(fault) if fault is not None else None
        if isinstance(action, Drop):
            record.status = 0  # no response at all
            self.simulator.finish(record, generation, Outcome.CUT_BY_FAULT, 0)
            drop_connection(request)
            return Response(b"", status=500)  # never reaches the client
        if isinstance(action, Fail):  # the error is the answer
            error = action.error
            record.status, record.error = error.status, error.fields()
            self.simulator.finish(record, generation, Outcome.CUT_BY_FAULT, 0)
            status, body, headers = api.render_error(error)
            return json_response(body, status, headers)
        if action is not None:  # empty or malformed: the client gets no usable answer
            self.simulator.finish(record, generation, Outcome.CUT_BY_FAULT, 0)
        else:
            self.simulator.finish(record, generation)
        if isinstance(action, Empty):
            return Response(b"", status=200, content_type=JSON)
        body = api.response_body(generation, response_id)
        if isinstance(action, Malformed):
            text = json.dumps(body)
            return Response(text[:len(text) // 2], status=200, content_type=JSON, headers=limits)
        if generation.request.store:  # the body just built is the one kept, not a second rendering
            self.simulator.remember(response_id, generation, body)
        return json_response(body, headers=limits)

    def _abandon(self, record: RequestRecord, generation: Generation, outcome: Outcome, delivered: int) -> None:
        """End a generation early (client gone, or a fault cut it): free its slots, then account it."""
        self.simulator.cancel(generation)
        generation.feed.wait()
        self.simulator.finish(record, generation, outcome, delivered)

    # --- streamed ---

    def _stream(self, request: Request, record: RequestRecord, generation: Generation,
                events: StreamRenderer, fault: Fault | None,
                on_complete: Callable[[], None] | None = None) -> Iterator[bytes]:
        """SSE events as the engine releases tokens; every batch already due goes in one write."""
        outputs = generation.outputs
        started = [False] * len(outputs)
        sent = [0] * len(outputs)  # tokens written, per choice
        cut_at = fault.effect.cut_at(fault) if fault is not None else None
        written = 0
        complete = reset = cut = False
        gone = functools.partial(client_gone, request)
        blocking_socket(request)  # a stream may idle for long: no read/write timeout from here on
        direct = self._direct_writer(request, generation, events, fault)
        try:
            before = fault.effect.before_headers(fault, stream=True) if fault is not None else None
            if (isinstance(before, Stall) and self.simulator.stall(before.seconds, gone)) or gone():
                drop_connection(request)  # gone before the headers (a stall, a half-closed client): no bytes at all
                return
            yield b""  # send the headers now, as a real server does on admission
            out: list[bytes] = []  # what goes out with the closing events
            if direct is not None:
                last, reset = yield from self._stream_direct(request, generation, events, direct)
                out.append(last)
            else:
                for batch in generation.feed.batches(gone):
                    due: list[bytes] = []
                    for kind, seq, emitted, _ in batch:
                        index = seq.index
                        if not started[index]:
                            started[index] = True
                            due.append(events.opening(index))
                        while sent[index] < emitted:  # a chunk at a time: a backlog is never rendered whole
                            upto = min(emitted, sent[index] + CHUNK_EVENTS)
                            for position, piece in enumerate(outputs[index].pieces[sent[index]:upto], sent[index]):
                                if written == cut_at and fault is not None:
                                    cut_at = None
                                    cut = yield from self._apply_cut(request, fault, events, due, gone)
                                    if cut:
                                        return
                                due.append(events.token(index, position, piece))
                                written += 1
                            sent[index] = upto
                            if len(due) >= CHUNK_EVENTS:
                                yield b"".join(due)
                                due.clear()
                        if kind == FINISH:
                            if seq.state is SeqState.FINISHED:
                                due.append(events.finish(index))
                            else:
                                reset = True
                    yield b"".join(due)
                    self.simulator.note_lag(generation, min(event[3] for event in batch))
            if reset:  # the backend was reset under this stream: its API's failure ending, never [DONE]
                yield events.aborted(STREAM_RESET)
                return
            if cut_at is not None and fault is not None:  # fewer tokens than after_tokens: cut at the end
                cut = yield from self._apply_cut(request, fault, events, out, gone)
                if cut:
                    return
            if gone():  # it left while its last tokens were being written: it will not see [DONE]
                return
            tail = b"".join(out) + events.closing()
            # Account before the client can see the stream's end, so a test that
            # reads the metrics right after its stream ends finds this request.
            complete = True
            self.simulator.finish(record, generation)
            if on_complete is not None:
                on_complete()
            yield tail
        except ClientGone:
            drop_connection(request)  # no closing chunk for a client that has gone: it would read a whole stream
            return  # the finally below cancels and accounts it
        finally:
            if not complete:  # a hang-up (or a failed write), a fault's cut, or a reset
                delivered = direct.written if direct is not None else written
                self._abandon(record, generation, Outcome.CUT_BY_FAULT if cut else Outcome.CLIENT_GONE,
                              delivered)

    def _direct_writer(self, request: Request, generation: Generation, events: StreamRenderer,
                       fault: Fault | None) -> _DirectWriter | None:
        """The engine-side fast path, for the common stream: one choice, no fault, chunked HTTP/1.1, not
        compressed (the compressor sees only what passes through the handler)."""
        sock = blocking_socket(request)
        if (fault is not None or len(generation.outputs) != 1 or sock is None
                or request.environ.get("SERVER_PROTOCOL") != "HTTP/1.1" or STREAMING_KEY in request.environ
                or not can_send_now()):  # it must never block: no such flag, no fast path
            return None
        return _DirectWriter(sock, events, generation.outputs[0].pieces,
                             functools.partial(self.simulator.note_lag, generation), generation.feed)

    def _stream_direct(self, request: Request, generation: Generation, events: StreamRenderer,
                       direct: _DirectWriter) -> Generator[bytes, None, tuple[bytes, bool]]:
        """The token events of a stream whose engine writes tokens itself (see :class:`_DirectWriter`).

        The handler writes only what the fast path could not (events queued
        while the handler was writing, bytes a short send left over). It holds
        ``direct.lock`` while werkzeug writes, so the two writers never
        interleave. Returns the finish event, for the caller to send with
        ``[DONE]``, and whether the backend was reset under the stream.
        """
        generation.feed.direct = direct
        direct.enabled = True
        for batch in generation.feed.batches(lambda: client_gone(request)):
            with direct.lock:
                out = [direct.pending]
                direct.pending = b""
                for kind, seq, emitted, _ in batch:
                    while emitted - direct.written > CHUNK_EVENTS:  # a backlog: write it chunk by chunk
                        out.append(direct.render(emitted))
                        yield b"".join(out)
                        out.clear()
                    out.append(direct.render(emitted))
                    if kind == FINISH:
                        direct.enabled = False
                        if seq.state is not SeqState.FINISHED:
                            return b"", True
                        out.append(events.finish(0))
                        return b"".join(out), False
                data = b"".join(out)
                if data:
                    yield data  # werkzeug writes it before resuming us, still under the lock
                    self.simulator.note_lag(generation, min(event[3] for event in batch))
        return b"", False

    def _apply_cut(self, request: Request, fault: Fault, events: StreamRenderer, out: list[bytes],
                   gone: Callable[[], bool]) -> Generator[bytes, None, bool]:
        """Apply a mid-stream fault's action here (``out`` holds what is due); True when the stream ends.

        A client that hangs up during a stall raises :class:`ClientGone`.
        """
        action = fault.effect.at_cut(fault)
        if isinstance(action, Malformed):
            out.append(events.malformed())
            return False
        if isinstance(action, ErrorEvent):
            out.append(events.error(action.error))
        elif isinstance(action, Truncate):
            out.append(events.truncated())  # then the HTTP framing ends as for a whole answer
        yield b"".join(out)
        out.clear()
        if isinstance(action, Stall):
            if self.simulator.stall(action.seconds, gone):
                raise ClientGone
            return False
        if isinstance(action, Drop):
            drop_connection(request)
        return action is not None
