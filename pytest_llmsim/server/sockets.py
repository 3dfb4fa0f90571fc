"""The client's socket, in one place: receive stamps, peeks, shutdowns and the coalescing writer.

Everything that touches a connection's socket directly is here: reading with the kernel's receive stamps
(``SO_TIMESTAMP``), the non-blocking peek that tells a hung-up client, the
shutdown that drops a connection under a fault, switching a socket to
blocking for a long stream, and the writer that sends a response's pieces
as one packet.
"""

from __future__ import annotations

import select
import socket
import struct
import sys
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from werkzeug.wrappers import Request

__all__ = ["SO_TIMESTAMP", "CoalescingWriter", "blocking_socket", "client_gone",
           "drop_connection", "nonblocking_socket", "receive_stamped", "stamp_time"]

# Linux stamps each received packet with the kernel's receive time when asked
# (SO_TIMESTAMP; Python names neither constant). The stamp of a request's first
# bytes is when it really arrived, however late a handler thread gets to it.
SO_TIMESTAMP = 29 if sys.platform.startswith("linux") else None
_TIMEVAL = struct.Struct("@ll")


_STAMP_SPACE = socket.CMSG_SPACE(_TIMEVAL.size) if hasattr(socket, "CMSG_SPACE") else 0


def receive_stamped(sock: socket.socket, size: int) -> tuple[bytes, float | None]:
    """Up to ``size`` bytes from ``sock`` and the ``time.monotonic()`` the kernel received them (None
    without a stamp: ``SO_TIMESTAMP`` off, or a platform without it). Raises as ``recv`` does."""
    if SO_TIMESTAMP is None:
        return sock.recv(size), None
    data, ancillary, _, _ = sock.recvmsg(size, _STAMP_SPACE)
    return data, stamp_time(ancillary)


_DONTWAIT = getattr(socket, "MSG_DONTWAIT", None)  # Windows has none


def receive_now(raw: socket.socket, size: int) -> tuple[bytes, float | None] | None:
    """What :func:`receive_stamped` returns if bytes (or the end) are there already, without waiting; None
    when a receive would wait (or on Windows). ``raw`` is :func:`nonblocking_socket`'s: under gevent the
    plain socket, past its wrapper and timeout."""
    if _DONTWAIT is None:
        return None
    try:
        if SO_TIMESTAMP is None:
            return raw.recv(size, _DONTWAIT), None
        data, ancillary, _, _ = raw.recvmsg(size, _STAMP_SPACE, _DONTWAIT)
    except (BlockingIOError, InterruptedError):
        return None
    return data, stamp_time(ancillary) if ancillary else None


def stamp_time(ancillary: list[tuple[int, int, bytes]], _sol_socket: int = socket.SOL_SOCKET,
               _size: int = _TIMEVAL.size) -> float | None:
    """The ``time.monotonic()`` at which the kernel received the data ``ancillary`` (recvmsg's) came with."""
    for level, kind, payload in ancillary:
        if level == _sol_socket and kind == SO_TIMESTAMP and len(payload) >= _size:
            seconds, micros = _TIMEVAL.unpack_from(payload)
            age: float = time.time() - (seconds + micros / 1e6)
            return time.monotonic() - max(0.0, age)
    return None


def nonblocking_socket(sock: socket.socket) -> socket.socket:
    """The socket to call with ``MSG_DONTWAIT``: ``sock`` itself, or, under gevent (``llmsim serve --io
    gevent``), the plain socket it wraps — gevent's own waits for readiness on ``EAGAIN``, flag or not, and
    these calls must return at once (gevent keeps ``_sock`` for code that needs the raw socket)."""
    return getattr(sock, "_sock", sock)


class CoalescingWriter:
    """Holds writes until ``flush()``, then sends them at once (one non-blocking send, ``sendall`` for a rest).

    An answer's head goes with its first piece of body, and a chunk's framing
    with its data: one packet each, never three per SSE event. The final
    ``0\r\n\r\n`` goes out at once. A plain class: an ``io`` object per
    connection costs more than it gives.
    """

    __slots__ = ("_dontwait", "_parts", "_raw", "_sock", "closed")

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._raw = nonblocking_socket(sock)
        self._dontwait = _DONTWAIT
        self._parts: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> int:
        self._parts.append(data)
        if data == b"0\r\n\r\n":
            self.flush()
        return len(data)

    def flush(self) -> None:
        if self._parts:
            data = b"".join(self._parts)
            self._parts.clear()
            # One non-blocking send takes a whole small response; sendall only for a rest
            # (gevent's sendall asks the socket's buffer size first: a syscall per response).
            dontwait = self._dontwait
            try:
                sent = 0 if dontwait is None else self._raw.send(data, dontwait)
            except (BlockingIOError, InterruptedError):
                sent = 0
            if sent < len(data):
                self._sock.sendall(memoryview(data)[sent:])

    def close(self) -> None:
        self.closed = True




def blocking_socket(request: Request) -> socket.socket | None:
    """The client's socket, in blocking mode (no timeout), or None.

    The connection reads its request with a timeout (``keepalive_timeout``);
    once an answer is being waited for or streamed it must not have one: a
    timed socket makes the non-blocking peek and sends below wait first.
    """
    sock: socket.socket | None = request.environ.get("werkzeug.socket")
    if sock is not None and sock.gettimeout() is not None:
        try:
            sock.settimeout(None)
        except OSError:
            pass  # already closed
    return sock


def client_gone(request: Request) -> bool:
    """True when the client has closed its connection (EOF or reset pending on the socket).

    A non-blocking peek, not ``select()``, which cannot watch descriptors past
    1024 and would report a busy server's live clients as gone.
    """
    sock = blocking_socket(request)
    if sock is None:
        return False
    dontwait = getattr(socket, "MSG_DONTWAIT", None)
    try:
        if dontwait is None and not _readable_now(sock):  # Windows: ask first, then peek
            return False
        return bool(nonblocking_socket(sock).recv(1, socket.MSG_PEEK | (dontwait or 0)) == b"")
    except BlockingIOError:
        return False  # nothing to read: still there
    except OSError:
        return True


def _readable_now(sock: socket.socket) -> bool:
    """Whether a read would not block (data, EOF or an error pending), without waiting.

    ``poll`` where there is one (no descriptor limit); Windows' ``select``
    takes sockets of any number.
    """
    if hasattr(select, "poll"):
        poller = select.poll()
        poller.register(sock, select.POLLIN)
        return bool(poller.poll(0))
    return bool(select.select([sock], [], [], 0)[0])


def drop_connection(request: Request) -> None:
    """Close the client's connection under the server (FIN both ways); later writes fail."""
    sock = request.environ.get("werkzeug.socket")
    if sock is not None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass  # already gone


def can_send_now() -> bool:
    """Whether this platform can send without waiting (``MSG_DONTWAIT``; Windows cannot)."""
    return hasattr(socket, "MSG_DONTWAIT")


def send_chunk_now(sock: socket.socket, data: bytes) -> tuple[bytes, int]:
    """``data`` framed as one HTTP/1.1 chunk and sent without waiting (``sock`` from
    :func:`nonblocking_socket`): the frame, and how many of its bytes went out (raises ``OSError``
    when the client is gone)."""
    framed = b"%x\r\n%s\r\n" % (len(data), data)
    try:
        return framed, sock.send(framed, socket.MSG_DONTWAIT)
    except BlockingIOError:
        return framed, 0
