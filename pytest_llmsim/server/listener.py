"""The listening socket of every serving mode, and who runs each connection it accepts.

One server class for all three ``--io`` modes; they differ only in how a
connection is run and how it waits, never in how it is framed (that is
:class:`~.connection.Connection`'s job, the same in every mode):

- ``threads`` (the embedded default): a thread per connection from a pool
  whose idle threads retire; a connection no thread can be started for gets a
  503 from the accept loop. Waits are blocking calls with socket timeouts.
- ``gevent`` and ``loop`` (``llmsim serve --io gevent|loop``, a process gevent
  has patched): a greenlet per connection, spawned at once; the same calls
  wait on gevent's loop, a receive with a timeout at the deadline. The two names run the same server (``gevent`` is
  kept so existing command lines keep working).

TLS is terminated here, in the connection's own thread or greenlet, within its
first head's deadline; one pump relays every HTTPS session afterwards.
"""

from __future__ import annotations

import errno
import json
import socket
import ssl
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from .connection import Connection
from .keepalive import KeepAlivePolicy
from .memory_trim import WaveTrimmer
from .pod_identity import identity_headers
from .sockets import SO_TIMESTAMP
from .tls import TLSPump, opens_tls, terminate_tls
from .workers import HeadWatchdog, WorkerPool

__all__ = ["ACCEPT_BACKOFF_ERRORS", "ConnectionServer", "default_error_body", "gevent_patched"]

# The listen backlog: a burst of a thousand clients connects at once (socketserver's 5 dropped SYNs, and
# the clients retried a second later). The kernel caps it at net.core.somaxconn (4,096 on Linux >= 5.4).
BACKLOG = 4096
# accept() errors that mean "out of resources", not "this client": back off instead of spinning, as
# nginx does, and let finishing connections free descriptors.
ACCEPT_BACKOFF_ERRORS = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)
ACCEPT_BACKOFF = 0.05


def gevent_patched() -> bool:
    """Whether gevent has patched this process's sockets (``llmsim serve --io gevent|loop``)."""
    monkey = sys.modules.get("gevent.monkey")
    return monkey is not None and bool(monkey.is_module_patched("socket"))


def gevent_yield() -> Callable[[], None]:
    """A function that gives the calling greenlet's turn to the others ready to run, and returns when theirs
    are done: ``gevent.sleep(0)`` without the waiter object it makes each time (0.9 against 1.7-2.1 µs a
    call, paid once per kept-alive request)."""
    from gevent import getcurrent
    from gevent.hub import get_hub

    def yield_turn() -> None:
        hub = get_hub()
        resume = hub.loop.run_callback(getcurrent().switch)
        try:
            hub.switch()
        except BaseException:  # killed while waiting its turn: the resume must not wake a later wait
            resume.stop()
            raise

    return yield_turn


def default_error_body(status: int, message: str, path: str | None) -> bytes:
    """A protocol error's body when the server is given no ``error_body``."""
    return json.dumps({"error": {"message": message, "code": status}}).encode()


