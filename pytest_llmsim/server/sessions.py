"""Session routes: a path a client upgrades to WebSocket on, and the handler that runs each session.

A session is the second kind of exchange beside one request, one answer: an
API declares it with :func:`session_route` (its template, its handler, the
subprotocols it speaks), and the route table offers the route only to requests
that ask to upgrade, so a session can share a path with plain requests
(``client.responses.connect()`` upgrades on ``/v1/responses``, where a POST
creates a response). The request passes the same checks as any other route
(keys, the Host rule, route faults) before the 101; the handler then runs in
the connection's own thread or greenlet until the session ends.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

from werkzeug.wrappers import Request, Response

from ..api.base import WireAPI
from ..sim import SimError
from ..sim.fault_actions import Fail, SessionLimit
from ..sim.simulator import Simulator
from .exchange import CREDENTIAL_KEY, answer_error, new_record
from .routes import Route, RouteMatch
from .websocket import IDLE_SECONDS, MAX_MESSAGE_BYTES, UPGRADE_KEY, HandshakeRefused, WebSocket, WebSocketUpgrade

__all__ = ["SESSION_KEY", "SESSION_LIMIT_KEY", "SOCKET_KEY", "SessionHandler", "session_route"]

SESSION_KEY = "llmsim.session"  # WSGI environ key: the upgrade's session record (pytest_llmsim.sim.session_log)
SOCKET_KEY = "llmsim.session.socket"  # ... the session's WebSocket (a fault's close frame is sent on it)
SESSION_LIMIT_KEY = "llmsim.session.limit"  # ... the session's own time limit, wall seconds (expire_session)

#: Runs one session: the WebSocket, the upgrade request, its route match. Returns when the session ends
#: (the WebSocket is closed after it, 1000, if the handler has not closed it; 1011 if it raised).
SessionHandler = Callable[[WebSocket, Request, RouteMatch], None]


def session_route(simulator: Simulator, template: str, handler: SessionHandler, api: WireAPI,
                  subprotocols: Sequence[str] = (), keyed: bool = True, max_message_bytes: int = MAX_MESSAGE_BYTES,
                  idle_seconds: float = IDLE_SECONDS, deflate: bool = True) -> Route:
    """The route of a session API at ``template``: upgrade requests only (``GET``, ``Upgrade: websocket``).

    ``subprotocols`` are the ones the API speaks, in preference order: the first the client offers is
    chosen (none offered or none shared: the session has none, as servers that ignore the header do).
    ``keyed`` checks the API's keys before the upgrade, as its plain routes do. ``deflate``: accept
    per-message deflate when the client offers it (False: the offer is declined, as the protocol allows).
    """
    open_session = functools.partial(_open_session, simulator=simulator, handler=handler, api=api,
                                     subprotocols=tuple(subprotocols), max_message_bytes=max_message_bytes,
                                     idle_seconds=idle_seconds, deflate=deflate)
    return Route(template, ("GET",), open_session, api, keyed=keyed, upgrade=True)


def _open_session(request: Request, match: RouteMatch, *, simulator: Simulator, handler: SessionHandler,
                  api: WireAPI, subprotocols: tuple[str, ...], max_message_bytes: int,
                  idle_seconds: float, deflate: bool) -> Response:
    upgrade: WebSocketUpgrade | None = request.environ.get(UPGRADE_KEY)
    if upgrade is None:  # a connection that cannot switch (HTTP/1.0, or a test's own WSGI call)
        return answer_error(simulator, request, api, upgrade_required(request.path))
    try:
        offer = upgrade.check()
    except HandshakeRefused as refused:
        return answer_error(simulator, request, api, SimError(refused.status, refused.why,
                                                              code="websocket_handshake_refused",
                                                              headers=refused.headers))
    fault = simulator.faults.select_handshake(match.route.template, request.headers,
                                              request.environ.get(CREDENTIAL_KEY))
    if fault is not None:
        action = fault.effect.at_handshake(fault)
        if isinstance(action, Fail):  # refused: logged as the request it is, in the API's error shape
            entry = new_record(request)
            entry.api, entry.fault = api.name, fault.kind
            return answer_error(simulator, request, api, action.error, entry)
        if isinstance(action, SessionLimit):
            request.environ[SESSION_LIMIT_KEY] = action.seconds
    offered = set(offer.subprotocols)
    chosen = next((name for name in subprotocols if name in offered), None)
    session = request.environ[SOCKET_KEY] = upgrade.accept(chosen, max_message_bytes, idle_seconds, deflate)
    record = request.environ[SESSION_KEY] = simulator.sessions.opened(match.route.template, api.name,
                                                                      fault.kind if fault is not None else None)
    try:
        handler(session, request, match)
    except ConnectionError:  # a send after the client left: the session has ended, as it records
        pass
    except BaseException:
        session.close(1011, "internal error")
        raise
    finally:
        session.close(1000)
        simulator.sessions.ended(record, session.ended_by, session.close_code, session.messages_received,
                                 session.messages_sent)
    return Response(status=101)  # never sent: the connection switched protocols


def upgrade_required(path: str) -> SimError:
    """The answer to a plain request on a path that serves only sessions: 426, naming the protocol."""
    return SimError(426, f"{path} serves WebSocket sessions: connect with Upgrade: websocket.",
                    code="upgrade_required", headers={"Upgrade": "websocket", "Connection": "Upgrade"})
