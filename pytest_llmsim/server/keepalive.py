"""HTTP/1.1 persistent connections: when a connection stays open after an answer, and how it closes.

werkzeug's development server answered every request with ``Connection:
close``, so a gateway's upstream connection pool was never exercised. A
connection stays open after a response when the client allows it (HTTP/1.1
without ``Connection: close``) and the response is delimited (a length,
chunked, or no body), and when the request's body was read to its end, or its
rest is small enough to discard; otherwise it closes, saying so. Two connection-level settings close a
kept-alive connection *without telling the client first*, so a gateway's
retry-on-stale-connection path can be tested: after ``keepalive_max_requests``
requests, and after ``keepalive_timeout`` seconds idle (the same deadline a
connection has to send a request head).
"""

from __future__ import annotations

import functools
import socket
import time

__all__ = ["DISCARD_LIMIT", "KeepAlivePolicy", "drain_before_close", "keepalive_policy", "response_framing"]

# A request body the application left unread is discarded up to this size to keep
# the connection; a larger rest closes it instead.
DISCARD_LIMIT = 1024 * 1024
# Closing that connection drains what the client still sends first (see drain_before_close):
# until it stops for LINGER_IDLE seconds or LINGER_SECONDS have passed (nginx: lingering_timeout
# and lingering_time, 5 s and 30 s; a test's client sends at loopback speed).
LINGER_IDLE = 0.25
LINGER_SECONDS = 2.0


def drain_before_close(sock: socket.socket) -> None:
    """Half-close ``sock``, then read and drop what the peer still sends, for a while, before it is closed.

    Closing a socket with received bytes unread makes the kernel answer with
    a reset: the client's send fails, and the answer it had not read yet
    (a 413 for the body it was sending) can be discarded with it. Ends when
    the peer closes, pauses ``LINGER_IDLE`` seconds, or after ``LINGER_SECONDS``.
    """
    try:
        sock.shutdown(socket.SHUT_WR)  # the answer is complete: the client sees its end now
        deadline = time.monotonic() + LINGER_SECONDS
        while (left := deadline - time.monotonic()) > 0:
            sock.settimeout(min(left, LINGER_IDLE))
            if not sock.recv(65536):
                return  # the client closed
    except OSError:  # a pause (timeout), a reset, or already closed
        pass


def response_framing(code: int, headers: list[tuple[str, str]], *, head_only: bool, version: str,
                     body_can_finish: bool, keep: bool) -> tuple[bool, bool, list[tuple[str, str]]]:
    """How a response goes on the wire: (chunked, keep the connection, headers to add).

    ``keep`` is what the client and the settings allow; it is dropped for a request body too large to
    discard unread (``body_can_finish`` False), an application's ``Connection: close``, or a body
    without a length on HTTP/1.0 (it ends with the connection). A closing response says so.
    """
    sized = False
    says_connection = False
    for key, value in headers:
        lowered = key.lower()
        if lowered == "content-length":
            sized = True
        elif lowered == "connection":
            says_connection = True
            if "close" in value.lower():
                keep = False  # the application says so
    if not body_can_finish:
        keep = False  # a chunked or large unread body: say it now
    no_body = head_only or 100 <= code < 200 or code in (204, 304)
    chunked = False
    extra: list[tuple[str, str]] = []
    if not sized and not no_body:
        if version == "HTTP/1.1":
            chunked = True
            extra.append(("Transfer-Encoding", "chunked"))
        else:
            keep = False  # the body ends when the connection does
    if not keep and not says_connection:
        extra.append(("Connection", "close"))
    return chunked, keep, extra


class KeepAlivePolicy:
    """What the server allows: persistent connections at all, and how many requests on one."""

    __slots__ = ("enabled", "max_requests")

    def __init__(self, enabled: bool = True, max_requests: int | None = None) -> None:
        self.enabled = enabled
        self.max_requests = max_requests


@functools.lru_cache(maxsize=8)
def keepalive_policy(enabled: bool, max_requests: int | None) -> KeepAlivePolicy:
    """The policy of these settings, one object for each (a connection asks for it every request)."""
    return KeepAlivePolicy(enabled, max_requests)
