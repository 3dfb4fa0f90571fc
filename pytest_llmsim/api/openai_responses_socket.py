"""The Responses API's WebSocket mode (``client.responses.connect()``): ``GET /v1/responses`` upgraded.

Each ``response.create`` message carries the fields of ``POST /v1/responses``
(``stream`` is implied and ignored when sent; ``background`` is refused, as the API refuses it over
WebSocket) and is answered with the same events as the HTTP stream, one text
message each, echoing the message's ``stream_id`` (the connection's lane) when
it has one. Responses run one after another on a connection; a later one may
continue an earlier one (``previous_response_id``). A message that is not JSON,
of an unknown type or with a bad field gets an ``error`` event in the mode's
shape (``{"type": "error", "status": 400, "error": {...}}``) and the session goes
on; a binary message ends it (1003).
"""

from __future__ import annotations

import json
import os
from typing import Any

from ..sim import SimError, fast_json
from .openai_responses import OPENAI_RESPONSES
from .routing import ApiRoute, RouteCall, SessionChannel, SessionClock, event_data, receive_until

__all__ = ["ROUTES", "error_event", "run_responses_socket"]

REFUSED_OVER_SOCKET = {"background": "background responses are not supported over WebSocket"}


def error_event(error: SimError, stream_id: str | None = None) -> str:
    """An error as the WebSocket mode sends it (its HTTP status beside the error object)."""
    _, body, headers = OPENAI_RESPONSES.render_error(error)
    event: dict[str, Any] = {"type": "error", "status": error.status, "error": {**body["error"]}}
    if headers:
        event["error"]["headers"] = headers
    if stream_id is not None:
        event["stream_id"] = stream_id
    return fast_json.dumps(event).decode()


def _create_fields(message: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    """The ``POST /v1/responses`` body of a ``response.create`` message, and its lane (``stream_id``)."""
    stream_id = message.get("stream_id")
    if stream_id is not None and not isinstance(stream_id, str):
        raise SimError(400, "Invalid 'stream_id': expected a string.", param="stream_id", code="invalid_type")
    for name, why in REFUSED_OVER_SOCKET.items():
        if message.get(name) is not None and message.get(name) is not False:
            raise SimError(400, f"Invalid '{name}': {why}.", param=name, code="invalid_value")
    body = {key: value for key, value in message.items() if key not in ("type", "stream_id", "stream", "background")}
    return {**body, "stream": True}, stream_id


def run_responses_socket(session: SessionChannel, call: RouteCall) -> None:
    """Serve one WebSocket connection's ``response.create`` messages until the client closes it."""
    session_id = "ws_" + os.urandom(12).hex()
    clock = SessionClock(call.session_seconds)
    while (message := receive_until(session, clock)) is not None:
        if isinstance(message, bytes):
            session.close(1003, "binary messages are not accepted: send JSON text")
            return
        stream_id = None
        try:
            try:
                event = json.loads(message)
            except ValueError:
                raise SimError(400, "The message is not valid JSON.", code="invalid_json") from None
            if not isinstance(event, dict) or event.get("type") != "response.create":
                kind = event.get("type") if isinstance(event, dict) else None
                raise SimError(400, f"Invalid 'type': {kind!r}; this connection accepts 'response.create'.",
                               param="type", code="invalid_value")
            body, stream_id = _create_fields(event)
            request = OPENAI_RESPONSES.parse(body)
            turn = call.turn(OPENAI_RESPONSES, session_id)
            response_id = turn.start(request, body, message.encode(), session.received_at)
        except SimError as error:
            session.send(error_event(error, stream_id))
            continue
        generation = turn.generation
        assert generation is not None

        def remember(response_id: str = response_id, generation: Any = generation) -> None:
            call.simulator.remember(response_id, generation, OPENAI_RESPONSES.response_body(generation, response_id))

        renderer = OPENAI_RESPONSES.stream(generation, response_id)
        for chunk in turn.events(renderer, remember if request.store else None, as_rendered=stream_id is None):
            sent = event_data(chunk)
            if sent:
                session.send_many(sent if stream_id is None else [_in_lane(data, stream_id) for data in sent])
    if clock.expired:
        session.close(1000, "connection limit reached")


def _in_lane(data: str, stream_id: str) -> str:
    """An event with the ``stream_id`` of the message that created its response."""
    event = json.loads(data)
    event["stream_id"] = stream_id
    return fast_json.dumps(event).decode()


ROUTES = (ApiRoute("/v1/responses", OPENAI_RESPONSES, ("GET",), session=run_responses_socket),)
