"""WebSocket sessions through the recorder and back: each message either side sent, with its time.

Recording (``relay``): the client's upgrade is offered to the upstream first (its subprotocols and headers, keys
and all: the upstream needs them), so a refusal is passed on as the HTTP answer it is; accepted, the session is
relayed both ways on two threads and every message is kept (``from``: ``client`` or ``server``, ``at``: seconds
after the upgrade was sent); a greeting the upstream sends on opening is read before the client's first message
(:data:`GREETING_WAIT`). Replaying (``replay``): the recorded server messages are sent in order; each waits,
as the recording did, for the client message before it (any message: a replay cannot know what a new client
will say) and then for its own time after that one, divided by ``speed``. The ``websockets`` package is the
client to the upstream (the tests' extra installs it); without it a session is answered 501.
"""

from __future__ import annotations

import json
import ssl
import threading
import time
from collections.abc import Iterable
from typing import Any

from werkzeug.wrappers import Request, Response

from ..server.websocket import UPGRADE_KEY, HandshakeRefused, WebSocketUpgrade
from .cassette import Exchange, SessionMessage

__all__ = ["GREETING_WAIT", "relay", "replay", "unreachable"]

#: How long a relayed session waits for the upstream's greeting (Realtime's ``session.created``) before it
#: reads the client: a client that speaks at once (the openai SDK sends ``session.update`` without
#: waiting) is otherwise recorded first, and its replay withholds the greeting until the client speaks. A session
#: whose server never speaks first (the Responses API's WebSocket mode) has its first message relayed this much
#: later, once.
GREETING_WAIT = 0.25

_DROPPED = frozenset({"host", "connection", "upgrade", "sec-websocket-key", "sec-websocket-version",
                      "sec-websocket-extensions", "sec-websocket-protocol", "content-length", "accept-encoding"})


