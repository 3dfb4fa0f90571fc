"""The HTTP face of a simulator: the route table, dispatch, the generation lifecycle.

Built on pytest-httpserver's ``HTTPServer(threaded=True)`` for its lifecycle
and ``url_for``, and so a test can still add its own ``expect_request(...)``
handlers: one that matches a request answers it, on the simulator's routes
too (it wins over the simulator). Everything here translates
HTTP to :class:`~pytest_llmsim.sim.simulator.Simulator` calls and back.

Routes (:data:`GENERATION_ROUTES` and :meth:`SimulatorServer.add_route`): the
generation routes (OpenAI chat, completions, Responses and embeddings,
Anthropic Messages), ``POST /v1/messages/count_tokens``,
``GET``/``DELETE /v1/responses/{id}``, ``GET /v1/models``,
``GET /v1/models/{id}``, ``GET /health``, ``GET /metrics``, and vLLM's
``POST /tokenize``, ``/detokenize``, ``/v1/load_lora_adapter`` and
``/v1/unload_lora_adapter`` (their handlers: ``info_routes``).
"""

from __future__ import annotations

import functools
import itertools
import os
import threading
import traceback
from collections.abc import Callable
from typing import Any, NamedTuple

from pytest_httpserver import HTTPServer
from werkzeug.wrappers import Request, Response

from ..api import ANTHROPIC_MESSAGES, OPENAI_CHAT, OPENAI_COMPLETIONS, OPENAI_EMBEDDINGS, OPENAI_RESPONSES, WireAPI
from ..api.anthropic_messages import ANTHROPIC_COUNTER
from ..api.azure import (
    AZURE_CHAT,
    AZURE_COMPLETIONS,
    AZURE_EMBEDDINGS,
    AZURE_RESPONSES,
    AZURE_V1_CHAT,
    AZURE_V1_EMBEDDINGS,
    AZURE_V1_RESPONSES,
)
from ..api.bedrock import (
    BEDROCK_CONVERSE,
    BEDROCK_CONVERSE_STREAM,
    BEDROCK_COUNTER,
    BEDROCK_INVOKE,
    BEDROCK_INVOKE_STREAM,
)
from ..api.cohere_v2 import COHERE_CHAT, COHERE_EMBED
from ..api.gemini import GEMINI_COUNTER, GEMINI_EMBED, GEMINI_GENERATE, gemini_key
from ..api.rerank import COHERE_RERANK, VLLM_RERANK, VLLM_SCORE
from ..api.vertex import (
    VERTEX_ANTHROPIC,
    VERTEX_ANTHROPIC_COUNTER,
    VERTEX_COUNTER,
    VERTEX_EMBED,
    VERTEX_GENERATE,
    VERTEX_PREDICT_EMBED,
    vertex_model_prefixes,
)
from ..sim import SimError, wire_json
from ..sim.config import SimConfig
from ..sim.fault_effects import Drop, Empty, Fail, Filter, Slow, Stall
from ..sim.faults import declare_routes_without_generation
from ..sim.simulator import Simulator
from ..sim.tokens import TokenizeError
from .control import CONTROL_PREFIX, ControlAPI
from .exchange import ROUTE_KEY, answer_error, new_record, read_logged_json, untokenizable
from .info_routes import InfoRoutes
from .keepalive import KeepAlivePolicy
from .responder import GenerationResponder
from .routes import Guard, Handler, Route, RouteMatch, RouteTable, request_target
from .sockets import drop_connection
from .wsgi import ACCEPTED_AT, PooledWSGIServer

__all__ = ["GENERATION_ROUTES", "SimulatorServer", "validate_address"]

# Internal errors kept for check(): the first few, with tracebacks but without
# their frames' locals (request bodies), so a server that keeps failing keeps
# flat memory; the rest are only counted.
MAX_KEPT_ERRORS = 8
# How often the serving thread looks for a stop request (socketserver polls).
SHUTDOWN_POLL_SECONDS = 0.05
WORKER_IDLE_SECONDS = 10.0  # a handler thread idle this long retires (a few stay)


def validate_address(host: str, port: int) -> None:
    """Refuse an empty host (every interface) and a port outside 0-65535, with ValueError."""
    if not isinstance(host, str) or not host.strip():
        raise ValueError("host must be a non-empty address such as 127.0.0.1 "
                         "(an empty host would listen on every interface)")
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise ValueError(f"port must be an integer from 0 to 65535 (0 picks a free port), not {port!r}")


