"""One client connection, framed the same way in every serving mode: httptools' parser, the WSGI app.

Every ``--io`` mode runs this class (:mod:`.listener` decides whether in a
thread or a greenlet): httptools' C parser (llhttp, Node's), one send per
answer, no handler object per request. It keeps the wire behaviour a test
relies on: kernel receive stamps as arrival times, a deadline for each
request head and body (socket timeouts: a read past one ends short),
keep-alive and pipelining, the silent closes keep-alive settings ask for,
JSON bodies for protocol errors, ``Expect: 100-continue``, and the socket in
the environ (``werkzeug.socket``) for the faults that drop a connection and
the hang-up check.
"""

from __future__ import annotations

import socket
import time
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

import httptools

from .answer import SERVER_HEADER, Answer
from .environ import ACCEPTED_AT, BODY_DEADLINE, connection_environ, request_environ
from .keepalive import KeepAlivePolicy, drain_before_close
from .request_head import content_length_problem, method_problem, target_problem, transfer_coding_problem
from .request_message import (
    CODING,
    HOST,
    LENGTH,
    METHODS,
    NAMES,
    Refused,
    RequestBody,
    RequestMessage,
    header_name,
    method_name,
)
from .response_head import error_response
from .sockets import SO_TIMESTAMP, CoalescingWriter, nonblocking_socket, receive_now, receive_stamped
from .websocket import UPGRADE_KEY, WebSocketUpgrade, is_websocket_upgrade
from .workers import HeadWatchdog

__all__ = ["Connection", "ConnectionOwner"]

MAX_TARGET = 65536  # http.server's request-line limit: a longer target is a 414
MAX_HEADER_LINE = 65536  # http.client's limits: a longer header line, or more headers, is a 431
MAX_HEADERS = 100
# The most a request head may take before it is complete: what those line limits allow.
# httptools holds a header's bytes until its line ends, so without this an endless line would grow it.
MAX_HEAD_BYTES = MAX_TARGET + MAX_HEADERS * MAX_HEADER_LINE
RECEIVE_SIZE = 65536
CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
MAX_LENGTH_DIGITS = 19  # a Content-Length past 2**63 is no body this server would take
_BLANKS = (" ", "\t")
# Methods whose head needs no more checks than the usual (any other goes through _framing_problem).
_PLAIN_METHODS = frozenset({"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"})


class ConnectionOwner(Protocol):
    """What a connection needs of the server that accepted it (:class:`~.listener.ConnectionServer`)."""

    app: Callable[..., Any]
    server_address: tuple[str, int]
    multithread: bool
    yield_turn: Callable[[], None] | None
    request_timeout: Callable[[], float]
    keepalive_policy: Callable[[], KeepAlivePolicy]
    error_body: Callable[[int, str, str | None], bytes]
    identity_headers: tuple[tuple[str, str], ...]  # on every answer (server/pod_identity)

    watchdog: HeadWatchdog | None  # threads: cuts late heads and bodies; greenlets: None (socket timeouts)

    def forget(self, sock: socket.socket) -> None:
        """``sock``'s connection is closing."""


