"""A streamed answer on the wire: the engine's token events, rendered by the API and written as they are due.

:class:`StreamWriter` follows a generation's token feed and writes each batch
of due events in one write; the common stream (one choice, no fault, plain
chunked HTTP/1.1) is written by the engine's own thread instead
(:class:`_DirectWriter`), which saves a thread hand-off per token. What a fault
does to the stream, and the accounting at its end, are the request's life's
(:class:`~.request_life.GenerationLife`): the writer calls back for them.
"""

from __future__ import annotations

import functools
import socket
import threading
from collections.abc import Callable, Generator, Iterator, Sequence
from typing import Protocol

from werkzeug.wrappers import Request

from ..api.base import StreamRenderer
from ..sim import SimError
from ..sim.engine import SeqState, SimSequence
from ..sim.simulator import Generation, Outcome, Simulator
from ..sim.token_feed import FINISH, ClientGone, TokenFeed
from .compression import STREAMING_KEY
from .sockets import blocking_socket, can_send_now, client_gone, drop_connection, nonblocking_socket, send_chunk_now

__all__ = ["CHUNK_EVENTS", "STREAM_RESET", "ChunkOutput", "DirectOutput", "StreamLife", "StreamWriter",
           "chunk_output"]

# Most token events rendered into one write: a backlog (a client that reads
# slowly, or thousands of tokens due at once) is written in pieces of this
# size, each waiting for the socket, never rendered whole in memory.
CHUNK_EVENTS = 256


def token_events(events: StreamRenderer, index: int, pieces: Sequence[str], start: int, upto: int) -> Iterator[bytes]:
    """The events of choice ``index``'s tokens ``start`` to ``upto`` (both writers render tokens with it)."""
    token = events.token
    return (token(index, position, piece) for position, piece in enumerate(pieces[start:upto], start))


class DirectOutput(Protocol):
    """Where the engine's thread writes a stream's events itself, and how they are framed there."""

    def try_send(self, data: bytes) -> tuple[bytes, int] | None:
        """Frame ``data`` (rendered events) and send it without waiting: the frame and how many of its bytes went
        out, or None when the output is busy (another writer holds it); raises ``OSError`` when the client is
        gone."""

    def send_rest(self, rest: bytes) -> None:
        """Send the rest of a frame a short send began, waiting as needed (``OSError``: the client is gone)."""

    def interrupted(self) -> bool:
        """Whether the client has sent something the handler must read now (a session's cancel): the engine's
        thread then leaves the events to the handler, which reads between its writes."""


class ChunkOutput:
    """An HTTP/1.1 stream's socket: each write one chunk."""

    __slots__ = ("_now", "_sock")

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock  # blocking: a rest waits for room
        self._now = nonblocking_socket(sock)  # sends here must never wait

    def try_send(self, data: bytes) -> tuple[bytes, int] | None:
        return send_chunk_now(self._now, data)

    def send_rest(self, rest: bytes) -> None:
        self._sock.sendall(rest)

    def interrupted(self) -> bool:
        return False


def chunk_output(request: Request) -> ChunkOutput | None:
    """An HTTP stream's output for the engine's thread: chunked HTTP/1.1, not compressed (the compressor sees only
    what passes through the handler); None otherwise."""
    sock = blocking_socket(request)
    if sock is None or request.environ.get("SERVER_PROTOCOL") != "HTTP/1.1" or STREAMING_KEY in request.environ:
        return None
    return ChunkOutput(sock)


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
    hang-up (it looks itself only every ``QUIET_CHECK_INTERVAL``). Its output
    frames the events: HTTP chunks, or a session's WebSocket messages.
    """

    __slots__ = (
        "_events",
        "_feed",
        "_lag",
        "_pieces",
        "enabled",
        "lock",
        "opened",
        "output",
        "pending",
        "written",
    )

    def __init__(self, output: DirectOutput, events: StreamRenderer, pieces: Sequence[str],
                 lag: Callable[[float], None], feed: TokenFeed) -> None:
        self.output = output
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
        parts.extend(token_events(self._events, 0, self._pieces, self.written, upto))
        self.written = max(self.written, upto)
        return b"".join(parts)

    def __call__(self, seq: SimSequence, emitted: int, due: float) -> bool:
        if (not self.enabled or emitted - self.written > CHUNK_EVENTS  # a backlog: the handler writes it
                or not self.lock.acquire(blocking=False)):
            return False
        try:
            if self.output.interrupted():  # the client spoke: the handler takes this event and reads it
                return False
            before, opened = self.written, self.opened
            data = self.render(emitted)
            if not data:
                return True
            try:
                done = self.output.try_send(data)
            except OSError:  # the client is gone: wake the handler (this event is posted), it cancels
                self.enabled = False
                self.written = before  # these never reached it
                return False
            if done is None:  # another writer has the output: the handler sends these events
                self.written, self.opened = before, opened
                return False
            framed, sent = done
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


class StreamLife(Protocol):
    """What the writer needs of a request's life (:class:`~.request_life.GenerationLife` is one)."""

    request: Request
    generation: Generation | None

    @property
    def cut_at(self) -> int | None:
        """After how many token events the fault acts (None: it does not)."""

    @property
    def faulted(self) -> bool:
        """Whether a fault acts on this answer at all."""

    def direct_output(self) -> DirectOutput | None:
        """Where the engine's thread may write this stream's token events itself, framed as they go out (an
        HTTP/1.1 chunk, a session's WebSocket message); None: only the handler writes."""

    def stalled_before_headers(self, gone: Callable[[], bool]) -> bool: ...

    def cut(self, events: StreamRenderer, out: list[bytes], gone: Callable[[], bool]
            ) -> Generator[bytes, None, bool]: ...

    def complete(self) -> None: ...

    def abandon(self, outcome: Outcome, delivered: int) -> None: ...