# Generation routes: template -> the wire API that parses and renders them. Adding an
# API is adding its module to pytest_llmsim.api and its lines here (or, from a test or a
# plugin, SimulatorServer.add_route).
GENERATION_ROUTES: dict[str, WireAPI] = {
    "/v1/chat/completions": OPENAI_CHAT,
    "/v1/completions": OPENAI_COMPLETIONS,
    "/v1/messages": ANTHROPIC_MESSAGES,
    "/v1/responses": OPENAI_RESPONSES,
    "/v1/embeddings": OPENAI_EMBEDDINGS,
    "/v1beta/models/{model}:{action}": GEMINI_GENERATE,  # generateContent, streamGenerateContent
    "/v1/models/{model}:{action}": GEMINI_GENERATE,
    "/v1beta/models/{model}:embedContent": GEMINI_EMBED,
    "/v1beta/models/{model}:batchEmbedContents": GEMINI_EMBED,
    "/v1/models/{model}:embedContent": GEMINI_EMBED,
    "/v1/models/{model}:batchEmbedContents": GEMINI_EMBED,
    **{f"{prefix}/{{model}}:{action}": api for prefix in vertex_model_prefixes("google") for action, api in (
        ("{action}", VERTEX_GENERATE), ("embedContent", VERTEX_EMBED), ("predict", VERTEX_PREDICT_EMBED))},
    **{f"{prefix}/{{model}}:{{action}}": VERTEX_ANTHROPIC for prefix in vertex_model_prefixes("anthropic")},
    "/model/{model}/converse": BEDROCK_CONVERSE,
    "/model/{model}/converse-stream": BEDROCK_CONVERSE_STREAM,
    "/model/{model}/invoke": BEDROCK_INVOKE,
    "/model/{model}/invoke-with-response-stream": BEDROCK_INVOKE_STREAM,
    "/openai/deployments/{deployment}/chat/completions": AZURE_CHAT,
    "/openai/deployments/{deployment}/completions": AZURE_COMPLETIONS,
    "/openai/deployments/{deployment}/embeddings": AZURE_EMBEDDINGS,
    "/openai/responses": AZURE_RESPONSES,
    "/openai/v1/chat/completions": AZURE_V1_CHAT,
    "/openai/v1/responses": AZURE_V1_RESPONSES,
    "/openai/v1/embeddings": AZURE_V1_EMBEDDINGS,
    "/v2/chat": COHERE_CHAT,
    "/v2/embed": COHERE_EMBED,
    "/v2/rerank": COHERE_RERANK,
    "/v1/rerank": VLLM_RERANK,
    "/rerank": VLLM_RERANK,
    "/v1/score": VLLM_SCORE,
    "/score": VLLM_SCORE,
}


class InfoRoute(NamedTuple):
    """A route that generates nothing: its handler (an ``InfoRoutes`` method) and whose error shape it uses."""

    template: str
    methods: tuple[str, ...]
    handler: Callable[..., Response]  # (InfoRoutes, Request, RouteMatch) -> Response
    api: WireAPI
    accepts: Guard | None = None  # asked of the environ, where two APIs share the path


