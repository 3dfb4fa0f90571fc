"""werkzeug's threaded WSGI server with pooled handler threads and Nagle off.

werkzeug starts a thread per connection and closes every connection after
one response, so a client pays a thread start per request. Here finished
handler threads wait for the next connection instead; a new thread starts
only when none is idle, so concurrency stays unbounded like werkzeug's.
"""

from __future__ import annotations

import errno
import http.client
import io
import json
import socket
import ssl
import sys
import threading
import time
from collections.abc import Callable
from http import HTTPStatus
from typing import Any

from werkzeug.serving import DechunkedInput, ThreadedWSGIServer, WSGIRequestHandler

from .chunked import ChunkedBody, transfer_coding_problem
from .environ import origin_form_environ
from .headers import BadHeader, ParsedHeaders, read_headers
from .keepalive import KeepAliveHandler, KeepAlivePolicy
from .request_head import HeadRefused, content_length_problem, split_request_line
from .sockets import SO_TIMESTAMP, CoalescingWriter, PrefixedSocketReader, nonblocking_socket
from .tls import TLSPump, TLSSession, opens_tls, terminate_tls
from .wire import error_response, response_head
from .workers import HeadWatchdog, WorkerPool

__all__ = ["ACCEPTED_AT", "ACCEPT_BACKOFF_ERRORS", "BODY_DEADLINE", "PooledWSGIServer", "QuietRequestHandler",
           "default_error_body", "gevent_patched", "nonblocking_socket"]


# WSGI environ key: time.monotonic() when the request reached the server.
ACCEPTED_AT = "llmsim.accepted_at"
# WSGI environ key: the time.monotonic() by which the request's body must have arrived (see
# PooledWSGIServer.watch_body); a body read that ends short after it is a 408, not a 400.
BODY_DEADLINE = "llmsim.body_deadline"
_accepted = threading.local()  # the accept time of the connection this thread handles, and whether it is TLS

