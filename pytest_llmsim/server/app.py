"""The HTTP face of a simulator: OpenAI routes, SSE streaming, errors.

Built on pytest-httpserver's ``HTTPServer(threaded=True)`` for its lifecycle
and ``url_for``, and so a test can still add its own ``expect_request(...)``
handlers: one that matches a request answers it, on the simulator's routes
too (it wins over the simulator). Everything here translates
HTTP to :class:`~pytest_llmsim.sim.simulator.Simulator` calls and back.

Routes: the generation routes of :data:`GENERATION_ROUTES` (OpenAI chat,
completions and Responses, Anthropic Messages), ``POST /v1/messages/count_tokens``,
``GET``/``DELETE /v1/responses/{id}``, ``GET /v1/models``,
``GET /v1/models/{id}``, ``GET /health``, ``GET /metrics``, and vLLM's
``POST /tokenize``, ``/detokenize``, ``/v1/load_lora_adapter`` and
``/v1/unload_lora_adapter``.
"""

from __future__ import annotations

import functools
import itertools
import json
import os
import threading
import traceback
from collections.abc import Callable
from typing import Any

from pytest_httpserver import HTTPServer
from werkzeug.datastructures import Headers
from werkzeug.exceptions import BadRequest, RequestEntityTooLarge
from werkzeug.wrappers import Request, Response

from ..api import ANTHROPIC_MESSAGES, OPENAI_CHAT, OPENAI_COMPLETIONS, OPENAI_EMBEDDINGS, OPENAI_RESPONSES, WireAPI
from ..api.anthropic_messages import parse_messages
from ..api.validation import MAX_JSON_DEPTH, json_depth_exceeds, lone_surrogate
from ..api.vllm_extras import detokenize_tokens, lora_fields, tokenize_fields
from ..sim import SimError, wire_json
from ..sim.config import SimConfig
from ..sim.faults import HTTP_FAULTS
from ..sim.metrics import PROMETHEUS_CONTENT_TYPE
from ..sim.request_log import RequestRecord
from ..sim.simulator import Simulator
from ..sim.tokens import TokenizeError
from .control import CONTROL_PREFIX, ControlAPI
from .keepalive import KeepAlivePolicy
from .request_body import BodyTimeout, read_body
from .responder import GenerationResponder, drop_connection, json_response
from .wsgi import ACCEPTED_AT, PooledWSGIServer

__all__ = ["SimulatorServer", "validate_address"]

# Internal errors kept for check(): the first few, with tracebacks but without
# their frames' locals (request bodies), so a server that keeps failing keeps
# flat memory; the rest are only counted.
MAX_KEPT_ERRORS = 8
# How often the serving thread looks for a stop request (socketserver polls).
SHUTDOWN_POLL_SECONDS = 0.05
UNKNOWN_ROUTE = "unknown"
WORKER_IDLE_SECONDS = 10.0  # a handler thread idle this long retires (a few stay)
ROUTE_KEY = "llmsim.route"  # WSGI environ key: the route template that matched


def validate_address(host: str, port: int) -> None:
    """Refuse an empty host (every interface) and a port outside 0-65535, with ValueError."""
    if not isinstance(host, str) or not host.strip():
        raise ValueError("host must be a non-empty address such as 127.0.0.1 "
                         "(an empty host would listen on every interface)")
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise ValueError(f"port must be an integer from 0 to 65535 (0 picks a free port), not {port!r}")


# Generation routes: path -> the wire API that parses and renders them. Adding an
# API is adding its module to pytest_llmsim.api and a line here.
GENERATION_ROUTES: dict[str, WireAPI] = {
    "/v1/chat/completions": OPENAI_CHAT,
    "/v1/completions": OPENAI_COMPLETIONS,
    "/v1/messages": ANTHROPIC_MESSAGES,
    "/v1/responses": OPENAI_RESPONSES,
    "/v1/embeddings": OPENAI_EMBEDDINGS,
}
# Whose error shape each path answers in; paths outside any API get OpenAI's.
API_OF_PATH: dict[str, WireAPI] = {**GENERATION_ROUTES, "/v1/messages/count_tokens": ANTHROPIC_MESSAGES}
DEFAULT_API: WireAPI = OPENAI_CHAT


