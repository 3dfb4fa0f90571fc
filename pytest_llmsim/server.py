"""The HTTP face of a simulator: OpenAI routes, SSE streaming, errors.

Built on pytest-httpserver's ``HTTPServer(threaded=True)`` for its lifecycle
and ``url_for``, and so a test can still add its own ``expect_request(...)``
handlers for routes the simulator does not serve. Everything here translates
HTTP to :class:`~pytest_llmsim.simulator.Simulator` calls and back.

Routes: ``POST /v1/chat/completions``, ``POST /v1/completions``,
``GET /v1/models``, ``GET /v1/models/<id>``, ``GET /health``, ``GET /metrics``.
"""

from __future__ import annotations

import itertools
import json
from json.encoder import encode_basestring_ascii  # type: ignore[attr-defined]
import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from pytest_httpserver import HTTPServer
from werkzeug.exceptions import RequestEntityTooLarge
from werkzeug.wrappers import Request, Response

from .engine import SeqState
from .metrics import PROMETHEUS_CONTENT_TYPE
from .protocol import (
    APIError, ParsedRequest, chat_chunk, chat_response, completion_chunk, completion_response,
    parse_chat, parse_completion,
)
from .records import RequestRecord
from .runtime import FINISH
from .simulator import Generation, Simulator
from .wsgi_server import ACCEPTED_AT, PooledWSGIServer

__all__ = ["SimulatorServer"]

JSON = "application/json"
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
DONE = b"data: [DONE]\n\n"


def _headers_of(environ: dict[str, Any]) -> dict[str, str]:
    """Request headers as ``Title-Case`` keys (as werkzeug names them), straight from the environ."""
    headers = {key[5:].replace("_", "-").title(): value
               for key, value in environ.items() if key.startswith("HTTP_")}
    for key in ("CONTENT_TYPE", "CONTENT_LENGTH"):
        if environ.get(key):
            headers[key.replace("_", "-").title()] = environ[key]
    return headers