class Connection:
    """Serves one client connection until it closes (``serve``); the parser's callbacks are methods."""

    def __init__(self, server: ConnectionOwner, sock: socket.socket, address: Any, accepted_at: float,
                 tls: bool = False) -> None:
        self.server = server
        self.sock = sock
        self.address = address if isinstance(address, tuple) and address else ("", 0)
        self.tls = tls
        self._parser = httptools.HttpRequestParser(self)
        # RFC 9112 §7.1.1 allows whitespace before a chunk's extensions; llhttp only when told
        self._parser.set_dangerous_leniencies(lenient_spaces_after_chunk_size=True)
        self._raw_target: bytes | None = None  # a request line's target as sent, before escaping (see _escaped)
        self._head_bytes = 0  # received since the request head in progress began
        self._ready: deque[RequestMessage] = deque()  # heads parsed and waiting their turn
        self._parsing: RequestMessage | None = None
        self._stamp: float | None = accepted_at
        self._accepted_at = accepted_at
        self._answering = False
        self._eof = False
        self.body_error: str | None = None
        self._served = 0
        self._writer = CoalescingWriter(sock)
        self._raw = nonblocking_socket(sock)  # for receives that must not wait (under gevent, past its wrapper)
        self._watchdog = server.watchdog
        self._yield_turn = server.yield_turn
        self._base_environ = connection_environ(sock, self.address, server.server_address, SERVER_HEADER,
                                                multithread=server.multithread, tls=tls)
        self._waiting = False  # blocked receiving from the client (only then does the watchdog cut)

    # --- reading ---

    def fill(self, deadline: float | None) -> bool:
        """Receive once (waiting at most until ``deadline``) and parse it; False at the end of input.

        Under gevent the receive has a timeout at ``deadline``; with a thread per connection the socket
        stays blocking and the watchdog, told the deadline beforehand, cuts it (see ``_watch``).
        """
        if self._eof:
            return False
        sock = self.sock
        try:
            if self._watchdog is None:
                # Under gevent the next request is usually in by now (the greenlet let the others run
                # first): take it without the wrapper's wait and timeout, else wait for it, timed.
                ready = receive_now(self._raw, RECEIVE_SIZE)
                if ready is None:
                    sock.settimeout(None if deadline is None else max(0.0, deadline - time.monotonic()))
                    ready = receive_stamped(sock, RECEIVE_SIZE)
                data, stamp = ready
            else:
                self._waiting = True
                try:
                    data, stamp = receive_stamped(sock, RECEIVE_SIZE)
                finally:
                    self._waiting = False
            if stamp is not None:
                self._stamp = stamp
            elif SO_TIMESTAMP is None:  # no stamps here at all: the time it was read
                self._stamp = time.monotonic()
        except (OSError, ValueError):  # the deadline (socket.timeout is an OSError), a reset, closed
            self._eof = True
            return False
        if not data:
            self._eof = True
            return False
        if self._parsing is None:  # a new request's first bytes
            if data[:1] in (b"\r", b"\n"):  # http.server's answer to an empty request line, not llhttp's skip
                self._refuse_parsing(Refused(400, "Bad request line (empty)"))
                return True
            if not data.isascii():
                data = self._escaped(data)
            self._head_bytes = len(data)
        elif not self._parsing.method:  # still in its head
            self._head_bytes += len(data)
            if self._head_bytes > MAX_HEAD_BYTES:
                self._refuse_parsing(Refused(431, f"Request head too large: more than {MAX_HEAD_BYTES:,} bytes"))
                return True
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserCallbackError:
            if not self._eof:  # not one of ours (a Refused head carries its answer): never parse on after it
                self._refuse_parsing(Refused(400, "Bad request"))
        except httptools.HttpParserUpgrade as upgrade:
            # A request that asked to switch protocols (Upgrade, Connection: upgrade), parsed whole: what
            # follows it is the new protocol's, if its route accepts; else the connection ends after it.
            if self._ready:
                self._ready[-1].upgrade = data[upgrade.args[0]:] if upgrade.args else b""
            self._eof = True
        except httptools.HttpParserError as error:
            reason = str(error) or type(error).__name__
            if self._parsing is not None and self._parsing.method:  # in a body: the application's 400
                self.body_error = f"malformed chunked body ({reason})"
            else:
                self._refuse_parsing(Refused(400, f"Bad request ({reason})"))
            self._eof = True
        return True

    def waiting_on_client(self) -> bool:
        """Whether this connection is blocked receiving (the watchdog cuts it at a deadline only then: a
        head already received but not yet parsed is the server's delay, not the client's)."""
        return self._waiting

    def _watch(self, deadline: float, how: int = socket.SHUT_RDWR) -> None:
        """Threads: have the watchdog cut the connection at ``deadline`` if it is then still waiting on the
        client (the reading side only for a body: the application answers 408)."""
        if self._watchdog is not None:
            self._watchdog.watch(self.sock, deadline, self.waiting_on_client, how)

    def _escaped(self, data: bytes) -> bytes:
        """``data`` with the raw bytes of its request line's target %-escaped (llhttp refuses raw
        UTF-8 there; werkzeug and real servers take it), the target as sent kept for the environ."""
        end = data.find(b"\n")
        line = data if end < 0 else data[:end]
        words = line.split(b" ")
        if len(words) < 2 or words[1].isascii():
            return data
        self._raw_target = words[1]
        words[1] = b"".join(b"%%%02X" % byte if byte >= 0x80 else bytes((byte,)) for byte in words[1])
        return b" ".join(words) + data[len(line):]

    def _refuse_parsing(self, refusal: Refused) -> None:
        message = self._parsing or RequestMessage(self._stamp, self._answering)
        if message.problem is None:
            message.problem = refusal
        if message not in self._ready:
            self._ready.append(message)
        self._eof = True

    # --- httptools' callbacks ---

    def on_message_begin(self) -> None:
        # Pipelined: it came behind a request not yet answered (being answered, or parsed from the same
        # bytes and waiting its turn); it arrives when it is taken, as an HTTP/1.1 server takes them in turn.
        self._parsing = RequestMessage(self._stamp, self._answering or bool(self._ready))

    def on_url(self, url: bytes) -> None:
        message = self._parsing
        assert message is not None
        message.target += url
        if len(message.target) > MAX_TARGET:
            self._stop(message, Refused(414, "URI Too Long"))

    def on_header(self, name: bytes, value: bytes) -> None:
        message = self._parsing
        assert message is not None
        headers = message.headers
        if len(name) + len(value) > MAX_HEADER_LINE:
            self._stop(message, Refused(431, "Line too long"))
        if len(headers) >= MAX_HEADERS:
            self._stop(message, Refused(431, f"Too many headers: got more than {MAX_HEADERS} headers"))
        # llhttp refuses NUL, CR and LF in a value, and keeps its trailing whitespace (not part of it)
        text = value.decode("iso-8859-1")
        if text[-1:] in _BLANKS:
            text = text.rstrip(" \t")
        text_name, framing = NAMES.get(name) or header_name(name)
        headers.append((text_name, text))
        if framing:  # one of the three that decide the framing: kept aside for on_headers_complete
            if framing == LENGTH:
                message.lengths += (text,)
            elif framing == CODING:
                message.codings += (text,)
            elif framing == HOST:
                message.hosts += 1

    def _stop(self, message: RequestMessage, refusal: Refused) -> None:
        message.problem = refusal
        self._ready.append(message)
        self._eof = True
        raise refusal  # httptools stops and raises HttpParserCallbackError

    def on_headers_complete(self) -> None:
        message = self._parsing
        assert message is not None
        parser = self._parser
        method = parser.get_method()
        message.method = METHODS.get(method) or method_name(method)
        version = parser.get_http_version()
        message.version = "HTTP/1.1" if version == "1.1" else "HTTP/" + version
        if self._raw_target is not None:
            message.target, self._raw_target = bytearray(self._raw_target), None
        lengths, hosts = message.lengths, message.hosts
        length = lengths[-1] if lengths else None
        coding = ", ".join(message.codings) if message.codings else None
        if (coding is None and message.method in _PLAIN_METHODS and message.target[:1] == b"/"
                and (hosts == 1 if message.version == "HTTP/1.1" else message.version == "HTTP/1.0")
                and (length is None or (len(lengths) == 1 and length.isdigit() and length.isascii()
                                        and len(length) <= MAX_LENGTH_DIGITS))):
            problem = None  # the usual head: nothing below would refuse it
        else:
            problem = self._framing_problem(message, hosts, length, coding, lengths)
        message.problem = problem
        if length is not None and length.isdigit():
            message.length = int(length)
        message.has_body = bool(message.length) or coding is not None
        if message.has_body:
            message.body_deadline = time.monotonic() + self.server.request_timeout()
            if self._watchdog is not None:
                self._watch(message.body_deadline, socket.SHUT_RD)
        elif self._watchdog is not None:
            self._watchdog.release(self.sock)
        self._ready.append(message)
        if problem is not None:
            self._eof = True
            raise problem

    @staticmethod
    def _framing_problem(message: RequestMessage, hosts: int, length: str | None, coding: str | None,
                         lengths: tuple[str, ...]) -> Refused | None:
        """What RFC 9112 says to refuse in a head: HTTP/2 and later on
        this port, HTTP/1.1 without exactly one Host, a coding this server cannot decode, a coding
        beside a length."""
        if message.version < "HTTP/1.0":  # a request line without a version (llhttp reads HTTP/0.9)
            return Refused(400, f"Bad request syntax ({message.method} {message.target.decode('iso-8859-1')!r} "
                                 f"without an HTTP version)")
        if message.version >= "HTTP/2":
            return Refused(505, f"Invalid HTTP version ({message.version[5:]})")
        if message.version == "HTTP/1.1" and hosts != 1:
            return Refused(400, "An HTTP/1.1 request needs exactly one Host header")
        refused = (method_problem(message.method) or target_problem(message.method, message.target.decode("iso-8859-1"))
                   or content_length_problem(list(lengths)))
        if refused is not None:
            return Refused(400, refused)
        if coding is not None:
            if length is not None:
                return Refused(400, "Transfer-Encoding and Content-Length together")
            problem = transfer_coding_problem([coding])
            if problem is not None:
                return Refused(*problem)
        return None

    def on_body(self, body: bytes) -> None:
        assert self._parsing is not None
        self._parsing.parts.append(body)

    def on_message_complete(self) -> None:
        message = self._parsing
        assert message is not None
        message.complete = True
        self._parsing = None
        if message.has_body and self._watchdog is not None:
            self._watchdog.release(self.sock)

    # --- serving ---

    def serve(self) -> None:
        """Answer requests until the client closes, a deadline passes or keep-alive ends; then close."""
        linger = False
        try:
            while True:
                message = self._next_message()
                if message is None:
                    return
                if message.problem is not None:
                    self._send_error(message)
                    return
                keep, linger = self._answer(message)
                if not keep:
                    return
        finally:
            self.server.forget(self.sock)
            if self._watchdog is not None:
                self._watchdog.release(self.sock)
            self._parser = None  # type: ignore[assignment]  # it holds this object: freed now, not by the collector
            if linger:
                drain_before_close(self.sock)
            try:
                self.sock.close()
            except OSError:
                pass

    def _next_message(self) -> RequestMessage | None:
        """The next request's head: waits for it within the head deadline (``keepalive_timeout``)."""
        if self._served and self._yield_turn is not None:
            # A client that sends its next request at once never lets this greenlet block, and its
            # connection starved every other (c64: 2 s timeouts): let the others have a turn first. (It
            # is cheaper than it looks: the next request is then usually in, and its receive never waits
            # on the hub; yielding every 8th request instead cost 40 % more CPU per request.)
            self._yield_turn()
        # Over TLS the handshake and the first head share one deadline, from the accept on.
        start = self._accepted_at if self.tls and not self._served else time.monotonic()
        deadline = start + self.server.request_timeout()
        if self._watchdog is not None and not self._ready:
            self._watch(deadline)
        while not self._ready:
            if not self.fill(deadline):
                return self._ready.popleft() if self._ready else None
        return self._ready.popleft()

    def _send_error(self, message: RequestMessage) -> None:
        """A protocol-level error (bad request line, target or headers too long): JSON, never HTML."""
        problem = message.problem
        assert problem is not None
        target = message.target.decode("iso-8859-1") if message.target else None
        body = self.server.error_body(problem.status, problem.message, target)
        try:
            self._writer.write(error_response(problem.status, body, head_only=message.method == "HEAD"))
            self._writer.flush()
        except OSError:
            pass  # the client is gone

    def _environ(self, message: RequestMessage, body: RequestBody) -> dict[str, Any]:
        target = message.target.decode("iso-8859-1")
        uri = host = None
        if not target.startswith("/"):  # absolute form (a proxy's request): the path and query of its URL
            uri, url = target, httptools.parse_url(message.target)
            target = (url.path or b"/").decode("iso-8859-1")
            if url.query:
                target += "?" + url.query.decode("iso-8859-1")
            if url.host:  # RFC 9112 §3.2.2: the target's host, not the Host header
                host = url.host.decode("iso-8859-1") + (f":{url.port}" if url.port else "")
        if target.startswith("//"):
            target = "/" + target.lstrip("/")
        environ = request_environ(self._base_environ, target, message.method, message.version, message.headers,
                                  body, uri=uri)
        if host is not None:
            environ["HTTP_HOST"] = host
        return environ

    def _answer(self, message: RequestMessage) -> tuple[bool, bool]:
        """Run the application for ``message`` and write its answer; (keep the connection, linger at close)."""
        self._served += 1
        self._answering = True
        body = RequestBody(self, message)
        environ = self._environ(message, body)
        stamp = message.received_at
        environ[ACCEPTED_AT] = time.monotonic() if message.early or stamp is None else stamp
        environ[BODY_DEADLINE] = message.body_deadline
        policy = self.server.keepalive_policy()
        connection_header = (environ.get("HTTP_CONNECTION") or "").lower()
        keep = policy.enabled and message.version == "HTTP/1.1" and "close" not in connection_header
        silent_close = policy.max_requests is not None and self._served >= policy.max_requests
        if "HTTP_EXPECT" in environ and environ["HTTP_EXPECT"].lower().strip(" \t") == "100-continue":
            self._writer.write(CONTINUE)
        answer = Answer(self._writer, message.method == "HEAD", message.version, message.can_finish, keep,
                        self.server.identity_headers)
        if "HTTP_UPGRADE" in environ and is_websocket_upgrade(environ):
            environ[UPGRADE_KEY] = WebSocketUpgrade(message.headers, environ["REQUEST_URI"],
                                                    lambda data: self._switch(answer, message, data))
        try:
            answer.run(self.server.app, environ)
            keep = keep and answer.keep
        except OSError:  # the client is gone (or a fault dropped it)
            keep = False
        except Exception:
            keep = False
            answer.fail()
        finally:
            self._answering = False
        if keep and not silent_close:
            return self._finish_body(message), False
        return False, message.has_body and not message.complete

    def _switch(self, answer: Answer, message: RequestMessage, data: bytes) -> tuple[socket.socket, bytes]:
        """Send ``data`` (the 101 that accepts an upgrade) and hand the socket over: the answer writes
        nothing more and the connection ends with the session. Returns the socket and the bytes the client
        sent after its request."""
        answer.switched()
        self._writer.write(data)
        self._writer.flush()
        self.sock.settimeout(None)
        return self.sock, message.upgrade

    def _finish_body(self, message: RequestMessage) -> bool:
        """Read and drop a small unread rest of the body so the connection can take the next request."""
        while not message.complete:
            message.parts.clear()
            if not self.fill(message.body_deadline):
                return False
        message.parts.clear()
        return self.body_error is None
