"""The HTTP face of a simulator: the route table, dispatch, the generation lifecycle.

Built on pytest-httpserver's ``HTTPServer`` for its lifecycle and ``url_for``, and so a test can still add
its own ``expect_request(...)`` handlers: one that matches a request answers it, on the simulator's routes
too (it wins over the simulator). Everything here translates HTTP to :class:`~pytest_llmsim.sim.simulator.Simulator`
calls and back. The routes: whatever the API catalog and the jobs declare (``api.catalog``, ``jobs``; see
:mod:`pytest_llmsim.api.routing`), session routes (:meth:`SimulatorServer.add_session`), the control API and the
live page.
"""

from __future__ import annotations

import functools
import io
import itertools
import os
import ssl
import threading
import traceback
import weakref
from collections.abc import Iterable
from typing import Any

from pytest_httpserver import HTTPServer
from werkzeug.wrappers import Request, Response

from ..api.base import WireAPI
from ..api.catalog import API_ROUTES, DEFAULT_API
from ..api.routing import ApiRoute
from ..jobs import Jobs
from ..sim import SimError, fast_json
from ..sim.config import SimConfig
from ..sim.simulator import Simulator
from ..sim.tokens import TokenizeError
from .compression import compressing_app
from .control import CONTROL_PREFIX, ControlAPI
from .exchange import (
    API_KEY,
    CREDENTIAL_KEY,
    RECORD_KEY,
    ROUTE_KEY,
    answer_error,
    untokenizable,
)
from .keepalive import keepalive_policy
from .lean_request import request_application
from .listener import ConnectionServer
from .live_page import is_page_path, page_response, root_index
from .loopback import is_loopback
from .request_life import Lives
from .response_head import HTTP_ERROR_CODES
from .route_calls import route_of
from .routes import Route, RouteTable
from .sessions import SessionHandler, session_route, upgrade_required
from .tls import TLSMaterial

__all__ = ["SimulatorServer", "validate_address"]

# Internal errors kept for check(): the first few, with tracebacks but without their frames' locals
# (request bodies), so a server that keeps failing keeps flat memory; the rest are only counted.
MAX_KEPT_ERRORS = 8
SHUTDOWN_POLL_SECONDS = 0.05  # how often the accept loop looks for a stop request
WORKER_IDLE_SECONDS = 10.0  # a handler thread idle this long retires (a few stay)


def validate_address(host: str, port: int) -> None:
    """Refuse an empty host (every interface) and a port outside 0-65535, with ValueError."""
    if not isinstance(host, str) or not host.strip():
        raise ValueError("host must be a non-empty address such as 127.0.0.1 "
                         "(an empty host would listen on every interface)")
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise ValueError(f"port must be an integer from 0 to 65535 (0 picks a free port), not {port!r}")


