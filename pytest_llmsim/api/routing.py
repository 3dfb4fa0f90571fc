"""How an API declares its routes, and what a route's handler is given and gives back.

An API module lists its routes as :class:`ApiRoute` values in a module-level
``ROUTES``; ``api/catalog.py`` gathers every module's, and the server registers
whatever the catalog lists (it never imports an API module by name). A route
is one of three exchanges:

- a **generation** route (no handler): the request is parsed by the route's
  :class:`~.base.WireAPI` and answered by the server's generation lifecycle,
  whole or streamed as the request asks;
- a **call** (``handler``): anything that generates nothing (model lists,
  token counts, stored objects), written against :class:`RouteCall`, which
  the server implements over HTTP; the handler returns a :class:`Reply` or
  raises :class:`~pytest_llmsim.sim.SimError`, answered in the API's shape;
- a **session** (``session``): a WebSocket the client upgrades to; the runner
  gets a :class:`SessionChannel` and the upgrade request's :class:`RouteCall`.

Two APIs may share a path: ``accepts`` (a guard asked of the request's WSGI
environ) tells them apart, as Gemini's ``GET /v1/models`` (a Google API key)
is told from OpenAI's.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from .base import RequestTarget, StreamRenderer, TokenCounter, WireAPI

if TYPE_CHECKING:
    from ..sim import GenerationRequest
    from ..sim.generation import Generation
    from ..sim.request_log import RequestRecord
    from ..sim.simulator import Simulator

__all__ = [
    "EVENT_STREAM",
    "EVENT_STREAM_HEADERS",
    "ApiRoute",
    "Guard",
    "Reply",
    "ResponseTurn",
    "RouteCall",
    "RouteHandler",
    "SessionChannel",
    "SessionClock",
    "SessionRunner",
    "Upload",
    "counting_route",
    "event_data",
    "receive_until",
]

#: A server-sent event stream's media type and the headers that keep proxies from buffering it.
EVENT_STREAM = "text/event-stream; charset=utf-8"
EVENT_STREAM_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}

#: Asked of a request's WSGI environ: whether this route (of a path two APIs share) answers it.
Guard = Callable[[dict[str, Any]], bool]


@dataclass(slots=True)  # not frozen: one per call, and a frozen dataclass's __init__ costs ~1 µs more
class Reply:
    """What a call answers: a JSON body (``content_type`` None), or bytes or a stream of bytes of
    ``content_type``."""

    body: Any
    status: int = 200
    headers: Mapping[str, str] | None = None
    content_type: str | None = None


class RouteCall(Protocol):
    """One request to a call or session route, as its handler sees it (the server implements it)."""

    simulator: Simulator

    @property
    def method(self) -> str:
        """The request's method."""

    @property
    def params(self) -> Mapping[str, str]:
        """The route template's path parameters."""

    @property
    def api(self) -> WireAPI:
        """The route's API."""

    @property
    def credential(self) -> str | None:
        """The API key the request presented, when the backend checks keys (None: any key will do)."""

    @property
    def query(self) -> Mapping[str, str]:
        """The query string's parameters (the first of each name)."""

    @property
    def target(self) -> RequestTarget:
        """The path parameters and the query, as an adapter's ``parse`` reads them."""

    @property
    def origin(self) -> str:
        """``scheme://host[:port]`` as the client addressed the server (for URLs in answers)."""

    def read_json(self, record: RequestRecord | None = None) -> tuple[Any, bytes]:
        """The JSON body and its bytes, under ``max_body_bytes``; kept in ``record`` (within
        ``max_log_body_bytes``) when one is given. Raises :class:`~pytest_llmsim.sim.SimError`."""

    def log(self, api_name: str | None = None) -> RequestRecord:
        """Start the request's entry in the request log (an error raised afterwards is logged in it); finish
        it with ``simulator.finish(record)``."""

    def form(self, max_bytes: int, too_large: Exception) -> tuple[Mapping[str, str], Mapping[str, Upload]]:
        """A multipart form's fields and files, at most ``max_bytes`` of them (else ``too_large`` is raised)."""

    def turn(self, api: WireAPI, session_id: str) -> ResponseTurn:
        """A new response inside session ``session_id`` (a session route's runner asks for one per response)."""

    def count_audio(self, input_seconds: float = 0.0, output_seconds: float = 0.0) -> None:
        """A session route's runner says how much audio its session took in and sent (simulated seconds)."""

    @property
    def session_seconds(self) -> float | None:
        """A session's time limit, wall seconds from its handshake: ``max_session_seconds``, or sooner when an
        ``expire_session`` fault gave this session its own (None: no limit)."""


class ResponseTurn(Protocol):
    """One response inside a session, as the server runs it: a generation request's whole life (its fault,
    the limits, the engine, the request log and metrics), its events rendered by the API."""

    response_id: str
    generation: Generation | None

    def start(self, request: GenerationRequest, body: Any, raw: bytes, arrived_at: float | None = None) -> str:
        """Admit and start ``request`` (the session message ``body``, ``raw`` as received, at ``arrived_at``:
        the engine counts its latency from then, as an HTTP request's from its arrival); its response id.
        Raises :class:`~pytest_llmsim.sim.SimError` for a refusal (logged), ``ConnectionError`` when a fault
        dropped the connection."""

    def events(self, renderer: StreamRenderer, on_complete: Callable[[], None] | None = None,
               as_rendered: bool = True) -> Generator[bytes]:
        """The response's events as ``renderer`` renders them (SSE-framed), as the engine releases its tokens;
        a fault's cut is carried out on the way, and the response is accounted when the generator ends (closed
        early, it is abandoned: a cancel). ``as_rendered``: the runner sends each event's data as a message as
        it is (then the server may send the token events itself, from the engine's thread, and yields only what
        it could not send; a message from the client meanwhile hands the events back to the runner, which reads
        it between its writes); False when the runner changes them first."""


