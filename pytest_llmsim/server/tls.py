"""HTTPS on the backend's own port: a certificate made on first use, and a TLS terminator per connection.

``tls = true`` is for gateways that accept only ``https://`` upstreams. The
port keeps serving plain HTTP as well: a connection whose first byte opens a
TLS handshake (``0x16``) is handed to a :class:`TLSRelay`, which decrypts it
into one end of a socket pair while the usual handler serves the other end.
The handler's socket is then a plain one, so everything the server does with
sockets (receive stamps, non-blocking sends, the hang-up peek, the shutdown
a fault cuts with) works unchanged; the relay passes an end of either side
on to the other, as a TLS-terminating proxy in front of a server does.

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

__all__ = ["TLSMaterial", "TLSRelay", "opens_tls"]

_HANDSHAKE_RECORD = 0x16  # the TLS record type a ClientHello arrives in
_CHUNK = 65536


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
    if not poller.poll(timeout * 1000):
        return False  # silent: the plain handler's head deadline deals with it
    try:
        first = sock.recv(1, socket.MSG_PEEK)
    except OSError:
        return False
    return first[:1] == bytes([_HANDSHAKE_RECORD])


class TLSRelay:
    """Terminates TLS for one connection: :attr:`inner` is the plain end a handler serves.

    One thread per connection runs the handshake (within ``timeout`` seconds)
    and then pumps bytes both ways with an in-memory TLS object (``ssl.SSLObject``,
    one thread, so reads and writes never race on it). The client's hang-up
    reaches the handler as an end of input on :attr:`inner`; the handler's close
    ends the TLS session (``close_notify``) and the client's connection.
    """

    def __init__(self, raw: socket.socket, context: ssl.SSLContext, timeout: float) -> None:
        self._raw = raw
        self.inner, self._outer = socket.socketpair()
        self._incoming, self._outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        self._tls = context.wrap_bio(self._incoming, self._outgoing, server_side=True)
        self._timeout = timeout
        self._thread = threading.Thread(target=self._run, name="llmsim-tls-relay", daemon=True)
        self._thread.start()

    def cut(self) -> None:
        """Close the client's connection at once (server shutdown)."""
        with contextlib.suppress(OSError):
            self._raw.shutdown(socket.SHUT_RDWR)

    def _run(self) -> None:
        try:
            with contextlib.suppress(OSError, ssl.SSLError):
                if self._handshake():
                    self._pump()
        finally:
            for sock in (self._outer, self._raw):
                with contextlib.suppress(OSError):
                    sock.close()

    def _flush(self) -> None:
        data = self._outgoing.read()
        if data:
            self._raw.sendall(data)

    def _handshake(self) -> bool:
        self._raw.settimeout(self._timeout)
        with contextlib.suppress(OSError):
            self._raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, True)
        while True:
            try:
                self._tls.do_handshake()
            except ssl.SSLWantReadError:
                self._flush()
                data = self._raw.recv(_CHUNK)
                if not data:
                    return False
                self._incoming.write(data)
                continue
            except ssl.SSLError:
                self._flush()  # the alert, so the client says why
                return False
            self._flush()
            self._raw.settimeout(None)
            # The client's first request may have come in the handshake's last read: pass it on now, as
            # no more bytes may come to wake the pump for it.
            return self._deliver()

    def _pump(self) -> None:
        selector = selectors.DefaultSelector()
        selector.register(self._raw, selectors.EVENT_READ, self._from_client)
        selector.register(self._outer, selectors.EVENT_READ, self._from_handler)
        try:
            while selector.get_map():
                for key, _ in selector.select():
                    if not key.data():
                        selector.unregister(key.fileobj)
                        if key.fileobj is self._outer:
                            return  # the handler is done: the connection ends
        finally:
            selector.close()

    def _from_client(self) -> bool:
        """Decrypt what the client sent into the handler's socket; False once the client's side has ended."""
        data = self._raw.recv(_CHUNK)
        if data:
            self._incoming.write(data)
        else:
            self._incoming.write_eof()
        return self._deliver() and bool(data)

    def _deliver(self) -> bool:
        """Pass the records received so far to the handler, decrypted; False once the client ended its side
        (``close_notify``, or the connection's end)."""
        plain = []
        ended = False
        while True:
            try:
                piece = self._tls.read(_CHUNK)
            except ssl.SSLWantReadError:
                break
            except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                ended = True
                break
            if not piece:
                ended = True
                break
            plain.append(piece)
        if plain:
            self._outer.sendall(b"".join(plain))
        self._flush()  # session tickets, key updates
        if ended or self._incoming.eof:
            with contextlib.suppress(OSError):
                self._outer.shutdown(socket.SHUT_WR)  # the handler reads an end of input: the client is gone
            return False
        return True

    def _from_handler(self) -> bool:
        """Encrypt what the handler wrote and send it; False once the handler has closed its end."""
        data = self._outer.recv(_CHUNK)
        if not data:
            with contextlib.suppress(ssl.SSLError):
                self._tls.unwrap()  # close_notify into the outgoing buffer
            with contextlib.suppress(OSError):
                self._flush()
            return False
        self._tls.write(data)
        self._flush()
        return True