def _json_response(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(json.dumps(body), status=status, headers=headers, content_type=JSON)


def _sse(body: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(body, separators=(",", ":")).encode() + b"\n\n"


class _StreamEvents:
    """The SSE events of one streamed response, as bytes.

    Token events are the hot path: each choice's event is a template cut
    around its text, so a token costs one string escape, not a JSON dump.
    """

    _MARK = "\x00llmsim-piece\x00"

    def __init__(self, generation: Generation, response_id: str) -> None:
        request = generation.request
        self._generation = generation
        self._chat = request.kind == "chat"
        self._make = chat_chunk if self._chat else completion_chunk
        self._id, self._model, self._created = response_id, request.model, int(time.time())
        self._usage = request.include_usage
        self._templates: dict[int, tuple[bytes, bytes]] = {}

    def _event(self, choice: dict[str, Any]) -> bytes:
        return _sse(self._make(self._id, self._model, self._created, [choice], self._usage))

    def _choice(self, index: int, text: str, finish: str | None = None) -> dict[str, Any]:
        if self._chat:
            return {"index": index, "delta": {"content": text} if finish is None else {},
                    "finish_reason": finish}
        return {"index": index, "text": text, "finish_reason": finish}

    def opening(self, index: int) -> bytes:
        """The role event (chat) or the echoed prompt (completions with ``echo``)."""
        if self._chat:
            return self._event({"index": index, "delta": {"role": "assistant", "content": ""},
                                "finish_reason": None})
        prefix = self._generation.echo_prefixes[index]
        return self._event(self._choice(index, prefix)) if prefix else b""

    def token(self, index: int, piece: str) -> bytes:
        template = self._templates.get(index)
        if template is None:
            head, tail = self._event(self._choice(index, self._MARK)).split(
                encode_basestring_ascii(self._MARK).encode())
            template = self._templates[index] = (head, tail)
        return template[0] + encode_basestring_ascii(piece).encode() + template[1]

    def finish(self, index: int) -> bytes:
        reason = self._generation.outputs[index].finish_reason
        return self._event(self._choice(index, "", reason))

    def usage(self) -> bytes:
        """The usage-only event (empty ``choices``) sent before ``[DONE]``."""
        return _sse(self._make(self._id, self._model, self._created, [], True, self._generation.usage()))


class SimulatorServer(HTTPServer):
    """A threaded werkzeug server on loopback answering as an OpenAI-compatible backend."""

    def __init__(self, simulator: Simulator, host: str = "127.0.0.1", port: int = 0) -> None:
        super().__init__(host, port, threaded=True)
        self.simulator = simulator
        self.no_handler_status_code = 404
        self._id_prefix = os.urandom(6).hex()
        self._id_counter = itertools.count(1)
        self._routes: dict[str, tuple[str, Callable[[Request], Response]]] = {
            "/v1/chat/completions": ("POST", self._chat),
            "/v1/completions": ("POST", self._completions),
            "/v1/models": ("GET", self._models),
            "/health": ("GET", self._health),
            "/metrics": ("GET", self._metrics),
        }

    def _next_id(self) -> str:
        """24 hex digits, unique per server: a random prefix and a counter (uuid4 costs more)."""
        return f"{self._id_prefix}{next(self._id_counter):012x}"

    # --- lifecycle (pytest-httpserver's start, with our request handler) ---

    def start(self) -> None:
        """Listen (port 0 picks a free port) and serve from a daemon thread."""
        if self.is_running():
            raise RuntimeError("the simulator server is already running")
        try:
            self.server = PooledWSGIServer(self.host, self.port,
                                           Request.application(self.application))  # type: ignore[arg-type]
        except SystemExit:  # werkzeug exits the process when the port is taken
            raise OSError(f"cannot listen on {self.host}:{self.port}: address already in use") from None
        self.port = self.server.port
        self.server_thread = threading.Thread(target=self.thread_target, name="llmsim-http",
                                              daemon=True)
        self.server_thread.start()

    def stop(self) -> None:
        """Stop serving and close the listening socket."""
        server = self.server
        super().stop()
        if server is not None:
            server.server_close()

    # --- dispatch ---

    def application(self, request: Request) -> Response:
        path = request.path
        if path.startswith("/v1/models/"):
            route: tuple[str, Callable[[Request], Response]] | None = ("GET", self._model)
        else:
            route = self._routes.get(path)
        if route is None:
            return self._fallback(request)
        method, handler = route
        if request.method != method:
            error = APIError(405, f"Method {request.method} is not allowed on {path}; use {method}.",
                             code="method_not_allowed", headers={"Allow": method})
            return self._api_error(request, error)
        return handler(request)

    def _fallback(self, request: Request) -> Response:
        """A test's own ``expect_request`` handlers, else an OpenAI-shaped 404."""
        if self.ordered_handlers or self.oneshot_handlers or self.handlers:
            request.get_data()
            response = self.dispatch(request)
            if response.status_code != self.no_handler_status_code or self.handlers.match(request):
                return response
        error = APIError(404, f"Unknown request URL: {request.method} {request.path}.",
                         code="unknown_url")
        return self._api_error(request, error)

    def _api_error(self, request: Request, error: APIError,
                   record: RequestRecord | None = None) -> Response:
        if request.path.startswith("/v1/"):
            record = record or self._new_record(request, None)
            record.status = error.status
            record.error = error.body()["error"]
            self.simulator.finish(record)
        return _json_response(error.body(), error.status, error.headers)

    @staticmethod
    def _new_record(request: Request, body: Any) -> RequestRecord:
        return RequestRecord(method=request.method, path=request.path,
                             headers=_headers_of(request.environ), body=body)

    def _read_json(self, request: Request) -> Any:
        request.max_content_length = self.simulator.config.max_body_bytes
        try:
            data = request.get_data(cache=True)
        except RequestEntityTooLarge:
            raise APIError(413, f"Request body too large: the limit is "
                                f"{self.simulator.config.max_body_bytes} bytes (max_body_bytes).",
                           code="request_too_large") from None
        try:
            return json.loads(data)
        except ValueError:
            raise APIError(400, "We could not parse the JSON body of your request. The OpenAI API "
                                "expects a JSON payload, but what was sent was not valid JSON.",
                           code="invalid_json") from None

    # --- generation routes ---

    def _chat(self, request: Request) -> Response:
        return self._generate(request, parse_chat)

    def _completions(self, request: Request) -> Response:
        return self._generate(request, parse_completion)

    def _generate(self, request: Request, parse: Callable[[Any], ParsedRequest]) -> Response:
        record = self._new_record(request, None)
        try:
            body = self._read_json(request)
            record.body = body
            if isinstance(body, dict) and isinstance(body.get("model"), str):
                record.model = body["model"]
            parsed = parse(body)
            record.stream = parsed.stream
            generation = self.simulator.start(parsed, request.environ.get(ACCEPTED_AT))
        except APIError as error:
            return self._api_error(request, error, record)
        response_id = ("chatcmpl-" if parsed.kind == "chat" else "cmpl-") + self._next_id()
        if parsed.stream:
            record.status = 200
            stream = self._stream(generation, record, response_id)
            return Response(stream, status=200, content_type="text/event-stream; charset=utf-8",
                            headers=SSE_HEADERS)
        generation.ticket.wait()
        record.status = 200
        self.simulator.finish(record, generation)
        texts = [prefix + output.text for prefix, output in zip(generation.echo_prefixes, generation.outputs)]
        reasons = [generation.outputs[i].finish_reason for i in range(len(texts))]
        build = chat_response if parsed.kind == "chat" else completion_response
        return _json_response(build(response_id, parsed.model, texts, reasons, generation.usage()))

    def _stream(self, generation: Generation, record: RequestRecord, response_id: str) -> Iterator[bytes]:
        """SSE events as the engine releases tokens; every batch already due goes in one write."""
        events = _StreamEvents(generation, response_id)
        started = [False] * len(generation.outputs)
        sent = [0] * len(generation.outputs)  # tokens written, per choice
        complete = aborted = False
        try:
            yield b""  # send the headers now, as a real server does on admission
            for batch in generation.ticket.batches():
                out = []
                for kind, seq, emitted in batch:
                    index = seq.index
                    if not started[index]:
                        started[index] = True
                        out.append(events.opening(index))
                    pieces = generation.outputs[index].pieces
                    out.extend(events.token(index, piece) for piece in pieces[sent[index]:emitted])
                    sent[index] = max(sent[index], emitted)
                    if kind == FINISH:
                        if seq.state is SeqState.FINISHED:
                            out.append(events.finish(index))
                        else:
                            aborted = True
                yield b"".join(out)
            if aborted:
                return  # the backend was reset under this stream: end it without [DONE]
            tail = events.usage() if generation.request.include_usage else b""
            # Account before the client can see [DONE], so a test that reads
            # the metrics right after its stream ends finds this request.
            complete = True
            self.simulator.finish(record, generation)
            yield tail + DONE
        finally:
            if not complete:
                self.simulator.cancel(generation)
                generation.ticket.wait()
                self.simulator.finish(record, generation)

    # --- information routes ---

    def _models(self, request: Request) -> Response:
        return _json_response({"object": "list", "data": [self._model_card()]})

    def _model(self, request: Request) -> Response:
        model_id = request.path[len("/v1/models/"):]
        if model_id != self.simulator.config.model:
            error = APIError(404, f"The model `{model_id}` does not exist.", code="model_not_found",
                             param="model")
            return self._api_error(request, error)
        return _json_response(self._model_card())

    def _model_card(self) -> dict[str, Any]:
        config = self.simulator.config
        return {"id": config.model, "object": "model", "created": 0, "owned_by": "pytest-llmsim",
                "max_model_len": config.max_model_len}

    def _health(self, request: Request) -> Response:
        return Response("", status=200)

    def _metrics(self, request: Request) -> Response:
        return Response(self.simulator.prometheus_text(), status=200,
                        content_type=PROMETHEUS_CONTENT_TYPE)