class QuietRequestHandler(KeepAliveHandler):
    """No access log; one packet per flushed write, sent at once (Nagle off); keep-alive."""

    server: PooledWSGIServer
    # Whether the handler is blocked reading from its client (the head deadline cuts only then);
    # None without our reader (no receive stamps): cut whatever the handler is doing.
    _waiting_on_client: Callable[[], bool] | None = None

    def keepalive_policy(self) -> KeepAlivePolicy:
        return self.server.keepalive_policy()

    def handle_one_request(self) -> None:
        if self.requests_served and self.server.cooperative:
            # Under gevent a greenlet runs until it would block; a client that sends its next request
            # at once (wrk, a closed loop) never lets it block, so its connection starved every other
            # (c64: 2 s socket timeouts). Each kept-alive request lets the others have a turn first.
            time.sleep(0)
        if self.requests_served:  # a kept-alive connection: a new deadline for the next request head
            self.server.watch_head(self.connection, self._waiting_on_client)
            if self._reader is not None:  # no stamp unless the next request needs a read of its own
                self._reader.forget_stamp()
        super().handle_one_request()

    def setup(self) -> None:
        # StreamRequestHandler.setup, with our writer in place of its unbuffered one,
        # and a deadline for the request head (see PooledWSGIServer.request_timeout).
        self.connection = self.request
        self.tls = getattr(_accepted, "tls", False)  # TLS terminated: the socket is a local pair's end
        if not self.tls:
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, True)
        self.wfile = CoalescingWriter(self.connection)  # type: ignore[assignment]
        self.arrived_at = getattr(_accepted, "at", None)
        self._reader: PrefixedSocketReader | None = None
        # Over TLS the handshake and the first head share one deadline, from the accept on.
        since = self.arrived_at if self.tls else None
        if SO_TIMESTAMP is None:
            self.server.watch_head(self.connection, since=since)
            self.rfile = self.connection.makefile("rb", self.rbufsize)
            return
        self._reader = reader = PrefixedSocketReader(self.connection)
        self._waiting_on_client = lambda: reader.waiting  # bound once: passed with every request
        self.server.watch_head(self.connection, self._waiting_on_client, since)
        reader.receive_first()
        if reader.received_at is not None:
            self.arrived_at = reader.received_at
        self.rfile = io.BufferedReader(reader)

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """A protocol-level error (bad request line, URL or headers too long): JSON, never HTML.

        Always with a status line, whatever the request line said, and
        ``Connection: close``; the body is the server's ``error_body`` shape.
        """
        path = self.path if isinstance(getattr(self, "path", None), str) else None
        body = self.server.error_body(code, message or HTTPStatus(code).phrase, path)
        self.close_connection = True
        try:
            self.wfile.write(error_response(code, body, head_only=getattr(self, "command", None) == "HEAD"))
            self.wfile.flush()
        except OSError:
            pass  # the client is gone

    def parse_request(self) -> bool:
        """``http.server``'s ``parse_request`` with a lean header parser.

        The standard one runs every header block through the ``email``
        package, a sizeable share of a small request's cost. Same checks,
        same errors (400, 431, 505), same ``HTTPMessage`` result; the
        ``Expect: 100-continue`` answer is werkzeug's, in ``run_wsgi``.
        """
        self.command = None  # type: ignore[assignment]
        self.request_version = self.default_request_version
        self.close_connection = True
        self.requestline = str(self.raw_requestline, "iso-8859-1").rstrip("\r\n")
        try:
            self.command, self.path, version = split_request_line(self.requestline)
        except HeadRefused as refused:
            self.send_error(HTTPStatus(refused.status), refused.why)
            return False
        self.request_version = version or self.request_version
        if self.requests_served:
            # A later request on a kept-alive connection arrived when its bytes reached the host, however late
            # its handler got to them; one pipelined behind the previous (already read with it) arrives now,
            # as an HTTP/1.1 server takes such requests in turn.
            stamp = self._reader.received_at if self._reader is not None else None
            self.arrived_at = stamp if stamp is not None else time.monotonic()
        if self.path.startswith("//"):
            self.path = "/" + self.path.lstrip("/")
        try:
            self.headers = read_headers(self.rfile)
        except http.client.LineTooLong as error:
            self.send_error(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE, "Line too long", str(error))
            return False
        except BadHeader as error:
            self.send_error(HTTPStatus.BAD_REQUEST, f"Bad header: {error}")
            return False
        except http.client.HTTPException as error:
            self.send_error(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE, "Too many headers", str(error))
            return False
        problem = self._framing_problem()
        if problem is not None:
            self.send_error(*problem)
            return False
        return True

    def _framing_problem(self) -> tuple[HTTPStatus, str] | None:
        """What RFC 9112 says to refuse in a request's head: HTTP/1.1 without exactly one Host (§3.2),
        a Transfer-Encoding this server cannot decode (§6.1), or one beside a Content-Length (§6.3)."""
        headers = self.headers
        assert isinstance(headers, ParsedHeaders)  # read_headers' (parse_request above)
        if self.request_version == "HTTP/1.1" and headers.count("host") != 1:
            return HTTPStatus.BAD_REQUEST, "An HTTP/1.1 request needs exactly one Host header"
        lengths = headers.count("content-length")  # from the block's index: get_all() passes over every line
        length = content_length_problem([headers["content-length"]] if lengths == 1 else
                                        headers.get_all("content-length", []) if lengths else [])
        if length is not None:
            return HTTPStatus.BAD_REQUEST, length
        if headers.get("transfer-encoding") is not None:
            codings = headers.get_all("transfer-encoding", [])
            if headers.get("content-length") is not None:
                return HTTPStatus.BAD_REQUEST, "Transfer-Encoding and Content-Length together"
            problem = transfer_coding_problem(codings)
            if problem is not None:
                return HTTPStatus(problem[0]), problem[1]
        return None

    def make_environ(self) -> Any:
        headers = self.headers
        has_body = (headers.get("Content-Length") or "0") != "0" or headers.get("Transfer-Encoding") is not None
        deadline = None
        if has_body and self._waiting_on_client is not None:  # the body gets a deadline of its own
            deadline = self.server.watch_body(self.connection, self._waiting_on_client)
        else:
            self.server.head_read(self.connection)  # the head is in: no deadline from here on
        environ = super().make_environ()
        if isinstance(environ.get("wsgi.input"), DechunkedInput):  # werkzeug's own environ (an absolute URL)
            environ["wsgi.input"] = ChunkedBody(self.rfile)
        environ[ACCEPTED_AT] = self.arrived_at
        environ[BODY_DEADLINE] = deadline
        if self.tls:
            environ["wsgi.url_scheme"] = "https"
        return environ

    def build_environ(self) -> Any:
        """werkzeug's environ, built without its general URL parsing for the usual origin-form path."""
        environ = origin_form_environ(self)
        return super().build_environ() if environ is None else environ

    def write_head(self, code: int, message: str, headers: list[tuple[str, str]]) -> None:
        """The status line and headers as one write (http.server formats and encodes each line apart)."""
        if self.request_version == "HTTP/0.9":
            super().write_head(code, message, headers)
            return
        self.wfile.write(response_head(self.protocol_version, code, message, self.version_string(), headers))

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        pass  # a test session's output is no place for an access log

    def log_error(self, format: str, *args: Any) -> None:
        pass  # malformed requests already get their 4xx answer


