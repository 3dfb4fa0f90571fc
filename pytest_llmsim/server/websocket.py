"""WebSocket sessions on a served connection: the upgrade handshake and the messages, by wsproto.

A request that asks to upgrade (``Upgrade: websocket``) reaches its route like
any other (keys, Host rule, faults); a session route accepts it through the
:class:`WebSocketUpgrade` the connection put in the environ, and from then on
the connection is the session's :class:`WebSocket` until either side closes.
wsproto (sans-I/O) does the protocol: the handshake's checks, framing,
masking, fragmentation, ping/pong, close codes and per-message deflate when
the client offers it. What is ours: the socket calls, a bound on a message's
size (1009 past it, also for what deflate expands to), an idle deadline
(1001 at it), and a record of how the session ended.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from wsproto import ConnectionType, WSConnection
from wsproto.connection import ConnectionState
from wsproto.events import AcceptConnection, BytesMessage, CloseConnection, Message, Ping, Request, TextMessage
from wsproto.extensions import PerMessageDeflate
from wsproto.utilities import RemoteProtocolError

from .keepalive import drain_before_close
from .sockets import nonblocking_socket, receive_stamped

__all__ = ["UPGRADE_KEY", "WebSocket", "WebSocketUpgrade", "is_websocket_upgrade"]

UPGRADE_KEY = "llmsim.websocket"  # environ key: the WebSocketUpgrade of a request that asked for one
MAX_MESSAGE_BYTES = 16 * 1024 * 1024  # a message larger than this (after deflate) closes the session: 1009
IDLE_SECONDS = 300.0  # nothing from the client for this long closes the session: 1001
# Read in small pieces while deflate is on: a compressed piece expands at most ~1,000-fold before the bound
# above can look at it (wsproto inflates each piece it is given whole).
RECEIVE_PLAIN, RECEIVE_DEFLATE = 65536, 4096


def is_websocket_upgrade(environ: dict[str, Any]) -> bool:
    """Whether the request asks to upgrade to WebSocket (a GET with ``Upgrade: websocket``)."""
    return "websocket" in environ.get("HTTP_UPGRADE", "").lower() and environ.get("REQUEST_METHOD") == "GET"


class HandshakeRefused(Exception):
    """An upgrade request wsproto will not take: the HTTP status to answer and why."""

    def __init__(self, status: int, why: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(why)
        self.status, self.why, self.headers = status, why, headers or {}


class WebSocketUpgrade:
    """What a connection offers a route for a request that asked to upgrade.

    ``check`` runs the handshake's checks (nothing is sent); ``accept`` answers 101 and returns the
    session. ``begin`` is the connection's: it writes the 101 and hands over its socket and any bytes
    the client sent after its request.
    """

    def __init__(self, headers: list[tuple[str, str]], target: str,
                 begin: Callable[[bytes], tuple[socket.socket, bytes]]) -> None:
        self._headers = headers
        self._target = target
        self._begin = begin
        self._protocol: WSConnection | None = None
        self._request: Request | None = None
        self.accepted = False

    def check(self) -> Request:
        """The client's handshake as wsproto reads it (its subprotocols and extensions); raises
        :class:`HandshakeRefused` for one it refuses (400, or 426 for another protocol version)."""
        if self._request is not None:
            return self._request
        protocol = WSConnection(ConnectionType.SERVER)
        try:
            protocol.initiate_upgrade_connection(
                [(name.encode("latin-1"), value.encode("latin-1")) for name, value in self._headers], self._target)
            events = list(protocol.events())
        except RemoteProtocolError as error:
            hint = error.event_hint
            status = getattr(hint, "status_code", 400) or 400
            headers = {name.decode(): value.decode() for name, value in getattr(hint, "headers", [])}
            raise HandshakeRefused(status, f"WebSocket handshake refused: {error}", headers) from None
        except Exception as error:  # h11's own refusal of a header it cannot carry, an undecodable Host
            raise HandshakeRefused(400, f"WebSocket handshake refused: {error}") from None
        request = next((event for event in events if isinstance(event, Request)), None)
        if request is None:
            raise HandshakeRefused(400, "WebSocket handshake refused: not an upgrade request")
        self._protocol, self._request = protocol, request
        return request

    def accept(self, subprotocol: str | None = None, max_message_bytes: int = MAX_MESSAGE_BYTES,
               idle_seconds: float = IDLE_SECONDS, deflate_allowed: bool = True) -> WebSocket:
        """Answer 101 (choosing ``subprotocol``, one the client offered; deflate if it offered that and
        ``deflate_allowed``) and return the session."""
        request = self.check()
        assert self._protocol is not None
        deflate = deflate_allowed and any(offer.split(";")[0].strip() == "permessage-deflate"
                                          for offer in map(str, request.extensions))
        data = self._protocol.send(AcceptConnection(subprotocol=subprotocol,
                                                    extensions=[PerMessageDeflate()] if deflate else []))
        sock, rest = self._begin(data)
        self.accepted = True
        return WebSocket(self._protocol, sock, rest, request, subprotocol, deflate, max_message_bytes, idle_seconds)


INPUT_CHECK_SECONDS = 0.05  # how often (wall) the engine's thread looks for a message from a session it writes to

def text_frames(chunk: bytes) -> tuple[bytes, int]:
    """The ``data:`` payloads of the server-sent events in ``chunk`` (a renderer's output), each a text message's
    frame, without decoding them (``[DONE]`` markers, the HTTP stream's own, are left out); and how many."""
    frames: list[bytes] = []
    for line in chunk.split(b"\n"):
        if line.startswith(b"data: ") and line != b"data: [DONE]":
            frames += (_header(0x81, len(line) - 6), line[6:])
    return b"".join(frames), len(frames) // 2


def _header(opcode: int, size: int) -> bytes:
    """A server's frame header (RFC 6455 5.2: FIN, the opcode, no mask, the payload's length)."""
    if size < 126:
        return bytes((opcode, size))
    if size < 65536:
        return bytes((opcode, 126)) + size.to_bytes(2, "big")
    return bytes((opcode, 127)) + size.to_bytes(8, "big")


def unmasked_frame(message: str | bytes) -> bytes:
    """One whole message as a server's frame (RFC 6455 5.2: FIN, opcode text or binary, no mask)."""
    payload, opcode = (message.encode(), 0x81) if isinstance(message, str) else (message, 0x82)
    return _header(opcode, len(payload)) + payload


class WebSocket:
    """One WebSocket session on a connection: blocking ``receive`` and ``send``, for a thread or a greenlet.

    One thread may receive while another sends (a lock keeps wsproto's state and the socket's writes
    whole; it is never held while waiting for the client). ``close_code`` and ``ended_by`` say how the
    session ended: ``"client"`` (its close frame), ``"gone"`` (the connection dropped without one),
    ``"idle"``, ``"too_big"``, ``"protocol"`` (a frame wsproto refused) or ``"server"``.
    """

    def __init__(self, protocol: WSConnection, sock: socket.socket, rest: bytes, request: Request,
                 subprotocol: str | None, deflate: bool, max_message_bytes: int, idle_seconds: float) -> None:
        self._protocol = protocol
        self._sock = sock
        self._lock = threading.Lock()
        self._parts: list[str | bytes] = []
        self._size = 0
        self._pending: list[str | bytes] = []
        self._arrivals: list[float] = []  # when each pending message's last bytes were read (time.monotonic())
        self.received_at: float | None = None  # ... and of the message receive() returned last
        self._receive_size = RECEIVE_DEFLATE if deflate else RECEIVE_PLAIN
        self.target = request.target
        self.subprotocol = subprotocol
        self.deflate = deflate
        self.max_message_bytes = max_message_bytes
        self.idle_seconds = idle_seconds
        self.close_code: int | None = None
        self.close_reason = ""
        self.ended_by: str | None = None
        self.messages_received = self.messages_sent = 0
        self._input_checked = 0.0  # when has_input() last asked the socket
        if rest:
            self._take(rest)

    @property
    def closed(self) -> bool:
        return self.ended_by is not None

    def receive(self, timeout: float | None = None) -> str | bytes | None:
        """The next whole message (text as ``str``, binary as ``bytes``); None once the session has ended.

        With ``timeout``, raises ``TimeoutError`` when no message came in that long (the session stays
        open); the idle deadline closes the session whatever the timeout.
        """
        wait_until = None if timeout is None else time.monotonic() + timeout
        while not self._pending:
            if self.closed:
                return None
            idle_at = time.monotonic() + self.idle_seconds
            until = idle_at if wait_until is None else min(idle_at, wait_until)
            try:
                self._sock.settimeout(max(0.0, until - time.monotonic()))
                data, stamp = receive_stamped(self._sock, self._receive_size)
            except TimeoutError:
                if wait_until is not None and wait_until <= idle_at:
                    raise
                self.close(1001, "idle timeout", ended_by="idle")
                return None
            except (OSError, ValueError):  # reset, or shut by a server close
                self._end("gone", 1006)
                return None
            if not data:
                self._end("gone", 1006)
                return None
            self._take(data, stamp)
        self.received_at = self._arrivals.pop(0)
        return self._pending.pop(0)

    def poll(self) -> str | bytes | None:
        """The next whole message if one has already arrived, without waiting (None: none yet, or the session
        has ended): a runner streaming a response looks for a cancel between its writes."""
        if not self._pending and not self.closed:
            sock = self._sock
            previous = sock.gettimeout()
            try:
                sock.settimeout(0.0)  # no wait, also on gevent's cooperative socket
                data, stamp = receive_stamped(sock, self._receive_size)
            except (BlockingIOError, InterruptedError):
                data, stamp = None, None
            except (OSError, ValueError):
                self._end("gone", 1006)
                return None
            finally:
                try:
                    sock.settimeout(previous)
                except OSError:
                    pass
            if data == b"":
                self._end("gone", 1006)
                return None
            if data:
                self._take(data, stamp)
        if self._pending:
            self.received_at = self._arrivals.pop(0)
            return self._pending.pop(0)
        return None

    def _take(self, data: bytes, stamp: float | None = None) -> None:
        """Feed received bytes to wsproto and act on its events (answers to pings and closes go at once); a
        message they complete arrived at ``stamp`` (the kernel's receive time, ``SO_TIMESTAMP``: however late a
        busy server reads it, its latency counts from then, as an HTTP request's does), else now."""
        replies = []
        with self._lock:
            if self.closed:
                return
            self._protocol.receive_data(data)
            for event in self._protocol.events():
                if isinstance(event, Message):
                    self._size += len(event.data)
                    if self._size > self.max_message_bytes:
                        self._parts.clear()
                        replies.append(self._closing(1009, f"message over {self.max_message_bytes} bytes", "too_big"))
                        break
                    self._parts.append(event.data)
                    if event.message_finished:
                        joined: str | bytes = ("".join(self._parts) if isinstance(event, TextMessage)  # type: ignore[arg-type]
                                               else b"".join(self._parts))  # type: ignore[arg-type]
                        self._pending.append(joined)
                        self._arrivals.append(stamp or time.monotonic())
                        self.messages_received += 1
                        self._parts, self._size = [], 0
                elif isinstance(event, Ping):
                    replies.append(self._protocol.send(event.response()))
                elif isinstance(event, CloseConnection):
                    # The client's close frame (answered with its code), or wsproto's verdict on a frame it
                    # could not parse (1002, 1007 for bad UTF-8), the connection still open
                    by_client = self._protocol.state is ConnectionState.REMOTE_CLOSING
                    replies.append(self._closing(event.code, event.reason or "", "client" if by_client else "protocol"))
                    break
        for reply in replies:
            self._write(reply)
        if self.closed:
            self._shut()

    def _closing(self, code: int, reason: str, ended_by: str) -> bytes:
        """The close frame that ends the session (``self._lock`` held); the session counts as ended."""
        self.close_code, self.close_reason, self.ended_by = code, reason, ended_by
        try:
            return self._protocol.send(CloseConnection(code=code, reason=reason))
        except Exception:  # already closing
            return b""

    def send(self, message: str | bytes) -> None:
        """Send one whole message (text for ``str``); raises ``ConnectionError`` once the session has ended."""
        self.send_many((message,))

    def send_many(self, messages: Sequence[str | bytes]) -> None:
        """Send whole messages in order, framed into one write (the events a batch of tokens makes)."""
        with self._lock:
            if self.closed:
                raise ConnectionError(f"the WebSocket session has ended ({self.ended_by}, {self.close_code})")
            if self.deflate:  # wsproto compresses
                protocol = self._protocol
                data = b"".join(protocol.send(TextMessage(data=message) if isinstance(message, str)
                                              else BytesMessage(data=message)) for message in messages)
            else:  # a server's frames are unmasked: a header and the payload (wsproto's framing costs ~10x)
                data = b"".join(map(unmasked_frame, messages))
            try:
                self._sock.sendall(data)
            except OSError:
                self.close_code, self.ended_by = 1006, "gone"
                raise ConnectionError("the WebSocket client is gone") from None
            self.messages_sent += len(messages)

    def try_send_now(self, events: bytes) -> tuple[bytes, int] | None:
        """Send the ``data:`` payloads of server-sent ``events`` as text messages framed into one write, without
        waiting (the engine's thread writing a response's events): the frames and how many of their bytes went
        out, or None when another writer holds the session (or it compresses). ``OSError`` once it has ended. A
        rest goes by :meth:`send_rest`."""
        if self.deflate or not self._lock.acquire(blocking=False):
            return None
        try:
            if self.closed:
                raise OSError("the WebSocket session has ended")
            data, count = text_frames(events)
            self.messages_sent += count
            try:
                return data, nonblocking_socket(self._sock).send(data, socket.MSG_DONTWAIT)
            except BlockingIOError:
                return data, 0
        finally:
            self._lock.release()

    def send_rest(self, rest: bytes) -> None:
        """The rest of the frames :meth:`try_send_now` began, waiting for room (nothing else goes between)."""
        with self._lock:
            self._sock.sendall(rest)

    def has_input(self) -> bool:
        """Whether the client has sent something not read yet (a message, or the connection's end); the socket
        is asked at most every ``INPUT_CHECK_SECONDS`` (a syscall per token of every session costs the engine's
        thread more than the rest of the write)."""
        if self._pending:
            return True
        now = time.monotonic()
        if now < self._input_checked + INPUT_CHECK_SECONDS:
            return False
        self._input_checked = now
        try:
            nonblocking_socket(self._sock).recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
        except BlockingIOError:
            return False
        except OSError:
            return True
        return True  # bytes, or b"" at the connection's end

    def close(self, code: int = 1000, reason: str = "", ended_by: str = "server") -> None:
        """End the session with a close frame (``code``, ``reason``); nothing if it has ended already."""
        with self._lock:
            if self.closed:
                return
            frame = self._closing(code, reason, ended_by)
        self._write(frame)
        self._shut()

    def _write(self, data: bytes) -> None:
        if data:
            try:
                self._sock.sendall(data)
            except OSError:
                pass  # the client is gone: the session ends all the same

    def _end(self, ended_by: str, code: int) -> None:
        with self._lock:
            if self.ended_by is None:
                self.close_code, self.ended_by = code, ended_by

    def _shut(self) -> None:
        """After the close frame: the client sees the end of the connection now, and what it was still
        sending (the rest of a message too big, its own close frame) is read and dropped for a while, so
        its send ends and it reads our close frame instead of a reset (as an HTTP answer's close does)."""
        drain_before_close(self._sock)