INFO_ROUTES: tuple[InfoRoute, ...] = (
    InfoRoute("/v1/messages/count_tokens", ("POST",),
              functools.partial(InfoRoutes.count_tokens, counter=ANTHROPIC_COUNTER), ANTHROPIC_MESSAGES),
    InfoRoute("/v1/responses/{id}", ("GET", "DELETE"), InfoRoutes.stored_response, OPENAI_RESPONSES),
    InfoRoute("/v1/models", ("GET",), InfoRoutes.models, OPENAI_CHAT),
    InfoRoute("/v1/models/{id}", ("GET",), InfoRoutes.model, OPENAI_CHAT),
    InfoRoute("/v1/load_lora_adapter", ("POST",), InfoRoutes.load_lora, OPENAI_CHAT),
    InfoRoute("/v1/unload_lora_adapter", ("POST",), InfoRoutes.unload_lora, OPENAI_CHAT),
    InfoRoute("/tokenize", ("POST",), InfoRoutes.tokenize, OPENAI_CHAT),
    InfoRoute("/detokenize", ("POST",), InfoRoutes.detokenize, OPENAI_CHAT),
    InfoRoute("/health", ("GET",), InfoRoutes.health, OPENAI_CHAT),
    InfoRoute("/metrics", ("GET",), InfoRoutes.metrics, OPENAI_CHAT),
    *(route for version in ("v1beta", "v1") for route in (
        InfoRoute(f"/{version}/models/{{model}}:countTokens", ("POST",),
                  functools.partial(InfoRoutes.count_tokens, counter=GEMINI_COUNTER), GEMINI_GENERATE),
        # /v1/models is OpenAI's too: a request with a Google API key gets Gemini's list
        InfoRoute(f"/{version}/models", ("GET",), InfoRoutes.gemini_models, GEMINI_GENERATE,
                  None if version == "v1beta" else gemini_key),
        InfoRoute(f"/{version}/models/{{model}}", ("GET",), InfoRoutes.gemini_model, GEMINI_GENERATE,
                  None if version == "v1beta" else gemini_key),
        InfoRoute(f"/{version}/cachedContents", ("POST", "GET"), InfoRoutes.cached_contents, GEMINI_GENERATE),
        InfoRoute(f"/{version}/cachedContents/{{id}}", ("GET", "DELETE"), InfoRoutes.cached_content,
                  GEMINI_GENERATE))),
    *(route for prefix in vertex_model_prefixes("google") for route in (
        InfoRoute(f"{prefix}/{{model}}:countTokens", ("POST",),
                  functools.partial(InfoRoutes.count_tokens, counter=VERTEX_COUNTER), VERTEX_GENERATE),
        InfoRoute(f"{prefix}/{{model}}", ("GET",),
                  functools.partial(InfoRoutes.gemini_model, prefix="publishers/google/models/"), VERTEX_GENERATE))),
    *(InfoRoute(f"{prefix}/count-tokens:rawPredict", ("POST",),
                functools.partial(InfoRoutes.count_tokens, counter=VERTEX_ANTHROPIC_COUNTER), VERTEX_ANTHROPIC)
      for prefix in vertex_model_prefixes("anthropic")),
    InfoRoute("/model/{model}/count-tokens", ("POST",),
              functools.partial(InfoRoutes.count_tokens, counter=BEDROCK_COUNTER), BEDROCK_CONVERSE),
    InfoRoute("/openai/models", ("GET",), InfoRoutes.models, AZURE_CHAT),
    InfoRoute("/openai/v1/models", ("GET",), InfoRoutes.models, AZURE_V1_CHAT),
    InfoRoute("/openai/v1/models/{id}", ("GET",), InfoRoutes.model, AZURE_V1_CHAT),
)
declare_routes_without_generation(template for template, *_ in INFO_ROUTES)  # only some fault kinds apply there
DEFAULT_API: WireAPI = OPENAI_CHAT  # whose error shape a path outside every route answers in
HTTP_ERROR_CODES = {
    400: "bad_request", 408: "request_timeout", 414: "uri_too_long", 431: "request_header_fields_too_large",
    501: "not_implemented", 503: "service_unavailable", 505: "http_version_not_supported",
}


def content_filtered(api: WireAPI, action: Filter) -> tuple[int, str]:
    """After how many tokens a content filter stops ``api``'s answer, and its finish reason (a blocked
    prompt: 0, ``prompt_filter``); raises the error the API answers with instead, or a 400 where the API
    has no content filter."""
    content_filter = getattr(api, "content_filter", None)
    if content_filter is None:
        raise SimError(400, f"The content_filter fault does not apply to {api.name}: it has no content filter.",
                       code="unsupported_fault")
    error = content_filter(action.message, action.after_tokens is None)
    if error is not None:
        raise error
    return (0, "prompt_filter") if action.after_tokens is None else (action.after_tokens, "content_filter")