# accept() errors that mean "out of resources", not "this client": back off instead
# of spinning, as nginx does, and let finishing connections free descriptors.
ACCEPT_BACKOFF_ERRORS = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)
ACCEPT_BACKOFF = 0.05


def gevent_patched() -> bool:
    """Whether gevent has patched this process's sockets (``llmsim serve --io gevent``)."""
    monkey = sys.modules.get("gevent.monkey")
    return monkey is not None and bool(monkey.is_module_patched("socket"))


class _BindFailed(Exception):
    """Carries an OSError from bind/listen past werkzeug, which would print it and ``sys.exit(1)``."""

    def __init__(self, error: OSError) -> None:
        super().__init__(str(error))
        self.error = error


def default_error_body(status: int, message: str, path: str | None) -> bytes:
    """A protocol error's body when the server is given no ``error_body`` (both cores)."""
    return json.dumps({"error": {"message": message, "code": status}}).encode()


class PooledWSGIServer(ThreadedWSGIServer):
    """``ThreadedWSGIServer`` whose connections are handled by a worker pool.

    Also: a deadline for each request head (``request_timeout``, wall
    seconds, kept by one watchdog thread; sockets stay blocking), JSON for
    protocol-level errors (``error_body``), a backoff when out of
    descriptors, and a prompt close that ends every connection.
    """

    block_on_close = False  # the pool joins its workers in server_close
    # socketserver's default backlog of 5 drops SYNs from a burst of clients,
    # which then retry a second later: a load test's TTFT would show that. 1,024 still
    # overflowed when 1,024 streams connected at once with threads mode's accept loop
    # starved of the GIL (the kernel caps it at net.core.somaxconn, 4,096 on Linux >= 5.4).
    request_queue_size = 4096

    def __init__(self, host: str, port: int, app: Any, handler: type[WSGIRequestHandler] | None = None,
                 request_timeout: Callable[[], float] | None = None,
                 keepalive_policy: Callable[[], KeepAlivePolicy] | None = None,
                 error_body: Callable[[int, str, str | None], bytes] | None = None,
                 tls_context: Callable[[], ssl.SSLContext | None] | None = None, reuse_port: bool = False,
                 **kwargs: Any) -> None:
        # Set before werkzeug's __init__, which binds (and calls server_close() if binding fails).
        self.reuse_port = reuse_port  # SO_REUSEPORT: processes listening on one port share its connections
        self._pool = WorkerPool("llmsim-http-worker")
        self._connections: set[socket.socket] = set()
        self._tls_pump = TLSPump()  # relays every HTTPS connection's bytes, in one thread
        # The certificate's context once HTTPS is served; until then no connection is peeked at.
        self.tls_context: Callable[[], ssl.SSLContext | None] = tls_context or (lambda: None)
        self._connections_lock = threading.Lock()
        self._closed = False
        self._accepted_one = False  # set by get_request: the accept burst goes on while it is
        self.request_timeout: Callable[[], float] = request_timeout or (lambda: 5.0)
        self.keepalive_policy: Callable[[], KeepAlivePolicy] = keepalive_policy or KeepAlivePolicy
        self._watchdog = HeadWatchdog()
        self.error_body = error_body or default_error_body
        self.cooperative = gevent_patched()  # llmsim serve --io gevent: connections are greenlets
        self._spawn: Callable[..., Any] | None = None
        if self.cooperative:
            import gevent  # only once gevent has patched the process: never a dependency of the default

            self._spawn = gevent.spawn
        try:
            super().__init__(host, port, app, handler or QuietRequestHandler, **kwargs)
        except _BindFailed as failure:
            error = failure.error
            raise OSError(error.errno, f"cannot listen on {host}:{port}: {error.strerror or error}") from None
        if SO_TIMESTAMP is not None:  # inherited by accepted sockets; stamps from the first packet on
            self.socket.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMP, 1)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """socketserver's report of a handler's exception, without the ones a connection's end raises.

        A deadline cutting an idle connection (the head watchdog shuts its socket) ends the handler's read
        with an ``OSError`` (under gevent, its ``cancel_wait_ex``: EBADF), as does a client that reset: a
        2.4 KB traceback on stderr for each was noise. Anything else is still reported.
        """
        if isinstance(sys.exc_info()[1], OSError):
            return
        super().handle_error(request, client_address)

    def server_bind(self) -> None:
        try:
            if self.reuse_port:
                self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            super().server_bind()
        except OSError as error:
            raise _BindFailed(error) from None

    def server_activate(self) -> None:
        try:
            super().server_activate()
        except OSError as error:
            raise _BindFailed(error) from None
        self.socket.setblocking(False)  # an accept with none waiting ends the burst (see _handle_request_noblock)

    def get_request(self) -> tuple[socket.socket, Any]:
        try:
            connection, address = self.socket.accept()
        except OSError as error:
            if error.errno in ACCEPT_BACKOFF_ERRORS:
                time.sleep(ACCEPT_BACKOFF)  # the listening socket stays readable: do not spin
            raise
        connection.setblocking(True)  # the listener's non-blocking mode is not the connection's
        self._accepted_one = True
        return connection, address

    def _handle_request_noblock(self) -> None:
        """Accept every connection waiting (up to the backlog's size), not only the first as socketserver
        does: under gevent each wake-up of its select waits for every ready greenlet's turn first."""
        for _ in range(self.request_queue_size):
            self._accepted_one = False
            # socketserver.BaseServer's (typeshed leaves it out): get_request(), then process_request()
            super()._handle_request_noblock()  # type: ignore[misc]
            if not self._accepted_one:  # none waiting (BlockingIOError), or accept() failed
                return

    def watch_head(self, connection: socket.socket, waiting_on_client: Callable[[], bool] | None = None,
                   since: float | None = None) -> None:
        """Start the request-head deadline of ``connection`` (``request_timeout`` seconds from ``since``,
        a ``time.monotonic()``, or from now).

        With ``waiting_on_client``, the deadline cuts the connection only when its handler is
        then blocked reading (see ``HeadWatchdog``); without, whatever the handler is doing.
        """
        start = time.monotonic() if since is None else since
        self._watchdog.watch(connection, start + self.request_timeout(), waiting_on_client)

    def watch_body(self, connection: socket.socket, waiting_on_client: Callable[[], bool]) -> float:
        """Start the request-body deadline of ``connection`` (``request_timeout`` seconds from now); return it.

        At the deadline, a handler still blocked reading the body has the socket's reading side
        shut: its read ends short, and the application answers 408 (``BODY_DEADLINE``).
        """
        deadline = time.monotonic() + self.request_timeout()
        self._watchdog.watch(connection, deadline, waiting_on_client, socket.SHUT_RD)
        return deadline

    def head_read(self, connection: socket.socket) -> None:
        """``connection`` sent its whole request head in time."""
        self._watchdog.release(connection)

    @property
    def worker_count(self) -> int:
        """Handler threads alive now (busy or idle); under gevent, connections served now (a greenlet each)."""
        if self.cooperative:
            with self._connections_lock:
                return len(self._connections)
        return self._pool.size

    @property
    def worker_idle_seconds(self) -> float:
        """How long an idle handler thread waits before it retires."""
        return self._pool.idle_seconds

    @worker_idle_seconds.setter
    def worker_idle_seconds(self, seconds: float) -> None:
        self._pool.idle_seconds = seconds

    def process_request(self, request: Any, client_address: Any) -> None:
        if self._spawn is not None:
            # A greenlet per connection, not waiting for its first turn as a pooled Thread.start() does
            # (up to 0.4 s with the hub busy writing streams: a burst's last connections waited 8 s).
            self._spawn(self._handle, request, client_address, time.monotonic())
            return
        if not self._pool.submit(self._handle, request, client_address, time.monotonic()):
            self._refuse(request)

    def _refuse(self, request: socket.socket) -> None:
        """No thread to serve this connection: answer 503 from the accept thread and close it."""
        body = self.error_body(503, "The server cannot start a thread for this connection; retry later.", None)
        head = (f"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\nRetry-After: 1\r\nConnection: close\r\n\r\n")
        try:
            request.settimeout(0.5)
            request.sendall(head.encode("latin-1") + body)
        except OSError:
            pass
        self.shutdown_request(request)

    def _handle(self, request: socket.socket, client_address: Any, accepted_at: float) -> None:
        _accepted.at = accepted_at
        with self._connections_lock:
            if self._closed:
                self.shutdown_request(request)
                return
            self._connections.add(request)  # from here a close cuts it, a TLS peek's wait included
        context = self.tls_context()
        _accepted.tls = False
        if context is not None and opens_tls(request, self.request_timeout()):
            # The handshake runs here, within the head deadline; the pump relays the session afterwards.
            session = self._terminate_tls(request, context, accepted_at)
            with self._connections_lock:
                self._connections.discard(request)
                if session is None:
                    self.shutdown_request(request)
                    return
                _accepted.tls = True
                request = session.inner  # the handler serves the plain end; the pump owns the client's socket
                self._connections.add(request)
        try:
            self.process_request_thread(request, client_address)
        finally:
            self._watchdog.release(request)
            with self._connections_lock:
                self._connections.discard(request)

    def _terminate_tls(self, request: socket.socket, context: ssl.SSLContext,
                       accepted_at: float) -> TLSSession | None:
        """The TLS session of ``request``, handshaken by its head deadline; None when it was not."""
        return terminate_tls(request, context, accepted_at + self.request_timeout(), self._tls_pump)

    def server_close(self) -> None:
        """Close the listening socket, cut every open connection, and end the workers (at most 1 s).

        Safe to call more than once (werkzeug's ``serve_forever`` calls it, then the owner does).
        """
        with self._connections_lock:
            first = not self._closed
            self._closed = True
            connections = list(self._connections)
        if not first:
            return
        super().server_close()
        self._watchdog.close()
        for connection in connections:  # blocked reads and writes fail at once
            try:
                connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self._tls_pump.close()
        self._pool.close(timeout=1.0)


# Names tests and benchmarks import from here.
_CoalescingWriter = CoalescingWriter
_read_headers = read_headers