def _api_of_path(path: str | None) -> WireAPI:
    if path is not None and path.startswith("/v1/responses/"):
        return OPENAI_RESPONSES
    return API_OF_PATH.get(path or "", DEFAULT_API)


def protocol_error_body(status: int, message: str, path: str | None) -> bytes:
    """The body of an HTTP-level error (see ``PooledWSGIServer.error_body``), in the path's API's shape."""
    error = SimError(status, message, type="server_error" if status >= 500 else "invalid_request_error",
                     code=HTTP_ERROR_CODES.get(status, "bad_request"))
    _, body, _ = _api_of_path(path).render_error(error)  # the status stays what HTTP says
    return wire_json.dumps(body)


HTTP_ERROR_CODES = {
    400: "bad_request", 408: "request_timeout", 414: "uri_too_long", 431: "request_header_fields_too_large",
    501: "not_implemented", 503: "service_unavailable", 505: "http_version_not_supported",
}



def _untokenizable(error: TokenizeError, param: str | None) -> SimError:
    return SimError(400, f"The request's text cannot be tokenized: {error}", param=param, code="invalid_text")


class _ReceivedHeaders(Headers):
    """werkzeug's ``Headers`` over pairs the HTTP server already parsed and checked.

    ``Headers(pairs)`` re-validates every value one call at a time (about 5 %
    of a non-streamed request); these values came from the server's header
    parser, so the list is taken as it is. Everything else is ``Headers``.
    """

    def __init__(self, pairs: list[tuple[str, str]]) -> None:
        super().__init__()
        self._list = pairs  # werkzeug's storage: a list of (name, value) pairs

    def get(self, key: Any, default: Any = None, type: Any = None) -> Any:  # type: ignore[override]  # same answers, one signature
        """``Headers.get``; a missing name costs no exception (werkzeug raises and catches
        ``BadRequestKeyError``, a few µs, and every request misses the fault header)."""
        if type is not None or not isinstance(key, str):
            return super().get(key, default, type)
        wanted = key.lower()
        for name, value in self._list:
            if name.lower() == wanted:
                return value
        return default

    def __contains__(self, key: Any) -> bool:
        return self.get(key, _MISSING) is not _MISSING if isinstance(key, str) else super().__contains__(key)


_MISSING = object()


@functools.lru_cache(maxsize=256)
def _header_name(environ_key: str) -> str:
    """``HTTP_X_REQUEST_ID`` -> ``X-Request-Id`` (a server sees few distinct names)."""
    return (environ_key[5:] if environ_key.startswith("HTTP_") else environ_key).replace("_", "-").title()


