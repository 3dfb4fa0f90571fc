"""``llmsim record``: a proxy in front of a real provider that passes every request through unchanged and writes
each exchange, chunk by chunk with its arrival time, to a cassette (:mod:`.cassette`).

The one place this package talks to anything but loopback: the ``upstream`` the user names, and nothing else.
Answers are passed on as they arrive (a stream stays a stream: each read from the upstream is written to the
client at once and recorded with its time). The upstream is asked for uncompressed answers, so what is recorded
is what the client reads. A WebSocket upgrade is relayed as a session (:mod:`.sessions`), each message recorded.
"""

from __future__ import annotations

import ssl
import threading
import time
from collections.abc import Iterable, Iterator
from typing import Any, Protocol

import httpx
from werkzeug.wrappers import Request
from werkzeug.wsgi import ClosingIterator

from ..server.listener import ConnectionServer
from ..server.tls import TLSMaterial
from . import sessions
from .aws_signing import resign
from .cassette import Chunk, Exchange

__all__ = ["ExchangeSink", "RecordingProxy", "Served", "serve_in_thread"]

# Headers a proxy does not pass on: hop-by-hop, and the ones it sets itself
_REQUEST_DROPPED = frozenset({"host", "content-length", "connection", "keep-alive", "accept-encoding",
                              "proxy-connection", "te", "upgrade", "transfer-encoding"})
_RESPONSE_DROPPED = frozenset({"content-length", "connection", "keep-alive", "transfer-encoding", "content-encoding"})
#: How long closing a recorder waits for exchanges still being recorded (a session's upstream close handshake).
CLOSE_WAIT = 15.0


class ExchangeSink(Protocol):
    """Where a recording proxy puts each exchange (a :class:`~.cassette.Cassette`)."""

    def append(self, exchange: Exchange) -> None: ...


class RecordingProxy:
    """A WSGI app that forwards to ``upstream`` and appends each exchange to ``cassette``."""

    def __init__(self, upstream: str, cassette: ExchangeSink, timeout: float = 600.0, resign_aws: bool = False,
                 upstream_ca: str | None = None) -> None:
        self.upstream = upstream.rstrip("/")
        self.cassette = cassette
        self.resign_aws = resign_aws  # sign SigV4 requests again for the upstream (see .aws_signing)
        # the upstream's certificate authority, when it is not one the system trusts (another llmsim's, a proxy's)
        self.ssl_context = ssl.create_default_context(cafile=upstream_ca) if upstream_ca else None
        self._in_flight = 0
        self._idle = threading.Condition()
        self._client = httpx.Client(timeout=httpx.Timeout(timeout, connect=30.0), follow_redirects=False,
                                    verify=self.ssl_context or True)

    @property
    def in_flight(self) -> int:
        """Exchanges begun and not yet recorded."""
        return self._in_flight

    def close(self, timeout: float = CLOSE_WAIT) -> None:
        """Wait (at most ``timeout`` seconds) for the exchanges in flight to be recorded, then close the upstream
        client. A WebSocket session is written once its upstream has closed too, after its client has the last
        message: a recorder closed in between lost it."""
        with self._idle:
            self._idle.wait_for(lambda: self._in_flight == 0, timeout)
        self._client.close()

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        request = Request(environ)
        with self._idle:
            self._in_flight += 1
        try:
            answer = self.forward(request, request.get_data(), start_response)
        except BaseException:
            self._ended()
            raise
        return ClosingIterator(answer, self._ended)  # an answer's exchange is recorded when it is closed

    def _ended(self) -> None:
        with self._idle:
            self._in_flight -= 1
            self._idle.notify_all()

    def forward(self, request: Request, body: bytes, start_response: Any) -> Iterable[bytes]:
        """Pass ``request`` (its ``body`` already read) to the upstream; answer with what comes back, recording it."""
        if request.headers.get("Upgrade", "").lower() == "websocket":
            return sessions.relay(self.upstream, request, self.cassette.append, start_response, self.ssl_context)
        headers = [(name, value) for name, value in request.headers.items() if name.lower() not in _REQUEST_DROPPED]
        query = request.environ.get("QUERY_STRING", "")
        url = self.upstream + request.path + (f"?{query}" if query else "")
        forwarded = resign(request.method, url, headers, body) if self.resign_aws else headers
        sent, started = time.monotonic(), time.time()
        try:
            upstream = self._client.send(self._client.build_request(
                request.method, url, headers=[*forwarded, ("Accept-Encoding", "identity")], content=body),
                stream=True)
        except httpx.TransportError as error:  # refused, reset, timed out: nothing to record
            return sessions.unreachable(self.upstream, error, request.environ, start_response)
        answer_headers = [(k, v) for k, v in upstream.headers.multi_items() if k.lower() not in _RESPONSE_DROPPED]
        start_response(f"{upstream.status_code} {upstream.reason_phrase}", answer_headers)
        return self._relay(upstream, sent, request.method, request.path, query, list(request.headers.items()), body,
                           answer_headers, started)

    def _relay(self, upstream: httpx.Response, sent: float, method: str, path: str, query: str,
               headers: list[tuple[str, str]], body: bytes, answer_headers: list[tuple[str, str]],
               started: float) -> Iterator[bytes]:
        chunks: list[Chunk] = []
        try:
            for data in upstream.iter_raw():
                chunks.append(Chunk(time.monotonic() - sent, data))
                yield data
        finally:  # written even when the client left mid-answer: what the upstream sent until then
            upstream.close()
            self.cassette.append(Exchange.recorded(method, path, query, headers, body, upstream.status_code,
                                                   answer_headers, chunks, time.monotonic() - sent, started))


class Served:
    """A WSGI app served on its own thread by the package's server: its ``url``; ``shutdown()`` stops it. With
    ``tls``, over HTTPS with a throwaway certificate authority (clients trust :attr:`ca_file`), as clients that
    speak only TLS need (google-genai opens Gemini Live over wss:// only)."""

    def __init__(self, app: Any, host: str = "127.0.0.1", port: int = 0, tls: bool = False) -> None:
        self._material = TLSMaterial(host) if tls else None
        context = self._material.context if self._material is not None else None
        self._server = ConnectionServer(host, port, app, request_timeout=lambda: 600.0, tls_context=lambda: context)
        self.url = f"{'https' if tls else 'http'}://{host}:{self._server.port}"
        self.ca_file = self._material.ca_file if self._material is not None else None
        self._thread = threading.Thread(target=self._server.serve_forever, name="llmsim-recording", daemon=True)
        self._thread.start()

    def shutdown(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)
        if self._material is not None:
            self._material.close()


def serve_in_thread(app: Any, host: str = "127.0.0.1", port: int = 0, tls: bool = False) -> tuple[Served, str]:
    """Serve ``app`` (WSGI) with the package's own server, a thread per connection: the server and its URL."""
    served = Served(app, host, port, tls)
    return served, served.url
