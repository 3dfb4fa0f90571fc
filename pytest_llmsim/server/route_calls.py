"""The server's side of an API's declared routes: a :class:`~pytest_llmsim.api.routing.RouteCall` over
HTTP, a :class:`~pytest_llmsim.api.routing.Reply` as a response, and an
:class:`~pytest_llmsim.api.routing.ApiRoute` as an entry of the route table.

A call route's handler raises :class:`~pytest_llmsim.sim.SimError` for a bad
request; it is answered here in the route's API shape, logged in the record the
handler started (if it started one).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from werkzeug.exceptions import RequestEntityTooLarge
from werkzeug.wrappers import Request, Response

from ..api.base import RequestTarget, WireAPI
from ..api.routing import ApiRoute, Reply, RouteCall, Upload
from ..sim import SimError
from ..sim.request_log import RequestRecord
from ..sim.simulator import Simulator
from .exchange import CREDENTIAL_KEY, RECORD_KEY, answer_error, new_record, read_json
from .request_life import Lives
from .responses import CompleteResponse, json_response
from .routes import Handler, Route, RouteMatch, request_target
from .session_turns import SessionTurn
from .sessions import SESSION_KEY, SESSION_LIMIT_KEY, session_route

__all__ = ["HttpRouteCall", "answer_call", "route_of"]


class HttpRouteCall:
    """One HTTP request to a call or session route, as its handler sees it."""

    __slots__ = ("_lives", "_match", "_request", "simulator")

    def __init__(self, request: Request, match: RouteMatch, simulator: Simulator, lives: Lives | None = None) -> None:
        self._request, self._match, self.simulator, self._lives = request, match, simulator, lives

    # read when a handler asks (a health check asks for nothing)
    @property
    def method(self) -> str:
        return self._request.method

    @property
    def params(self) -> Mapping[str, str]:
        return self._match.params

    @property
    def api(self) -> WireAPI:
        return self._match.route.api

    @property
    def credential(self) -> str | None:
        return self._request.environ.get(CREDENTIAL_KEY)

    @property
    def query(self) -> Mapping[str, str]:
        return self._request.args  # parsed when first asked for (werkzeug keeps it)

    @property
    def target(self) -> RequestTarget:
        return request_target(self._request.environ, self._match.params)

    @property
    def origin(self) -> str:
        return f"{self._request.scheme}://{self._request.host}"

    def read_json(self, record: RequestRecord | None = None) -> tuple[Any, bytes]:
        body, data = read_json(self._request, self.simulator)
        if record is not None:
            record.keep_body(body, data, self.simulator.config.max_log_body_bytes)
        return body, data

    def log(self, api_name: str | None = None) -> RequestRecord:
        record = new_record(self._request)
        if api_name is not None:
            record.api = api_name
        return record

    def turn(self, api: WireAPI, session_id: str) -> SessionTurn:
        record = self._request.environ.get(SESSION_KEY)
        if self._lives is None or record is None:
            raise RuntimeError("only a session route's call starts responses")
        record.id = session_id
        record.responses += 1
        return SessionTurn(self._lives, self._request, api, session_id)

    def count_audio(self, input_seconds: float = 0.0, output_seconds: float = 0.0) -> None:
        record = self._request.environ.get(SESSION_KEY)
        if record is not None:
            self.simulator.sessions.add_audio(record, input_seconds, output_seconds)

    @property
    def session_seconds(self) -> float | None:
        limits = [limit for limit in (self.simulator.config.max_session_seconds,
                                      self._request.environ.get(SESSION_LIMIT_KEY)) if limit is not None]
        return min(limits) if limits else None

    def form(self, max_bytes: int, too_large: Exception) -> tuple[Mapping[str, str], Mapping[str, Upload]]:
        request = self._request
        request.max_content_length = max_bytes
        try:
            return request.form, request.files
        except RequestEntityTooLarge:
            raise too_large from None


def reply_response(reply: Reply) -> Response:
    """A handler's reply as a response: JSON, fixed bytes, or a stream of bytes."""
    headers = dict(reply.headers) if reply.headers else None
    if reply.content_type is None:
        return json_response(reply.body, reply.status, headers)
    if isinstance(reply.body, bytes):
        return CompleteResponse(reply.body, reply.status, headers, reply.content_type)
    body: Iterator[bytes] = reply.body
    return Response(body, status=reply.status, content_type=reply.content_type, headers=headers)


def answer_call(simulator: Simulator, handler: Callable[[RouteCall], Reply], request: Request,
                match: RouteMatch) -> Response:
    """Run a call route's handler; a :class:`SimError` it raises is answered in the route's API shape."""
    try:
        return reply_response(handler(HttpRouteCall(request, match, simulator)))
    except SimError as error:
        return answer_error(simulator, request, match.route.api, error, request.environ.get(RECORD_KEY))


def route_of(declared: ApiRoute, lives: Lives) -> Route:
    """The route table's entry for a declared route (``lives`` runs its generation requests)."""
    simulator = lives.simulator
    if declared.session is not None:
        runner = declared.session

        def run_session(session: Any, request: Request, match: RouteMatch) -> None:
            runner(session, HttpRouteCall(request, match, simulator, lives))

        return session_route(simulator, declared.template, run_session, declared.api, declared.subprotocols,
                             declared.keyed, deflate=declared.deflate)
    if declared.handler is None:
        handler: Handler = functools.partial(lives.generation, api=declared.api)
        return Route(declared.template, declared.methods, handler, declared.api, generates=True,
                     accepts=declared.accepts)
    return Route(declared.template, declared.methods, functools.partial(answer_call, simulator, declared.handler),
                 declared.api, accepts=declared.accepts, keyed=declared.keyed, stored=declared.stored)