def _headers_of(environ: dict[str, Any]) -> Headers:
    """Request headers, case-insensitive (werkzeug's ``Headers``), straight from the environ."""
    pairs = [(_header_name(key), value) for key, value in environ.items() if key.startswith("HTTP_")]
    for key in ("CONTENT_TYPE", "CONTENT_LENGTH"):
        if environ.get(key):
            pairs.append((_header_name(key), environ[key]))
    return _ReceivedHeaders(pairs)


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
        # path -> (methods, handler); the route table is data, the same for every API
        self._routes: dict[str, tuple[tuple[str, ...], Callable[[Request], Response]]] = {
            **{path: (("POST",), functools.partial(self._generate, api=api))
               for path, api in GENERATION_ROUTES.items()},
            "/v1/messages/count_tokens": (("POST",), self._count_tokens),
            "/v1/models": (("GET",), self._models),
            "/v1/load_lora_adapter": (("POST",), functools.partial(self._lora, load=True)),
            "/v1/unload_lora_adapter": (("POST",), functools.partial(self._lora, load=False)),
            "/tokenize": (("POST",), self._tokenize),
            "/detokenize": (("POST",), self._detokenize),
            "/health": (("GET",), self._health),
            "/metrics": (("GET",), self._metrics),
        }
        # path prefix -> (route template, route): one path segment after the prefix
        self._prefix_routes: dict[str, tuple[str, tuple[tuple[str, ...], Callable[[Request], Response]]]] = {
            "/v1/models/": ("/v1/models/{id}", (("GET",), self._model)),
            "/v1/responses/": ("/v1/responses/{id}", (("GET", "DELETE"), self._stored_response)),
        }

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
                                       error_body=protocol_error_body)
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
            return self._api_error(request, _untokenizable(error, None))
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
        template, route = path, self._routes.get(path)
        if route is None:
            for prefix, (prefix_template, prefix_route) in self._prefix_routes.items():
                if path.startswith(prefix) and len(path) > len(prefix):
                    template, route = prefix_template, prefix_route
                    break
        if route is None:
            return self._fallback(request)
        request.environ[ROUTE_KEY] = template
        methods, handler = route
        if request.method not in methods and not ("GET" in methods and request.method == "HEAD"):
            allowed = ", ".join(methods)
            error = SimError(405, f"Method {request.method} is not allowed on {path}; use {allowed}.",
                             code="method_not_allowed", headers={"Allow": allowed})
            return self._api_error(request, error)
        if template not in GENERATION_ROUTES and self.simulator.faults.targets(template):
            return self._with_route_fault(request, template, handler)
        return handler(request)

    def _with_route_fault(self, request: Request, template: str,
                          handler: Callable[[Request], Response]) -> Response:
        """A route that generates nothing, while a fault names it: apply the fault, log the request."""
        record = self._new_record(request, None)
        fault = self.simulator.faults.select_route(template)
        record.fault = fault.kind if fault is not None else None
        kind = record.fault
        if fault is not None and (kind in HTTP_FAULTS or kind == "http_error"):
            error = fault.error()
            status, body, headers = _api_of_path(request.path).render_error(error)
            record.status, record.error = status, error.fields()
            self.simulator.finish(record)
            return json_response(body, status, headers)
        if kind == "drop_before_headers":
            self.simulator.finish(record)  # status 0: no response at all
            drop_connection(request)
            return Response(b"", status=500)  # never reaches the client
        if fault is not None and kind == "stall":
            self.simulator.stall(fault.seconds)
        response = Response(b"", status=200) if kind == "empty" else handler(request)
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
        """A test's own ``expect_request`` handlers, else an OpenAI-shaped 404."""
        if self.ordered_handlers or self.oneshot_handlers or self.handlers:
            request.get_data()
            response = self.dispatch(request)
            if response.status_code != self.no_handler_status_code or self.handlers.match(request):
                return response
        error = SimError(404, f"Unknown request URL: {request.method} {request.path}.",
                         code="unknown_url")
        return self._api_error(request, error)

    def _api_error(self, request: Request, error: SimError,
                   record: RequestRecord | None = None) -> Response:
        """Answer ``error`` in the shape of the path's API (and log it, for API paths)."""
        status, body, headers = _api_of_path(request.path).render_error(error)
        if request.path.startswith("/v1/"):
            record = record or self._new_record(request, None)
            record.status = status
            record.error = error.fields()
            self.simulator.finish(record)
        return json_response(body, status, headers)

    @staticmethod
    def _new_record(request: Request, body: Any) -> RequestRecord:
        # The route template, never the path itself: a client must not be able to
        # create a metrics series per URL it makes up.
        return RequestRecord(method=request.method, path=request.path, headers=_headers_of(request.environ),
                             body=body, route=request.environ.get(ROUTE_KEY, UNKNOWN_ROUTE))

    def _read_json(self, request: Request) -> tuple[Any, bytes]:
        """The parsed body and its bytes (reads wait at most ``keepalive_timeout`` each)."""
        request.max_content_length = self.simulator.config.max_body_bytes
        try:
            data = read_body(request.environ, request.max_content_length)
            if data is None:  # no length and not chunked: werkzeug's stream (an empty body)
                data = request.get_data(cache=False)
        except BodyTimeout:
            raise SimError(408, f"The request body did not arrive within {self.simulator.config.keepalive_timeout:g} "
                                f"s of its head (keepalive_timeout).", code="request_timeout",
                           headers={"Connection": "close"}) from None
        except RequestEntityTooLarge:
            raise SimError(413, f"Request body too large: the limit is "
                                f"{self.simulator.config.max_body_bytes} bytes (max_body_bytes).",
                           code="request_too_large") from None
        except (BadRequest, OSError, ValueError) as error:  # short body, bad chunking, timeout
            raise SimError(400, f"The request body could not be read: {error}", code="invalid_body") from None
        try:
            body = json.loads(data)
        except (ValueError, RecursionError):
            raise SimError(400, "We could not parse the JSON body of your request. The API expects "
                                "a JSON payload, but what was sent was not valid JSON.",
                           code="invalid_json") from None
        if json_depth_exceeds(data):
            raise SimError(400, f"The JSON body of your request is nested too deeply "
                                f"(more than {MAX_JSON_DEPTH} levels of objects and arrays).", code="invalid_json")
        where = lone_surrogate(data, body)
        if where is not None:  # nothing that echoes it could be encoded: refused before anything is done
            raise SimError(400, f"Invalid '{where}': the string contains a lone surrogate (an unpaired "
                                f"\\ud800-\\udfff escape), which is not valid Unicode.", param=where,
                           code="invalid_value")
        return body, data

    # --- generation routes ---

    def _generate(self, request: Request, api: WireAPI) -> Response:
        """Any generation route: parse with ``api``, run faults and the simulator, answer in ``api``'s shape."""
        record = self._new_record(request, None)
        record.api = api.name
        number = self.simulator.count_request()
        fault = None
        try:
            body, data = self._read_json(request)
            record.keep_body(body, data, self.simulator.config.max_log_body_bytes)
            if isinstance(body, dict) and isinstance(body.get("model"), str):
                record.model = body["model"]
            parsed = api.parse(body)
            parsed.api = api.name
            record.stream = parsed.stream
            fault = self.simulator.pick_fault(number, record.headers, parsed, record.route)
            if fault is not None:
                record.fault = fault.kind
                if fault.kind in HTTP_FAULTS:
                    raise fault.error()
                if fault.kind == "drop_before_headers":
                    self.simulator.finish(record)  # status 0: no response at all
                    drop_connection(request)
                    return Response(b"", status=500)  # never reaches the client
            scale = fault.factor if fault is not None and fault.kind == "slow" else 1.0
            try:
                generation = self.simulator.start(parsed, request.environ.get(ACCEPTED_AT), scale)
            finally:
                record.rule = parsed.rule
        except SimError as error:
            return self._api_error(request, error, record)
        except TokenizeError as error:
            return self._api_error(request, _untokenizable(error, parsed.prompt_param), record)
        return self._responder.respond(request, record, generation, api.id_prefix + self._next_id(), fault, api)

    # --- information routes ---

    def _count_tokens(self, request: Request) -> Response:
        """Anthropic's token counter: the prompt tokens a Messages request would be charged."""
        record = self._new_record(request, None)
        record.api = "anthropic.count_tokens"
        try:
            body, data = self._read_json(request)
            record.keep_body(body, data, self.simulator.config.max_log_body_bytes)
            parsed = parse_messages(body, require_max_tokens=False)
            record.model = parsed.model
            count = self.simulator.count_prompt(parsed)
        except SimError as error:
            return self._api_error(request, error, record)
        record.status, record.prompt_tokens = 200, count
        self.simulator.finish(record)
        return json_response({"input_tokens": count})

    def _stored_response(self, request: Request) -> Response:
        """``GET`` a stored Responses API answer, or ``DELETE`` it."""
        response_id = request.path[len("/v1/responses/"):]
        stored = self.simulator.conversations.get(response_id)
        if stored is None or (request.method == "DELETE" and not self.simulator.conversations.delete(response_id)):
            return self._api_error(request, SimError(404, f"Response with id '{response_id}' not found.",
                                                     code="response_not_found"))
        if request.method == "DELETE":
            return json_response({"id": response_id, "object": "response", "deleted": True})
        return json_response(stored.body)

    def _models(self, request: Request) -> Response:
        """Every served name: the base model, ``served_models``, then LoRA adapters (``parent`` the base)."""
        return json_response({"object": "list", "data": [self._model_card(name)
                                                         for name in self.simulator.served_models()]})

    def _model(self, request: Request) -> Response:
        model_id = request.path[len("/v1/models/"):]
        if model_id not in self.simulator.served_models():
            error = SimError(404, f"The model `{model_id}` does not exist.", code="model_not_found",
                             param="model")
            return self._api_error(request, error)
        return json_response(self._model_card(model_id))

    def _model_card(self, name: str) -> dict[str, Any]:
        config = self.simulator.config
        adapter_path = self.simulator.adapters.get(name)
        return {"id": name, "object": "model", "created": 0, "owned_by": "pytest-llmsim",
                "root": (adapter_path or name) if adapter_path is not None else config.model,
                "parent": config.model if adapter_path is not None else None,
                "max_model_len": config.max_model_len, "permission": []}

    # --- vLLM's extras ---

    def _lora(self, request: Request, load: bool) -> Response:
        """Load or unload a LoRA adapter; 200 with vLLM's plain-text line."""
        record = self._new_record(request, None)
        try:
            body, data = self._read_json(request)
            record.keep_body(body, data, self.simulator.config.max_log_body_bytes)
            name, path = lora_fields(body, need_path=load)
            if load:
                self.simulator.load_adapter(name, path)
            else:
                self.simulator.unload_adapter(name)
        except SimError as error:
            return self._api_error(request, error, record)
        record.status = 200
        self.simulator.finish(record)
        verb = "added" if load else "removed"
        return Response(f"Success: LoRA adapter '{name}' {verb} successfully.", status=200,
                        content_type="text/plain; charset=utf-8")

    def _tokenize(self, request: Request) -> Response:
        try:
            body, _ = self._read_json(request)
            prompt, messages, with_strings = tokenize_fields(body)
        except SimError as error:
            return self._api_error(request, error)
        tokenizer = self.simulator.tokenizer
        ids = tokenizer.encode(prompt) if prompt is not None else tokenizer.chat_prompt(messages or [])
        strings = [tokenizer.encoding.decode_single_token_bytes(t).decode("utf-8", errors="replace")
                   for t in ids] if with_strings else None
        return json_response({"count": len(ids), "max_model_len": self.simulator.config.max_model_len,
                              "tokens": ids, "token_strs": strings})

    def _detokenize(self, request: Request) -> Response:
        try:
            body, _ = self._read_json(request)
            tokens = detokenize_tokens(body)
            tokenizer = self.simulator.tokenizer
            bad = next((t for t in tokens if not tokenizer.valid_token_id(t)), None)
            if bad is not None:
                raise SimError(400, f"Token id {bad} is not in this model's vocabulary ({tokenizer.name}).",
                               param="tokens", code="invalid_value")
        except SimError as error:
            return self._api_error(request, error)
        return json_response({"prompt": tokenizer.encoding.decode(tokens)})

    def _health(self, request: Request) -> Response:
        return Response("", status=200)

    def _metrics(self, request: Request) -> Response:
        return Response(self.simulator.prometheus_text(), status=200,
                        content_type=PROMETHEUS_CONTENT_TYPE)
