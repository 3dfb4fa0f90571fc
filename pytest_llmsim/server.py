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
import os
import threading
from collections.abc import Callable
from typing import Any

from pytest_httpserver import HTTPServer
from werkzeug.exceptions import RequestEntityTooLarge
from werkzeug.wrappers import Request, Response

from .faults import HTTP_FAULTS
from .metrics import PROMETHEUS_CONTENT_TYPE
from .protocol import APIError, ParsedRequest, parse_chat, parse_completion
from .records import RequestRecord
from .responses import GenerationResponder, drop_connection, json_response
from .simulator import Simulator
from .wsgi_server import ACCEPTED_AT, PooledWSGIServer

__all__ = ["SimulatorServer"]



def _headers_of(environ: dict[str, Any]) -> dict[str, str]:
    """Request headers as ``Title-Case`` keys (as werkzeug names them), straight from the environ."""
    headers = {key[5:].replace("_", "-").title(): value
               for key, value in environ.items() if key.startswith("HTTP_")}
    for key in ("CONTENT_TYPE", "CONTENT_LENGTH"):
        if environ.get(key):
            headers[key.replace("_", "-").title()] = environ[key]
    return headers


class SimulatorServer(HTTPServer):
    """A threaded werkzeug server on loopback answering as an OpenAI-compatible backend."""

    def __init__(self, simulator: Simulator, host: str = "127.0.0.1", port: int = 0) -> None:
        super().__init__(host, port, threaded=True)
        self.simulator = simulator
        self.no_handler_status_code = 404
        self._responder = GenerationResponder(simulator)
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
                                           Request.application(self.application))
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
        try:
            return self._route(request)
        except Exception as error:
            self.handler_errors.append(error)
            failure = APIError(500, f"pytest-llmsim internal error: {type(error).__name__}: {error}",
                               type="server_error", code="internal_error")
            return self._api_error(request, failure)

    def _route(self, request: Request) -> Response:
        path = request.path
        if path.startswith("/v1/models/"):
            route: tuple[str, Callable[[Request], Response]] | None = ("GET", self._model)
        else:
            route = self._routes.get(path)
        if route is None:
            return self._fallback(request)
        method, handler = route
        if request.method != method and not (method == "GET" and request.method == "HEAD"):
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
        return json_response(error.body(), error.status, error.headers)

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
        number = self.simulator.count_request()
        fault = None
        try:
            body = self._read_json(request)
            record.body = body
            if isinstance(body, dict) and isinstance(body.get("model"), str):
                record.model = body["model"]
            parsed = parse(body)
            record.stream = parsed.stream
            fault = self.simulator.pick_fault(number, record.headers, parsed)
            if fault is not None:
                record.fault = fault.kind
                if fault.kind in HTTP_FAULTS:
                    raise fault.api_error()
                if fault.kind == "drop_before_headers":
                    self.simulator.finish(record)  # status 0: no response at all
                    drop_connection(request)
                    return Response(b"", status=500)  # never reaches the client
            scale = fault.factor if fault is not None and fault.kind == "slow" else 1.0
            generation = self.simulator.start(parsed, request.environ.get(ACCEPTED_AT), scale)
        except APIError as error:
            return self._api_error(request, error, record)
        response_id = ("chatcmpl-" if parsed.kind == "chat" else "cmpl-") + self._next_id()
        return self._responder.respond(request, record, generation, response_id, fault)

    # --- information routes ---

    def _models(self, request: Request) -> Response:
        return json_response({"object": "list", "data": [self._model_card()]})

    def _model(self, request: Request) -> Response:
        model_id = request.path[len("/v1/models/"):]
        if model_id != self.simulator.config.model:
            error = APIError(404, f"The model `{model_id}` does not exist.", code="model_not_found",
                             param="model")
            return self._api_error(request, error)
        return json_response(self._model_card())

    def _model_card(self) -> dict[str, Any]:
        config = self.simulator.config
        return {"id": config.model, "object": "model", "created": 0, "owned_by": "pytest-llmsim",
                "max_model_len": config.max_model_len}

    def _health(self, request: Request) -> Response:
        return Response("", status=200)

    def _metrics(self, request: Request) -> Response:
        return Response(self.simulator.prometheus_text(), status=200,
                        content_type=PROMETHEUS_CONTENT_TYPE)
