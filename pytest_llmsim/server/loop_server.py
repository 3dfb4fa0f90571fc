"""The event-loop serving core (``llmsim serve --io loop``): one gevent loop, httptools' parser.

The listener accepts on the loop and starts a greenlet per connection
(:class:`~.loop_connection.LoopConnection`); nothing else is a thread. It has
the interface :class:`~.app.SimulatorServer` drives the threaded server by
(``serve_forever``, ``shutdown``, ``server_close``, ``port``), listens with
the same backlog, receive stamps and ``SO_REUSEPORT`` option, and terminates
TLS the same way (the handshake in the connection's greenlet, one pump for every
HTTPS connection). Only in a process gevent has
patched: there the application's waits yield to the loop.
"""

from __future__ import annotations

import socket
import ssl
import threading
import time
from collections.abc import Callable
from typing import Any

import gevent

from .keepalive import KeepAlivePolicy
from .loop_connection import LoopConnection
from .sockets import SO_TIMESTAMP
from .tls import TLSPump, opens_tls, terminate_tls
from .wsgi import ACCEPT_BACKOFF, ACCEPT_BACKOFF_ERRORS, default_error_body, gevent_patched

__all__ = ["LoopServer"]

BACKLOG = 4096  # as the threaded server's: a burst of a thousand clients connects at once


class LoopServer:
    """Listens on ``host:port`` and serves ``app`` (WSGI) on the process's gevent loop."""

    multithread = False
    multiprocess = False

    def __init__(self, host: str, port: int, app: Callable[..., Any],
                 request_timeout: Callable[[], float] | None = None,
                 keepalive_policy: Callable[[], KeepAlivePolicy] | None = None,
                 error_body: Callable[[int, str, str | None], bytes] | None = None,
                 tls_context: Callable[[], ssl.SSLContext | None] | None = None, reuse_port: bool = False) -> None:
        if not gevent_patched():
            raise RuntimeError("the event-loop core runs only where gevent has patched the process "
                               "(llmsim serve --io loop)")
        self.app = app
        self.request_timeout: Callable[[], float] = request_timeout or (lambda: 5.0)
        self.keepalive_policy: Callable[[], KeepAlivePolicy] = keepalive_policy or KeepAlivePolicy
        self.error_body = error_body or default_error_body
        self.tls_context: Callable[[], ssl.SSLContext | None] = tls_context or (lambda: None)
        self.cooperative = True
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.socket = socket.socket(family, socket.SOCK_STREAM)
        try:
            self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if reuse_port:
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
        self._tls_pump = TLSPump()  # relays every HTTPS connection's bytes, in one greenlet
        self._closed = False
        self._stop = threading.Event()
        self._stopped = threading.Event()
        self._stopped.set()

    @property
    def worker_count(self) -> int:
        """Connections served now (each a greenlet; there are no handler threads)."""
        return len(self._connections)

    def serve_forever(self, poll_interval: float = 0.5) -> None:
        """Accept connections until :meth:`shutdown`; each is served by its own greenlet."""
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
                gevent.spawn(self._serve, sock, address, time.monotonic())
        finally:
            self._stopped.set()

    def shutdown(self) -> None:
        """Stop accepting; returns once :meth:`serve_forever` has returned."""
        self._stop.set()
        self._stopped.wait()

    def _serve(self, sock: socket.socket, address: Any, accepted_at: float) -> None:
        if self._closed:
            sock.close()
            return
        self._connections.add(sock)  # from here a close cuts it, a TLS peek's wait included
        context = self.tls_context()
        tls = context is not None and opens_tls(sock, self.request_timeout())
        if tls:
            # The handshake runs here, within the head deadline; the pump relays the session afterwards.
            assert context is not None
            session = terminate_tls(sock, context, accepted_at + self.request_timeout(), self._tls_pump)
            self._connections.discard(sock)
            if session is None:
                sock.close()
                return
            sock = session.inner  # served on the plain end; the pump owns the client's socket
            self._connections.add(sock)
        else:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, True)
        try:
            LoopConnection(self, sock, address, accepted_at, tls).serve()
        finally:
            self._connections.discard(sock)

    def forget(self, sock: socket.socket) -> None:
        """``sock``'s connection is closing: a server close no longer needs to cut it."""
        self._connections.discard(sock)

    def server_close(self) -> None:
        """Close the listening socket and cut every open connection (safe to call more than once)."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        self.socket.close()
        for connection in list(self._connections):  # blocked reads and writes fail at once
            try:
                connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self._tls_pump.close()
