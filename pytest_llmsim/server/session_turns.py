"""A response inside a WebSocket session: a generation request's life of its own.

A session's key was checked at its handshake; each response it creates then
passes the same door as an HTTP request (its number and fault, the backend's
capacity and rate limits), runs in the same engine and batch, is written by
the same stream writer (its events rendered by the API, sent as the session's
messages instead of HTTP chunks) and is accounted once, in the request log
(with its session id), the metrics and the trace.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any

from werkzeug.wrappers import Request

from ..api.base import StreamRenderer, WireAPI
from ..sim import GenerationRequest, SimError
from ..sim.fault_effects import Close, Empty
from ..sim.generation import Outcome
from ..sim.tokens import TokenizeError
from .exchange import CREDENTIAL_KEY, untokenizable
from .request_life import GenerationLife, Lives, dropped
from .sessions import SOCKET_KEY
from .websocket import WebSocket

__all__ = ["SessionTurn"]


class SessionOutput:
    """A session's WebSocket as the engine's thread writes a response's events to it: each SSE event rendered,
    one text message (:class:`~.stream_writer.DirectOutput`); a message the client sent meanwhile stops it,
    for the runner to read."""

    __slots__ = ("_socket",)

    def __init__(self, socket: WebSocket) -> None:
        self._socket = socket

    def try_send(self, data: bytes) -> tuple[bytes, int] | None:
        return self._socket.try_send_now(data)

    def send_rest(self, rest: bytes) -> None:
        self._socket.send_rest(rest)

    def interrupted(self) -> bool:
        return self._socket.has_input()


class SessionTurn(GenerationLife):
    """One response of a session (see the module's text): an ``api.routing.ResponseTurn``."""

    __slots__ = ("_as_rendered", "response_id")

    def __init__(self, lives: Lives, request: Request, api: WireAPI, session_id: str) -> None:
        super().__init__(lives, request, api)
        self.record.session = session_id
        self.record.stream = True
        self.response_id = ""
        self._as_rendered = True

    def direct_output(self) -> SessionOutput | None:
        """Where the engine's thread may send the events itself: the session's WebSocket, when the runner sends
        them as rendered (and the session does not compress)."""
        socket = self.request.environ.get(SOCKET_KEY)
        return SessionOutput(socket) if self._as_rendered and socket is not None and not socket.deflate else None

    def start(self, request: GenerationRequest, body: Any, raw: bytes, arrived_at: float | None = None) -> str:
        simulator, record = self.simulator, self.record
        number = simulator.count_request()
        record.keep_body(body, raw, simulator.config.max_log_body_bytes)
        record.model = request.model
        request.credential = self.request.environ.get(CREDENTIAL_KEY)  # the key the handshake presented
        try:
            admitted = self.admit(request, number, self.request.environ.get("QUERY_STRING", ""), arrived_at)
        except SimError as error:
            self._refused(error)
            raise
        except TokenizeError as error:
            refusal = untokenizable(error, request.prompt_param)
            self._refused(refusal)
            raise refusal from None
        if not admitted:
            dropped(simulator, self.request, record)
            raise ConnectionError("the session's connection was dropped by a fault")
        record.status = 200
        self.response_id = self.api.id_prefix + self.lives.next_id()
        return self.response_id

    def _refused(self, error: SimError) -> None:
        self.record.status, self.record.error = error.status, error.fields()
        self.simulator.finish(self.record)

    def cut(self, events: StreamRenderer, out: list[bytes], gone: Callable[[], bool]) -> Generator[bytes, None, bool]:
        """A fault's cut inside a session: a close frame with its code and reason (``close_session``) ends the
        session where an HTTP stream's connection would be dropped; any other action as for HTTP."""
        action = self.plan.at_cut if self.plan is not None else None
        if not isinstance(action, Close):
            return (yield from super().cut(events, out, gone))
        yield b"".join(out)  # the tokens due before the cut go out first
        out.clear()
        self.request.environ[SOCKET_KEY].close(action.code, action.reason)
        return True

    def events(self, renderer: StreamRenderer, on_complete: Callable[[], None] | None = None,
               as_rendered: bool = True) -> Generator[bytes]:
        """The response's events (a generator: closing it early abandons the response, as a hang-up does);
        ``as_rendered``: the runner sends each event's data as it is, so the engine's thread may send them."""
        self._as_rendered = as_rendered
        if self.plan is not None and isinstance(self.plan.before_headers, Empty):
            self.abandon(Outcome.CUT_BY_FAULT, 0)
            return
        yield from self.lives.streams.stream(self, renderer, on_complete)