class SimulatorServer(HTTPServer):
    """A server on loopback answering as an OpenAI-compatible backend (and every other API it speaks).

    A thread per connection (a greenlet where gevent has patched the process), each framed by
    :class:`~.connection.Connection`; the routes are a werkzeug WSGI application.
    """

    # pytest-httpserver's attribute (its lifecycle reads it), holding our server instead of werkzeug's
    server: ConnectionServer | None  # type: ignore[assignment]

    def __init__(self, simulator: Simulator, host: str = "127.0.0.1", port: int = 0) -> None:
        validate_address(host, port)
        super().__init__(host, port, threaded=True)
        self.internal_error_count = 0
        self._worker_idle_seconds = WORKER_IDLE_SECONDS
        # A fleet on one shared port (llmsim serve --shared-port): the port is bound with SO_REUSEPORT, and the
        # server also listens on a port of its own (its metrics and control API, reached for certain).
        self.reuse_port = False
        self.own_port: int | None = None
        self._own_server: ConnectionServer | None = None
        self.trim_memory = False  # give a wave of closed connections' memory back (llmsim serve sets it)
        self.simulator = simulator
        self.no_handler_status_code = 404
        self.jobs = Jobs(simulator)  # background responses, files and batches
        self._tls: TLSMaterial | None = None  # made when HTTPS is first asked for (tls = true, ca_file)
        self._tls_lock = threading.Lock()
        self.control = ControlAPI(self)
        self._id_prefix = os.urandom(6).hex()
        self._id_counter = itertools.count(1)
        self.lives = Lives(simulator, self.jobs.background, self._next_id)  # each request's life
        self.routes = RouteTable()
        self.add_routes((*API_ROUTES, *self.jobs.routes()))

    def add_routes(self, routes: Iterable[ApiRoute]) -> list[Route]:
        """Serve the routes an API declares (see :mod:`pytest_llmsim.api.routing`): how a new wire protocol
        is served; a route with the template and guard of one served already replaces it."""
        return [self.routes.add(route_of(declared, self.lives)) for declared in routes]

    def add_route(self, template: str, api: WireAPI, methods: tuple[str, ...] = ("POST",)) -> Route:
        """Serve generation requests to ``template`` with ``api`` (its ``{name}`` parts reach ``api.parse``
        as path parameters)."""
        return self.add_routes([ApiRoute(template, api, methods)])[0]

    def add_session(self, template: str, handler: SessionHandler, api: WireAPI = DEFAULT_API,
                    subprotocols: tuple[str, ...] = (), keyed: bool = True, **limits: Any) -> Route:
        """Serve WebSocket sessions at ``template``: an upgrade request there runs ``handler`` with the
        session; ``api`` answers refusals before the upgrade in its shape (``limits``: see :mod:`.sessions`)."""
        return self.routes.add(session_route(self.simulator, template, handler, api, subprotocols, keyed, **limits))

    def api_of_path(self, path: str, environ: dict[str, Any] | None = None) -> WireAPI:
        """The API whose error shape answers ``path``: its route's, else OpenAI's."""
        match = self.routes.match(path, None, environ)
        return match.route.api if match is not None else DEFAULT_API

    def protocol_error_body(self, status: int, message: str, path: str | None) -> bytes:
        """The body of an HTTP-level error (see ``ConnectionServer.error_body``), in the path's API's shape."""
        error = SimError(status, message, type="server_error" if status >= 500 else "invalid_request_error",
                         code=HTTP_ERROR_CODES.get(status, "bad_request"))
        _, body, _ = self.api_of_path(path or "").render_error(error)  # the status stays what HTTP says
        return fast_json.dumps(body)

    # --- HTTPS (tls = true) ---

    @property
    def ca_file(self) -> str:
        """The PEM file of the certificate authority that signed the HTTPS certificate (made on first use)."""
        return self._tls_material().ca_file

    def _tls_material(self) -> TLSMaterial:
        with self._tls_lock:
            if self._tls is None:
                self._tls = TLSMaterial(self.host)
                weakref.finalize(self, self._tls.close)  # the CA file goes with the server (or at exit)
            return self._tls

    def tls_context(self) -> ssl.SSLContext | None:
        """The server certificate's context once HTTPS has been asked for, else None (no peeking)."""
        if self._tls is None and not self.simulator.config.tls:
            return None
        return self._tls_material().context

    def url_for(self, suffix: str) -> str:
        """Absolute URL of ``suffix``: ``https://`` while ``tls`` is on."""
        url = super().url_for(suffix)
        return "https" + url[4:] if self.simulator.config.tls else url

    def _next_id(self) -> str:
        """24 hex digits, unique per server: a random prefix and a counter (uuid4 costs more)."""
        return f"{self._id_prefix}{next(self._id_counter):012x}"

    # --- lifecycle (pytest-httpserver's start, with our request handler) ---

    def start(self) -> None:
        """Listen (port 0 picks a free port) and serve from a daemon thread."""
        if self.is_running():
            raise RuntimeError("the simulator server is already running")
        self.server = self._listen(self.port, self.reuse_port)
        self.port = self.server.port  # a restart after stop() listens on the same port again
        if self.own_port is not None:
            try:
                own = self._own_server = self._listen(self.own_port, False)
            except OSError:
                self.server.server_close()
                self.server = None  # not running: nothing to stop
                raise
            self.own_port = own.port
            threading.Thread(target=own.serve_forever, args=(SHUTDOWN_POLL_SECONDS,), name="llmsim-http-own",
                             daemon=True).start()
        self.server_thread = threading.Thread(target=self.thread_target, name="llmsim-http",
                                              daemon=True)
        self.server_thread.start()

    def _listen(self, port: int, reuse_port: bool) -> ConnectionServer:
        """A listening server: a thread per connection, or a greenlet where gevent has patched the process."""
        simulator = self.simulator
        server = ConnectionServer(
            self.host, port, self.wsgi_app, request_timeout=lambda: simulator.config.keepalive_timeout,
            keepalive_policy=lambda: keepalive_policy(simulator.config.keepalive,
                                                      simulator.config.keepalive_max_requests),
            error_body=self.protocol_error_body, tls_context=self.tls_context, reuse_port=reuse_port,
            trim_memory=self.trim_memory)
        server.worker_idle_seconds = self._worker_idle_seconds
        return server

    def thread_target(self) -> None:
        assert self.server is not None
        self.server.serve_forever(poll_interval=SHUTDOWN_POLL_SECONDS)

    def stop(self) -> None:
        """Stop serving: close the listening socket and every open connection (within about 1 s)."""
        server, own = self.server, self._own_server
        super().stop()
        if server is not None:
            server.server_close()  # idempotent: serve_forever already closed it
        if own is not None:
            own.shutdown()
            own.server_close()
            self._own_server = None

    @property
    def worker_count(self) -> int:
        """Handler threads alive now, or connections served now where each is a greenlet (0 when stopped)."""
        server = self.server
        return server.worker_count if isinstance(server, ConnectionServer) else 0

    @property
    def worker_idle_seconds(self) -> float:
        """How long a handler thread waits for a new connection before it retires."""
        return self._worker_idle_seconds

    @worker_idle_seconds.setter
    def worker_idle_seconds(self, seconds: float) -> None:
        self._worker_idle_seconds = seconds
        if isinstance(self.server, ConnectionServer):
            self.server.worker_idle_seconds = seconds

    # --- dispatch ---

    @functools.cached_property
    def wsgi_app(self) -> Any:
        """The WSGI app every serving mode runs: :meth:`application` behind a lean request object, its answers
        compressed as the ``compression`` setting says."""
        return compressing_app(request_application(self.application), lambda: self.simulator.config.compression)

    def application(self, request: Request) -> Response:
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
        self.jobs.clear()
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
        if is_page_path(path):
            return page_response(request)
        if self.simulator.config.tls and request.environ["wsgi.url_scheme"] != "https":
            return self._api_error(request, SimError(400, "The plain HTTP request was sent to HTTPS port "
                                                          f"(tls is on: use {self.url_for(path)}).",
                                                     code="plain_http_to_https_port"))
        if (self.ordered_handlers or self.oneshot_handlers or self.handlers) and self._test_handler_matches(request):
            return self._fallback(request)  # a test's own expect_request() wins, on any path
        match = self.routes.match(path, request.method, request.environ)
        if match is None:
            return root_index(request) or self._fallback(request)
        route = match.route
        request.environ[ROUTE_KEY], request.environ[API_KEY] = route.template, route.api
        if not match.allowed:
            if match.upgrade_required:
                return self._api_error(request, upgrade_required(path))
            allowed = ", ".join(route.methods)
            error = SimError(405, f"Method {request.method} is not allowed on {path}; use {allowed}.",
                             code="method_not_allowed", headers={"Allow": allowed})
            return self._api_error(request, error)
        if route.keyed or route.stored:
            refusal = self._refused(request, route)
            if refusal is not None:
                return self._identified(request, route.api, refusal)
        if not route.generates and not route.upgrade and self.simulator.faults.targets(route.template):
            return self._identified(request, route.api, self.lives.route_fault(request, match))
        return self._identified(request, route.api, route.handler(request, match))

    def _refused(self, request: Request, route: Route) -> Response | None:
        """A route that generates nothing, asked by a client it does not answer: the refusal, else None (the
        key the client presented is then in the environ, for the stores it owns)."""
        if route.stored and is_loopback(self.host) and not self.control.host_allowed(request.headers.get("Host")):
            return self._api_error(request, SimError(
                403, f"{route.template} answers only to Host localhost, 127.0.0.1, [::1] or the listen address while "
                     f"the backend listens on loopback, not {request.headers.get('Host')!r} (allow more with "
                     f"allowed_hosts, --allowed-hosts).", code="forbidden_host"))
        if route.keyed:
            try:
                request.environ[CREDENTIAL_KEY] = self.simulator.check_credentials(
                    request.headers, request.environ.get("QUERY_STRING", ""))
            except SimError as error:
                return self._api_error(request, error)
        return None

    @staticmethod
    def _identified(request: Request, api: WireAPI, response: Response) -> Response:
        """Put the API's request id header on the answer (unless its error body named one) and in the log."""
        header = api.request_id_header
        if header is None:
            return response
        pairs = response.headers._list  # werkzeug's storage; every request passes here (Headers.get/set: ~3 µs)
        lowered = header.lower()
        request_id = next((value for name, value in pairs if name.lower() == lowered), None)
        if request_id is None:
            request_id = api.new_request_id()
            response.headers.add(header, request_id)
        record = request.environ.get(RECORD_KEY)
        if record is not None:
            record.request_id = request_id
        return response

    def _test_handler_matches(self, request: Request) -> bool:
        """Whether one of the test's ``expect_request`` handlers would answer ``request``."""
        data = request.get_data()  # matchers may compare the body: keep it for the handler
        # ... and for a simulator route, which reads the environ's input itself: it would wait out the body's
        # deadline (408) for bytes already read
        environ = request.environ
        environ["wsgi.input"], environ["CONTENT_LENGTH"] = io.BytesIO(data), str(len(data))
        environ.pop("wsgi.input_terminated", None)
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
        error = SimError(404, f"Unknown request URL: {request.method} {request.path}.", code="unknown_url")
        return self._api_error(request, error)

    def _api_error(self, request: Request, error: SimError) -> Response:
        api = request.environ.get(API_KEY) or self.api_of_path(request.path, request.environ)  # matched once
        return answer_error(self.simulator, request, api, error)