class Upload(Protocol):
    """A file in a multipart form."""

    filename: str | None

    def read(self) -> bytes:
        """The file's bytes."""


class SessionChannel(Protocol):
    """A WebSocket session, as a session runner drives it."""

    ended_by: str | None
    received_at: float | None  # when the message receive() returned last arrived (time.monotonic())

    def receive(self, timeout: float | None = None) -> str | bytes | None:
        """The next message (text or bytes), or None once the session has ended."""

    def poll(self) -> str | bytes | None:
        """The next message if one has already arrived, without waiting (None: none, or the session ended)."""

    def send(self, message: str | bytes) -> None:
        """Send a text (``str``) or binary message."""

    def send_many(self, messages: Sequence[str | bytes]) -> None:
        """Send messages in order in one write (the events of one batch of tokens)."""

    def close(self, code: int = 1000, reason: str = "", ended_by: str = "server") -> None:
        """End the session with ``code``."""


RouteHandler = Callable[[RouteCall], Reply]
#: Runs one session until it ends (the server closes it after, 1000; 1011 if the runner raised).
SessionRunner = Callable[[SessionChannel, RouteCall], None]


@dataclass(frozen=True, slots=True)
class ApiRoute:
    """One route an API serves: its template (``{name}`` segments are path parameters), methods, and exchange.

    ``keyed``: the route takes the API's keys when the backend checks keys (all but ``/health`` and
    ``/metrics``). ``stored``: it answers stored content (files, batches, stored responses, ``/metrics``),
    so on loopback it answers only the Host names the control API does (a page DNS rebinding pointed here
    cannot read it); other routes take any Host, as gateways rewrite it to the provider's name.
    ``subprotocols`` (sessions): the ones the API speaks, in preference order. ``deflate`` (sessions): accept
    per-message deflate when offered; off by default for an API's sessions (many small events: compressing each
    costs the server more than loopback saves; declining an offer is the protocol's own answer).
    """

    template: str
    api: WireAPI
    methods: tuple[str, ...] = ("POST",)
    handler: RouteHandler | None = None
    session: SessionRunner | None = None
    accepts: Guard | None = None
    keyed: bool = True
    stored: bool = False
    subprotocols: tuple[str, ...] = ()
    deflate: bool = False

    def __post_init__(self) -> None:
        if self.handler is not None and self.session is not None:
            raise ValueError(f"{self.template}: a route is a call or a session, not both")

    @property
    def generates(self) -> bool:
        """A generation route: parsed and answered by the API's adapter (no handler, no session)."""
        return self.handler is None and self.session is None


def counting_route(template: str, api: WireAPI, counter: TokenCounter) -> ApiRoute:
    """A token-counting route (Anthropic's ``count_tokens``, Gemini's ``countTokens``): the prompt tokens a
    request would be charged, logged under ``counter.name``."""

    def count_tokens(call: RouteCall) -> Reply:
        record = call.log(counter.name)
        body, _ = call.read_json(record)
        parsed = counter.parse_count(body, call.target)
        record.model = parsed.model
        count = call.simulator.count_prompt(parsed)
        record.status, record.prompt_tokens = 200, count
        call.simulator.finish(record)
        return Reply(counter.count_body(count, parsed), headers=call.api.answer_headers() or None)

    return ApiRoute(template, api, ("POST",), count_tokens)


def event_data(chunk: bytes) -> list[str]:
    """The ``data:`` payloads of the server-sent events in ``chunk`` (a renderer's output), in order: what a
    session sends as its text messages (``[DONE]`` markers are the HTTP stream's own and are left out)."""
    payloads = []
    for line in chunk.split(b"\n"):
        if line.startswith(b"data: ") and line != b"data: [DONE]":
            payloads.append(line[6:].decode())
    return payloads


class SessionClock:
    """A session's time limit (``RouteCall.session_seconds``, read when the session opens): how long
    the next wait for a message may last, and whether the limit has passed."""

    def __init__(self, limit: float | None) -> None:
        self.limit = limit
        self.ends_at = None if limit is None else time.monotonic() + limit

    def remaining(self) -> float | None:
        """Wall seconds left (None: no limit)."""
        return None if self.ends_at is None else max(0.0, self.ends_at - time.monotonic())

    @property
    def expired(self) -> bool:
        return self.ends_at is not None and time.monotonic() >= self.ends_at


def receive_until(channel: SessionChannel, clock: SessionClock, warn_before: float = 0.0,
                  warn: Callable[[float], None] | None = None) -> str | bytes | None:
    """The next message, or None when the session ended or its time limit passed (the caller ends it as its API
    does). ``warn(seconds left)`` is called once, ``warn_before`` seconds before the limit, if no message came
    in by then (Gemini Live's ``goAway``)."""
    while True:
        remaining = clock.remaining()
        if remaining is None:
            return channel.receive()
        if remaining <= 0:
            return None
        wait = remaining - warn_before if warn is not None and remaining > warn_before else remaining
        try:
            return channel.receive(timeout=wait)
        except TimeoutError:
            if warn is not None and wait < remaining:
                warn(remaining - wait)
                warn = None