class StreamWriter:
    """Writes the streamed answers of one backend's generations."""

    def __init__(self, simulator: Simulator) -> None:
        self.simulator = simulator

    def stream(self, life: StreamLife, events: StreamRenderer,
               on_complete: Callable[[], None] | None = None) -> Iterator[bytes]:
        """SSE events as the engine releases tokens; every batch already due goes in one write."""
        request, generation = life.request, life.generation
        assert generation is not None
        outputs = generation.outputs
        started = [False] * len(outputs)
        sent = [0] * len(outputs)  # tokens written, per choice
        cut_at = life.cut_at
        written = 0
        complete = reset = cut = False
        gone = functools.partial(client_gone, request)
        blocking_socket(request)  # a stream may idle for long: no read/write timeout from here on
        direct = self._direct_writer(life, events)
        try:
            if life.stalled_before_headers(gone) or gone():
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
                            cut_here = cut_at is not None and written + upto - sent[index] > cut_at
                            if cut_at is not None and cut_here:  # the fault acts before token cut_at (of all choices)
                                upto = sent[index] + cut_at - written
                            due.extend(token_events(events, index, outputs[index].pieces, sent[index], upto))
                            written += upto - sent[index]
                            sent[index] = upto
                            if cut_here:
                                cut_at = None
                                cut = yield from life.cut(events, due, gone)
                                if cut:
                                    return
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
            if cut_at is not None:  # fewer tokens than after_tokens: cut at the end
                cut = yield from life.cut(events, out, gone)
                if cut:
                    return
            if gone():  # it left while its last tokens were being written: it will not see [DONE]
                return
            tail = b"".join(out) + events.closing()
            # Account before the client can see the stream's end, so a test that
            # reads the metrics right after its stream ends finds this request.
            complete = True
            life.complete()
            if on_complete is not None:
                on_complete()
            yield tail
        except ClientGone:
            drop_connection(request)  # no closing chunk for a client that has gone: it would read a whole stream
            return  # the finally below cancels and accounts it
        finally:
            if not complete:  # a hang-up (or a failed write), a fault's cut, or a reset
                delivered = direct.written if direct is not None else written
                life.abandon(Outcome.CUT_BY_FAULT if cut else Outcome.CLIENT_GONE, delivered)

    def _direct_writer(self, life: StreamLife, events: StreamRenderer) -> _DirectWriter | None:
        """The engine-side fast path, for the common stream: one choice, no fault, an output the life offers."""
        generation = life.generation
        assert generation is not None
        if life.faulted or len(generation.outputs) != 1 or not can_send_now():  # it must never block
            return None
        output = life.direct_output()
        if output is None:
            return None
        return _DirectWriter(output, events, generation.outputs[0].pieces,
                             functools.partial(self.simulator.note_lag, generation), generation.feed)

    @staticmethod
    def _send_raw(direct: _DirectWriter, data: bytes) -> None:
        """Bytes already framed, written straight to the client (everything before them is out: the engine's
        writer sent their start, the handler's writes are flushed as they are made)."""
        try:
            direct.output.send_rest(data)
        except OSError:
            raise ClientGone from None

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
                if direct.pending:  # the rest of a chunk a short send began: on the wire as it is, not re-framed
                    self._send_raw(direct, direct.pending)
                    direct.pending = b""
                out = []
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
