"""HTTPS on the backend's own port: a certificate made on first use, and one TLS terminator per server.

``tls = true`` is for gateways that accept only ``https://`` upstreams. The
port keeps serving plain HTTP as well: a connection whose first byte opens a
TLS handshake (``0x16``) is handshaken by :func:`terminate_tls` in its
handler's own thread (or greenlet), finished within the head deadline as a
whole; the server's :class:`TLSPump` (one thread for every connection) then
decrypts it into one end of a socket pair while the usual handler serves the
other end. The handler's socket is a plain one, so everything the server
does with sockets (receive stamps, non-blocking sends, the hang-up peek, the
shutdown a fault cuts with) works unchanged; the pump passes an end of either
side on to the other, as a TLS-terminating proxy in front of a server does.

The certificate comes from a throwaway certificate authority (``trustme``),
made once per server and valid for ``127.0.0.1``, ``::1``, ``localhost`` and
the listen address; clients trust it through :attr:`TLSMaterial.ca_file`.
"""

from __future__ import annotations

import contextlib
import os
import select
import selectors
import shutil
import socket
import ssl
import tempfile
import threading
import time
from collections.abc import Callable

__all__ = ["TLSMaterial", "TLSPump", "TLSSession", "opens_tls", "terminate_tls"]

_HANDSHAKE_RECORD = 0x16  # the TLS record type a ClientHello arrives in
_CHUNK = 65536
_BACKLOG = 1 << 18  # bytes queued one way before the pump stops reading the side that sends them
_LINGER = 60.0  # wall seconds a closed handler's last bytes may take to reach a client that reads slowly
_TICK = 1.0  # the pump's longest wait: how often it looks for sessions past their linger


class TLSMaterial:
    """A certificate authority and the server certificate it signed, with the CA in a PEM file.

    Made with ``trustme`` (the ``tls`` extra: ``pip install pytest-llmsim[tls]``);
    :meth:`close` removes the file.
    """

    def __init__(self, host: str) -> None:
        try:
            import trustme
        except ImportError:  # pragma: no cover - the test extras have it
            raise RuntimeError("tls = true needs the trustme package: pip install 'pytest-llmsim[tls]'") from None
        names = ["127.0.0.1", "::1", "localhost"]
        if host not in names and host not in ("0.0.0.0", "::", ""):
            names.append(host)
        authority = trustme.CA(organization_name="pytest-llmsim")
        certificate = authority.issue_cert(*names)
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.set_alpn_protocols(["http/1.1"])  # an HTTP/2 client falls back to what is served
        certificate.configure_cert(self.context)
        self._directory = tempfile.mkdtemp(prefix="llmsim-tls-")
        self.ca_file = os.path.join(self._directory, "ca.pem")
        authority.cert_pem.write_to_path(self.ca_file)
        self.ca_pem = authority.cert_pem.bytes().decode()

    def close(self) -> None:
        shutil.rmtree(self._directory, ignore_errors=True)


def opens_tls(sock: socket.socket, timeout: float) -> bool:
    """Whether the connection's first byte (waited for at most ``timeout`` seconds) opens a TLS handshake."""
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    if timeout <= 0 or not poller.poll(timeout * 1000):
        return False  # silent: the plain handler's head deadline deals with it
    try:
        first = sock.recv(1, socket.MSG_PEEK)
    except OSError:
        return False
    return first[:1] == bytes([_HANDSHAKE_RECORD])


def terminate_tls(raw: socket.socket, context: ssl.SSLContext, deadline: float,
                  pump: TLSPump) -> TLSSession | None:
    """Run the TLS handshake on ``raw`` in the caller's thread (or greenlet), finished by ``deadline``.

    ``deadline`` (a ``time.monotonic()``) bounds the handshake as a whole, not each read: a client
    that drips its ClientHello a byte at a time is cut when it passes. Returns the session, its
    plain end (:attr:`TLSSession.inner`) ready to serve and its bytes relayed by ``pump``; None when
    the handshake failed or ran out of time (the caller closes ``raw``). Until the handshake is done
    the connection holds its one socket and no thread of its own.
    """
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = context.wrap_bio(incoming, outgoing, server_side=True)
    with contextlib.suppress(OSError):
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, True)
    try:
        while True:
            try:
                tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                _send_within(raw, outgoing.read(), deadline)
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None
                raw.settimeout(remaining)
                data = raw.recv(_CHUNK)
                if not data:
                    return None
                incoming.write(data)
            except ssl.SSLError:
                with contextlib.suppress(OSError):
                    _send_within(raw, outgoing.read(), deadline)  # the alert, so the client says why
                return None
        _send_within(raw, outgoing.read(), deadline)
    except OSError:  # the deadline (TimeoutError), or the client went away
        return None
    session = TLSSession(raw, tls, incoming, outgoing)
    if not pump.attach(session):
        session.inner.close()
        return None
    return session