class ConnectionServer:
    """Listens on ``host:port`` and serves ``app`` (WSGI), one :class:`~.connection.Connection` per client.

    ``cooperative`` (a greenlet per connection) is the default where gevent has patched the process,
    and can only be chosen there. ``trim_memory`` gives the memory of a wave of closed connections back to
    the system (:mod:`.memory_trim`). The interface is what :class:`~.app.SimulatorServer` drives:
    ``serve_forever``, ``shutdown``, ``server_close``, ``port``, ``worker_count``.
    """

    def __init__(self, host: str, port: int, app: Callable[..., Any],
                 request_timeout: Callable[[], float] | None = None,
                 keepalive_policy: Callable[[], KeepAlivePolicy] | None = None,
                 error_body: Callable[[int, str, str | None], bytes] | None = None,
                 tls_context: Callable[[], ssl.SSLContext | None] | None = None, reuse_port: bool = False,
                 cooperative: bool | None = None, trim_memory: bool = False) -> None:
        patched = gevent_patched()
        if cooperative and not patched:
            raise RuntimeError("a greenlet per connection runs only where gevent has patched the process "
                               "(llmsim serve --io gevent or --io loop)")
        self.cooperative = patched if cooperative is None else cooperative
        self.multithread = not self.cooperative  # the environ's wsgi.multithread
        self.app = app
        self.request_timeout: Callable[[], float] = request_timeout or (lambda: 5.0)
        self.keepalive_policy: Callable[[], KeepAlivePolicy] = keepalive_policy or KeepAlivePolicy
        self.error_body = error_body or default_error_body
        self.tls_context: Callable[[], ssl.SSLContext | None] = tls_context or (lambda: None)
        self.identity_headers = identity_headers()  # x-inference-pod, from POD_NAME (a replica in Kubernetes)
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.socket = socket.socket(family, socket.SOCK_STREAM)
        try:
            self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if reuse_port:  # processes listening on one port share its connections (--shared-port)
                self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            self.socket.bind((host, port))
            self.socket.listen(BACKLOG)
        except OSError as error:
            self.socket.close()
            raise OSError(error.errno, f"cannot listen on {host}:{port}: {error.strerror or error}") from None
        if SO_TIMESTAMP is not None:  # inherited by accepted sockets: stamps from the first packet on
            self.socket.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMP, 1)
        self.server_address: tuple[str, int] = self.socket.getsockname()[:2]
        self.port = self.server_address[1]
        self._connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()
        self._pool = WorkerPool("llmsim-http-worker")
        # Threads: deadlines by one watchdog, sockets blocking; greenlets: a timeout on each receive (gevent's
        # waits are timed on its loop anyway).
        self.watchdog: HeadWatchdog | None = None if self.cooperative else HeadWatchdog()
        self._spawn: Callable[..., Any] | None = None
        # Greenlets: what a connection calls between kept-alive requests so that one busy client cannot
        # starve the others; threads: None (the interpreter switches them).
        self.yield_turn: Callable[[], None] | None = None
        if self.cooperative:
            import gevent  # only where gevent has patched the process: never a dependency of the default

            self._spawn = gevent.spawn
            self.yield_turn = gevent_yield()
        self._tls_pump = TLSPump()  # relays every HTTPS connection's bytes, in one thread (or greenlet)
        # A process that only serves gives a wave's freed memory back (llmsim serve; not a test process: the
        # full collection that goes first can take a test session's imports ~280 ms).
        self._trimmer = WaveTrimmer() if trim_memory else None
        self._closed = False
        self._stop = threading.Event()
        self._stopped = threading.Event()
        self._stopped.set()

    @property
    def worker_count(self) -> int:
        """Handler threads alive now (busy or idle); cooperatively, connections served now (a greenlet each)."""
        if self.cooperative:
            return len(self._connections)
        return self._pool.size

    @property
    def worker_idle_seconds(self) -> float:
        """How long an idle handler thread waits for a new connection before it retires."""
        return self._pool.idle_seconds

    @worker_idle_seconds.setter
    def worker_idle_seconds(self, seconds: float) -> None:
        self._pool.idle_seconds = seconds

    def serve_forever(self, poll_interval: float = 0.5) -> None:
        """Accept connections until :meth:`shutdown` (looked for every ``poll_interval`` seconds)."""
        self._stop.clear()
        self._stopped.clear()
        listener = self.socket
        listener.settimeout(poll_interval)
        try:
            while not self._stop.is_set():
                try:
                    sock, address = listener.accept()
                except TimeoutError:
                    continue
                except OSError as error:
                    if self._closed:
                        return
                    if error.errno in ACCEPT_BACKOFF_ERRORS:
                        time.sleep(ACCEPT_BACKOFF)  # out of descriptors: let finishing connections free some
                    continue
                accepted_at = time.monotonic()
                if self._spawn is not None:
                    # At once, not waiting for a first turn as a pooled Thread.start() does under gevent
                    # (up to 0.4 s with the hub busy writing streams: a burst's last connections waited 8 s).
                    self._spawn(self._serve, sock, address, accepted_at)
                elif not self._pool.submit(self._serve, sock, address, accepted_at):
                    self._refuse(sock)
        finally:
            self._stopped.set()

    def shutdown(self) -> None:
        """Stop accepting; returns once :meth:`serve_forever` has returned."""
        self._stop.set()
        self._stopped.wait()

    def _refuse(self, sock: socket.socket) -> None:
        """No thread can be started for this connection: a 503 from the accept loop, then close it."""
        body = self.error_body(503, "The server cannot start a thread for this connection; retry later.", None)
        head = (f"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\nRetry-After: 1\r\nConnection: close\r\n\r\n")
        try:
            sock.settimeout(0.5)
            sock.sendall(head.encode("latin-1") + body)
        except OSError:
            pass
        sock.close()

    def _track(self, sock: socket.socket) -> bool:
        """Count ``sock`` among the open connections (a close cuts it); False once the server is closed."""
        with self._connections_lock:
            if self._closed:
                return False
            self._connections.add(sock)
            now_open = len(self._connections)
        if self._trimmer is not None:
            self._trimmer.opened(now_open)
        return True

    def forget(self, sock: socket.socket) -> None:
        """``sock``'s connection is closing: a server close no longer needs to cut it."""
        with self._connections_lock:
            if sock not in self._connections:
                return
            self._connections.discard(sock)
            still_open = len(self._connections)
        if self._trimmer is not None:
            self._trimmer.closed(still_open)  # after a wave of closes, the freed heap goes back to the system

    def _serve(self, sock: socket.socket, address: Any, accepted_at: float) -> None:
        if not self._track(sock):  # from here a close cuts it, a TLS peek's wait included
            sock.close()
            return
        context = self.tls_context()
        tls = context is not None and opens_tls(sock, self.request_timeout())
        if tls:
            # The handshake runs here, within the head deadline; the pump relays the session afterwards.
            assert context is not None
            session = terminate_tls(sock, context, accepted_at + self.request_timeout(), self._tls_pump)
            self.forget(sock)
            if session is None:
                sock.close()
                return
            sock = session.inner  # served on the plain end; the pump owns the client's socket
            if not self._track(sock):
                sock.close()
                return
        else:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, True)
            except OSError:  # the client is already gone
                pass
        try:
            Connection(self, sock, address, accepted_at, tls).serve()
        finally:
            self.forget(sock)

    def server_close(self) -> None:
        """Close the listening socket, cut every open connection and end the workers (at most 1 s).

        Safe to call more than once.
        """
        with self._connections_lock:
            if self._closed:
                return
            self._closed = True
            connections = list(self._connections)
        self._stop.set()
        self.socket.close()
        for connection in connections:  # blocked reads and writes fail at once
            try:
                connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self._tls_pump.close()
        if self.watchdog is not None:
            self.watchdog.close()
        self._pool.close(timeout=1.0)