def unreachable(upstream: str, error: BaseException, environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
    """A 502 naming ``upstream`` and what went wrong reaching it (refused, reset, timed out, TLS), as a gateway
    answers: the server's own answer to an unhandled exception is a bare 500. The error's cause too, where it
    has one (the upstream hung up before answering: websockets' InvalidMessage from an EOFError)."""
    message = f"the recorder could not reach the upstream {upstream}: {type(error).__name__}: {error}"
    cause = error.__cause__ or error.__context__
    if cause is not None and str(cause) not in message:
        message += f" ({type(cause).__name__}: {cause})"
    return _refused(502, json.dumps({"error": {"message": message, "type": "upstream_unreachable"}}), environ,
                    start_response)


def _refused(status: int, text: str, environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
    return Response(text, status=status, content_type="application/json")(environ, start_response)


def relay(upstream: str, request: Request, record: Any, start_response: Any,
          context: ssl.SSLContext | None = None) -> Iterable[bytes]:
    """Relay ``request``'s WebSocket session to ``upstream`` (http(s) base URL), recording it with ``record``
    (called with the finished :class:`~.cassette.Exchange`); ``context``: the TLS context for a wss:// upstream
    (None: the system's)."""
    environ = request.environ
    upgrade: WebSocketUpgrade | None = environ.get(UPGRADE_KEY)
    try:
        from websockets.exceptions import InvalidStatus
        from websockets.sync.client import connect
        from websockets.typing import Subprotocol
    except ImportError:
        return _refused(501, '{"error": {"message": "recording a WebSocket session needs the websockets '
                             'package"}}', environ, start_response)
    if upgrade is None:
        return _refused(426, '{"error": {"message": "this connection cannot switch to WebSocket"}}', environ,
                        start_response)
    try:
        offer = upgrade.check()
    except HandshakeRefused as refused:
        return _refused(refused.status, '{"error": {"message": "WebSocket handshake refused"}}', environ,
                        start_response)
    query = environ.get("QUERY_STRING", "")
    url = "ws" + upstream[4:] + request.path + (f"?{query}" if query else "")
    headers = [(name, value) for name, value in request.headers.items() if name.lower() not in _DROPPED]
    sent, started = time.monotonic(), time.time()
    try:
        offered = [Subprotocol(name) for name in offer.subprotocols] or None
        upstream_ws = connect(url, additional_headers=headers, subprotocols=offered, open_timeout=30,
                              max_size=16 * 1024 * 1024, compression=None,
                              ssl=context if url.startswith("wss:") else None)
    except InvalidStatus as refusal:
        answer = refusal.response
        record(Exchange.recorded("GET", request.path, query, list(request.headers.items()), b"", answer.status_code,
                                 list(answer.headers.raw_items()), [], time.monotonic() - sent, started))
        return Response(bytes(answer.body or b""), status=answer.status_code,
                        headers=[(k, v) for k, v in answer.headers.raw_items()
                                 if k.lower() not in ("content-length", "connection", "transfer-encoding")]
                        )(environ, start_response)
    except Exception as error:  # refused, reset, timed out, a TLS failure, a malformed handshake answer
        return unreachable(upstream, error, environ, start_response)
    session = upgrade.accept(upstream_ws.subprotocol)
    messages: list[SessionMessage] = []
    lock = threading.Lock()

    def keep(side: str, data: str | bytes) -> None:
        with lock:
            messages.append(SessionMessage(time.monotonic() - sent, side, data))

    try:  # a greeting the upstream sends on opening goes first, whatever the client sends at once
        greeting: str | bytes | None = upstream_ws.recv(timeout=GREETING_WAIT)
    except Exception:  # none in time (TimeoutError), or the upstream closed already (the loop below ends it)
        greeting = None
    if greeting is not None:
        keep("server", greeting)
        session.send(greeting)

    def from_client() -> None:
        try:
            while (message := session.receive()) is not None:
                keep("client", message)
                upstream_ws.send(message)
        except Exception:  # the upstream went away: its side ends the session
            pass
        finally:
            upstream_ws.close()

    client_thread = threading.Thread(target=from_client, name="llmsim-record-session", daemon=True)
    client_thread.start()
    code, reason = 1000, ""
    try:
        for message in upstream_ws:
            keep("server", message)
            session.send(message)
    except Exception:
        pass
    finally:
        if upstream_ws.close_code is not None:
            code, reason = upstream_ws.close_code, upstream_ws.close_reason or ""
        session.close(code if code != 1005 else 1000, reason)
        client_thread.join(timeout=30)
        response_headers = [("sec-websocket-protocol", str(upstream_ws.subprotocol))] if upstream_ws.subprotocol else []
        exchange = Exchange.recorded("GET", request.path, query, list(request.headers.items()), b"", 101,
                                     response_headers, [], time.monotonic() - sent, started)
        exchange.messages = messages
        exchange.close_code = code
        record(exchange)
    return Response(status=101)(environ, start_response)  # never sent: the connection switched protocols


def replay(exchange: Exchange, request: Request, speed: float, start_response: Any) -> Iterable[bytes]:
    """Play a recorded session's server messages to a new client, paced by its messages (see the module's text)."""
    environ = request.environ
    upgrade: WebSocketUpgrade | None = environ.get(UPGRADE_KEY)
    if upgrade is None:
        return _refused(426, '{"error": {"message": "this connection cannot switch to WebSocket"}}', environ,
                        start_response)
    chosen = dict((k.lower(), v) for k, v in exchange.response_headers).get("sec-websocket-protocol")
    try:
        offered = upgrade.check().subprotocols
    except HandshakeRefused as refused:
        return _refused(refused.status, '{"error": {"message": "WebSocket handshake refused"}}', environ,
                        start_response)
    session = upgrade.accept(chosen if chosen in offered else None)
    anchor_wall, anchor_recorded = time.monotonic(), 0.0
    try:
        for message in exchange.messages:
            if message.side == "client":
                if session.receive() is None:
                    break
                anchor_wall, anchor_recorded = time.monotonic(), message.at
                continue
            wait = anchor_wall + (message.at - anchor_recorded) / speed - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            session.send(message.data)
    except ConnectionError:
        pass
    finally:
        session.close(exchange.close_code or 1000)
    return Response(status=101)(environ, start_response)  # never sent: the connection switched protocols