def _send_within(raw: socket.socket, data: bytes, deadline: float) -> None:
    if data:
        raw.settimeout(max(deadline - time.monotonic(), 0.001))
        raw.sendall(data)


class TLSSession:
    """One terminated connection: :attr:`inner` is the plain end a handler serves.

    After the handshake only the pump's thread touches it, so the TLS object
    (``ssl.SSLObject`` over memory buffers) never sees two threads. Bytes queue
    per direction up to ``_BACKLOG``; past it, the pump stops reading the side
    that sends, so a client that does not read slows its handler as a plain
    socket would, and nobody else.
    """

    def __init__(self, raw: socket.socket, tls: ssl.SSLObject, incoming: ssl.MemoryBIO,
                 outgoing: ssl.MemoryBIO) -> None:
        self._raw = raw
        self._tls = tls
        self._incoming, self._outgoing = incoming, outgoing
        self.inner, self._outer = socket.socketpair()
        raw.setblocking(False)
        self._outer.setblocking(False)
        self._to_client = bytearray()  # encrypted, not yet sent to the client
        self._to_handler = bytearray()  # decrypted, not yet passed to the handler
        self._client_ended = False  # no more input from the client (its end of input, or close_notify)
        self._told_handler = False  # the handler's end of input sent
        self._handler_ended = False  # the handler closed its end
        self._linger_until: float | None = None  # once the handler is done: how long the rest may take
        self.done = False
        self._masks: dict[socket.socket, int] = {}
        self._decrypt()  # the client's first request may have come in the handshake's last read

    def cut(self) -> None:
        """Close the client's connection at once (server shutdown); safe from any thread."""
        with contextlib.suppress(OSError):
            self._raw.shutdown(socket.SHUT_RDWR)

    # --- events, in the pump's thread ---

    def on_client(self, events: int) -> None:
        if events & selectors.EVENT_WRITE and self._to_client:
            try:
                sent = self._raw.send(self._to_client)
            except BlockingIOError:
                sent = 0
            except OSError:
                self._abort()
                return
            del self._to_client[:sent]
        if events & selectors.EVENT_READ and not self._client_ended:
            try:
                data = self._raw.recv(_CHUNK)
            except BlockingIOError:
                return
            except OSError:
                self._abort()
                return
            if data:
                self._incoming.write(data)
            else:
                self._incoming.write_eof()
            self._decrypt()
        self._settle()

    def on_handler(self, events: int) -> None:
        if events & selectors.EVENT_WRITE and self._to_handler:
            try:
                sent = self._outer.send(self._to_handler)
            except BlockingIOError:
                sent = 0
            except OSError:  # the handler closed its end: what the client sends goes nowhere
                self._to_handler.clear()
                sent = 0
            del self._to_handler[:sent]
        if events & selectors.EVENT_READ and not self._handler_ended:
            try:
                data = self._outer.recv(_CHUNK)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            if data:
                try:
                    self._tls.write(data)
                except ssl.SSLError:
                    self._abort()
                    return
            else:
                self._handler_ended = True
                self._linger_until = time.monotonic() + _LINGER
                with contextlib.suppress(ssl.SSLError):
                    self._tls.unwrap()  # close_notify into the outgoing buffer
            self._to_client += self._outgoing.read()
        self._settle()

    @property
    def lingering(self) -> bool:
        """Whether the handler is done and its last bytes are still going out."""
        return self._linger_until is not None

    def overdue(self, now: float) -> bool:
        """Whether the handler is done and the client has not taken the rest in time."""
        return self._linger_until is not None and now > self._linger_until

    def _decrypt(self) -> None:
        """Pass the records received so far to the handler, decrypted; note the client's end."""
        while True:
            try:
                piece = self._tls.read(_CHUNK)
            except ssl.SSLWantReadError:
                break
            except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                self._client_ended = True
                break
            except ssl.SSLError:
                self._abort()
                return
            if not piece:
                self._client_ended = True
                break
            self._to_handler += piece
        if self._incoming.eof:
            self._client_ended = True
        self._to_client += self._outgoing.read()  # session tickets, key updates

    def _settle(self) -> None:
        if self.done:
            return
        if self._client_ended and not self._to_handler and not self._told_handler:
            self._told_handler = True
            with contextlib.suppress(OSError):
                self._outer.shutdown(socket.SHUT_WR)  # the handler reads an end of input: the client is gone
        if self._handler_ended and not self._to_client:
            self.done = True

    def _abort(self) -> None:
        """The client's connection failed: the handler's next write fails as a plain socket's would."""
        self.done = True

    def update(self, selector: selectors.BaseSelector) -> None:
        """Listen for what this session can do now; unregister and close once done."""
        if self.done:
            for sock in (self._raw, self._outer):
                if self._masks.pop(sock, 0):
                    selector.unregister(sock)
                with contextlib.suppress(OSError):
                    sock.close()
            return
        read_client = not self._client_ended and len(self._to_handler) < _BACKLOG
        read_handler = not self._handler_ended and len(self._to_client) < _BACKLOG
        self._listen(selector, self._raw, (selectors.EVENT_READ if read_client else 0)
                     | (selectors.EVENT_WRITE if self._to_client else 0), self.on_client)
        self._listen(selector, self._outer, (selectors.EVENT_READ if read_handler else 0)
                     | (selectors.EVENT_WRITE if self._to_handler else 0), self.on_handler)

    def _listen(self, selector: selectors.BaseSelector, sock: socket.socket, mask: int,
                callback: Callable[[int], None]) -> None:
        before = self._masks.get(sock, 0)
        if mask == before:
            return
        if not before:
            selector.register(sock, mask, (self, callback))
        elif not mask:
            selector.unregister(sock)
        else:
            selector.modify(sock, mask, (self, callback))
        self._masks[sock] = mask