class SimulatorServer(HTTPServer):
    """A threaded werkzeug server on loopback answering as an OpenAI-compatible backend."""

    def __init__(self, simulator: Simulator, host: str = "127.0.0.1", port: int = 0) -> None:
        validate_address(host, port)
        super().__init__(host, port, threaded=True)
        self.internal_error_count = 0
        self._worker_idle_seconds = WORKER_IDLE_SECONDS
        self.simulator = simulator
        self.no_handler_status_code = 404
        self._responder = GenerationResponder(simulator)
        self.control = ControlAPI(self)
        self._id_prefix = os.urandom(6).hex()
        self._id_counter = itertools.count(1)
        self.routes = RouteTable()
        for template, api in GENERATION_ROUTES.items():
            self.add_route(template, api)
        info = InfoRoutes(simulator)
        for template, methods, handler, api, accepts in INFO_ROUTES:
            self.routes.add(Route(template, methods, functools.partial(handler, info), api, accepts=accepts))

    def add_route(self, template: str, api: WireAPI, methods: tuple[str, ...] = ("POST",)) -> Route:
        """Serve generation requests to ``template`` with ``api`` (its ``{name}`` parts reach
        ``api.parse`` as path parameters): how a new wire protocol is served."""
        handler: Handler = functools.partial(self._generate, api=api)
        return self.routes.add(Route(template, methods, handler, api, generates=True))

    def api_of_path(self, path: str, environ: dict[str, Any] | None = None) -> WireAPI:
        """The API whose error shape answers ``path``: its route's, else OpenAI's."""
        match = self.routes.match(path, None, environ)
        return match.route.api if match is not None else DEFAULT_API

    def protocol_error_body(self, status: int, message: str, path: str | None) -> bytes:
        """The body of an HTTP-level error (see ``PooledWSGIServer.error_body``), in the path's API's shape."""
        error = SimError(status, message, type="server_error" if status >= 500 else "invalid_request_error",
                         code=HTTP_ERROR_CODES.get(status, "bad_request"))
        _, body, _ = self.api_of_path(path or "").render_error(error)  # the status stays what HTTP says
        return wire_json.dumps(body)

    def _next_id(self) -> str:
        """24 hex digits, unique per server: a random prefix and a counter (uuid4 costs more)."""
        return f"{self._id_prefix}{next(self._id_counter):012x}"

    # --- lifecycle (pytest-httpserver's start, with our request handler) ---

    def start(self) -> None:
        """Listen (port 0 picks a free port) and serve from a daemon thread."""
        if self.is_running():
            raise RuntimeError("the simulator server is already running")
        simulator = self.simulator
        self.server = PooledWSGIServer(self.host, self.port, Request.application(self.application),
                                       request_timeout=lambda: simulator.config.keepalive_timeout,
                                       keepalive_policy=lambda: KeepAlivePolicy(
                                           simulator.config.keepalive, simulator.config.keepalive_max_requests),
                                       error_body=self.protocol_error_body)
        self.server.worker_idle_seconds = self._worker_idle_seconds
        self.port = self.server.port  # a restart after stop() listens on the same port again
        self.server_thread = threading.Thread(target=self.thread_target, name="llmsim-http",
                                              daemon=True)
        self.server_thread.start()

    def thread_target(self) -> None:
        assert self.server is not None
        self.server.serve_forever(poll_interval=SHUTDOWN_POLL_SECONDS)

    def stop(self) -> None:
        """Stop serving: close the listening socket and every open connection (within about 1 s)."""
        server = self.server
        super().stop()
        if server is not None:
            server.server_close()  # idempotent: serve_forever already closed it

    @property
    def worker_count(self) -> int:
        """Handler threads alive now (0 when stopped)."""
        server = self.server
        return server.worker_count if isinstance(server, PooledWSGIServer) else 0

    @property
    def worker_idle_seconds(self) -> float:
        """How long a handler thread waits for a new connection before it retires."""
        return self._worker_idle_seconds

    @worker_idle_seconds.setter
    def worker_idle_seconds(self, seconds: float) -> None:
        self._worker_idle_seconds = seconds
        if isinstance(self.server, PooledWSGIServer):
            self.server.worker_idle_seconds = seconds

    # --- dispatch ---

    def application(self, request: Request) -> Response:
        # werkzeug links the request and its environ both ways; unlinked, both go
        # with their last reference instead of waiting (with the body) for the GC.
        request.environ.pop("werkzeug.request", None)
        try:
            return self._route(request)
        except TokenizeError as error:  # a text tiktoken cannot take: the client's input, logged by tokens
            return self._api_error(request, untokenizable(error, None))
        except Exception as error:
            self._keep_error(error)
            failure = SimError(500, f"pytest-llmsim internal error: {type(error).__name__}: {error}",
                               type="server_error", code="internal_error")
            return self._api_error(request, failure)

    def _keep_error(self, error: Exception) -> None:
        """Keep an internal error for :meth:`check_handler_errors`, bounded in count and size."""
        self.internal_error_count += 1
        if len(self.handler_errors) < MAX_KEPT_ERRORS:
            traceback.clear_frames(error.__traceback__)  # drop locals: the request and its body
            self.handler_errors.append(error)

    def reset_backend(self, config: SimConfig | None = None) -> None:
        """The one reset every handle uses (``LLMBackend.reset``, ``POST /llmsim/v1/reset``): the
        simulator back to its starting settings (or ``config``) with empty state, kept errors forgotten."""
        self.simulator.reset(config)
        self.clear()

    def clear(self) -> None:
        super().clear()
        self.internal_error_count = 0
        self.simulator.runtime.errors.clear()

    def check_handler_errors(self) -> None:
        """Raise the first internal error: a handler's, or one the engine raised (its requests ended)."""
        runtime_errors = self.simulator.runtime.errors
        self.handler_errors.extend(runtime_errors)
        runtime_errors.clear()
        super().check_handler_errors()

    def _route(self, request: Request) -> Response:
        path = request.path
        if path.startswith(CONTROL_PREFIX):
            return self.control.handle(request)
        if (self.ordered_handlers or self.oneshot_handlers or self.handlers) and self._test_handler_matches(request):
            return self._fallback(request)  # a test's own expect_request() wins, on any path
        match = self.routes.match(path, request.method, request.environ)
        if match is None:
            return self._fallback(request)
        route = match.route
        request.environ[ROUTE_KEY] = route.template
        if not match.allowed:
            allowed = ", ".join(route.methods)
            error = SimError(405, f"Method {request.method} is not allowed on {path}; use {allowed}.",
                             code="method_not_allowed", headers={"Allow": allowed})
            return self._api_error(request, error)
        if not route.generates and self.simulator.faults.targets(route.template):
            return self._with_route_fault(request, match)
        return route.handler(request, match)

    def _with_route_fault(self, request: Request, match: RouteMatch) -> Response:
        """A route that generates nothing, while a fault names it: apply the fault, log the request."""
        record = new_record(request)
        fault = self.simulator.faults.select_route(match.route.template)
        record.fault = fault.kind if fault is not None else None
        if fault is not None:
            action = fault.effect.on_request(fault)
            if isinstance(action, Fail):
                return answer_error(self.simulator, request, match.route.api, action.error, record)
            if isinstance(action, Drop):
                self.simulator.finish(record)  # status 0: no response at all
                drop_connection(request)
                return Response(b"", status=500)  # never reaches the client
            before = fault.effect.before_headers(fault, stream=False)
            if isinstance(before, Stall):
                self.simulator.stall(before.seconds)
        empty = fault is not None and isinstance(fault.effect.at_end(fault), Empty)
        response = Response(b"", status=200) if empty else match.route.handler(request, match)
        record.status = response.status_code
        self.simulator.finish(record)
        return response

    def _test_handler_matches(self, request: Request) -> bool:
        """Whether one of the test's ``expect_request`` handlers would answer ``request``."""
        request.get_data()  # matchers may compare the body: keep it for the handler
        if self.oneshot_handlers.match(request) or self.handlers.match(request):
            return True
        return bool(self.ordered_handlers) and self.ordered_handlers[0].matcher.match(request)

    def _fallback(self, request: Request) -> Response:
        """A test's own ``expect_request`` handlers, else a 404 in the path's API's shape."""
        if self.ordered_handlers or self.oneshot_handlers or self.handlers:
            request.get_data()
            response = self.dispatch(request)
            if response.status_code != self.no_handler_status_code or self.handlers.match(request):
                return response
        error = SimError(404, f"Unknown request URL: {request.method} {request.path}.",
                         code="unknown_url")
        return self._api_error(request, error)

    def _api_error(self, request: Request, error: SimError) -> Response:
        return answer_error(self.simulator, request, self.api_of_path(request.path, request.environ), error)

    # --- generation routes ---

    def _generate(self, request: Request, match: RouteMatch, api: WireAPI) -> Response:
        """Any generation route: parse with ``api``, run faults and the simulator, answer in ``api``'s shape."""
        simulator = self.simulator
        record = new_record(request)
        record.api = api.name
        number = simulator.count_request()
        fault = None
        try:
            simulator.check_credentials(record.headers, request.environ.get("QUERY_STRING", ""))
            body = read_logged_json(request, simulator, record)
            if isinstance(body, dict) and isinstance(body.get("model"), str):
                record.model = body["model"]
            record.model = match.params.get("model", record.model)  # an API with the model in its URL
            parsed = api.parse(body, request_target(request.environ, match.params))
            parsed.api = api.name
            record.model = parsed.model or record.model
            record.stream = parsed.stream
            fault = simulator.pick_fault(number, record.headers, parsed, record.route)
            scale = 1.0
            filtered: tuple[int, str] | None = None
            if fault is not None:
                record.fault = fault.kind
                action = fault.effect.on_request(fault)
                if isinstance(action, Fail):
                    raise action.error
                if isinstance(action, Drop):
                    simulator.finish(record)  # status 0: no response at all
                    drop_connection(request)
                    return Response(b"", status=500)  # never reaches the client
                if isinstance(action, Slow):
                    scale = action.factor
                if isinstance(action, Filter):
                    filtered = content_filtered(api, action)
            try:
                generation = simulator.start(parsed, request.environ.get(ACCEPTED_AT), scale, filtered)
            finally:
                record.rule = parsed.rule
        except SimError as error:
            return answer_error(simulator, request, api, error, record)
        except TokenizeError as error:
            return answer_error(simulator, request, api, untokenizable(error, parsed.prompt_param), record)
        return self._responder.respond(request, record, generation, api.id_prefix + self._next_id(), fault, api)