class TLSPump:
    """Relays every terminated TLS connection of a server in one thread (a greenlet under gevent).

    An idle HTTPS client then costs its sockets, not a thread. Started by the
    first session attached; :meth:`close` cuts every session and ends it.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._arrivals: list[TLSSession] = []
        self._sessions: set[TLSSession] = set()  # the pump's own; read elsewhere only to cut
        self._lingering: set[TLSSession] = set()  # handlers done, last bytes still going out (the pump's alone)
        self._wake_reader, self._wake_writer = socket.socketpair()
        self._wake_reader.setblocking(False)
        self._wake_writer.setblocking(False)
        self._thread: threading.Thread | None = None
        self._closed = False

    @property
    def sessions(self) -> int:
        """Sessions relayed now."""
        return len(self._sessions) + len(self._arrivals)

    def attach(self, session: TLSSession) -> bool:
        """Relay ``session`` from now on; False once the pump is closed."""
        with self._lock:
            if self._closed:
                return False
            self._arrivals.append(session)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="llmsim-tls-pump", daemon=True)
                self._thread.start()
        self._wake()
        return True

    def close(self, timeout: float = 1.0) -> None:
        """Cut every session's client and end the pump (waits at most ``timeout`` seconds)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            sessions = [*self._sessions, *self._arrivals]
            thread = self._thread
        for session in sessions:
            session.cut()
        self._wake()
        if thread is not None:
            thread.join(timeout)
        if thread is None or not thread.is_alive():
            for sock in (self._wake_reader, self._wake_writer):
                sock.close()

    def _wake(self) -> None:
        with contextlib.suppress(OSError):
            self._wake_writer.send(b"\0")

    def _run(self) -> None:
        selector = selectors.DefaultSelector()
        selector.register(self._wake_reader, selectors.EVENT_READ, None)
        try:
            while True:
                with self._lock:
                    arrivals, self._arrivals = self._arrivals, []
                    closed = self._closed
                    self._sessions.update(arrivals)
                if closed:
                    break
                for session in arrivals:
                    self._settle(session, selector)
                for key, events in selector.select(_TICK):
                    if key.data is None:
                        with contextlib.suppress(OSError):
                            self._wake_reader.recv(4096)
                        continue
                    session, callback = key.data
                    if not session.done:
                        callback(events)
                        self._settle(session, selector)
                if self._lingering:
                    now = time.monotonic()
                    for session in [session for session in self._lingering if session.overdue(now)]:
                        session.done = True
                        self._settle(session, selector)
        finally:
            with self._lock:
                sessions = list(self._sessions)
                self._sessions.clear()
            for session in sessions:
                session.done = True
                session.update(selector)
            selector.close()

    def _settle(self, session: TLSSession, selector: selectors.BaseSelector) -> None:
        session.update(selector)
        if session.done:
            self._lingering.discard(session)
            with self._lock:
                self._sessions.discard(session)
        elif session.lingering:
            self._lingering.add(session)
