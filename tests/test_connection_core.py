"""The connection core under ``llmsim serve --io loop``: what is its own, beyond the HTTP suites it passes.

The HTTP-level suites run in every mode (``test_remote.py``, ``--llmsim-isolation=process-loop``);
these tests cover the bounds of a parser that holds a header until its line ends, and that a
greenlet per connection is refused where nothing has patched the process.
"""

from __future__ import annotations

import socket
import sys
import time
from collections.abc import Iterator

import httpx
import pytest
from serve_process import Served

pytest.importorskip("gevent")


@pytest.fixture(scope="module")
def loop() -> Iterator[Served]:
    served = Served("loop")
    yield served
    served.stop()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_an_endless_header_line_is_a_431_and_memory_stays_bounded(loop: Served) -> None:
    """httptools keeps a header's bytes until its line ends: a client that never ends one would grow
    the server without bound. The head is refused once it passes what the line limits allow."""
    before = loop.rss_kib()
    with socket.create_connection(("127.0.0.1", loop.port), timeout=20) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Endless: ")
        chunk = b"a" * 65536
        answer = b""
        started = time.monotonic()
        try:
            for _ in range(400):  # 26 MB, far past the ~6.6 MB a head may take
                sock.sendall(chunk)
        except OSError:
            pass  # the server answered and closed while we were still sending
        sock.settimeout(10)
        try:
            while data := sock.recv(65536):
                answer += data
        except OSError:
            pass
    assert answer.startswith(b"HTTP/1.1 431 "), answer[:200]
    assert b"Request head too large" in answer and time.monotonic() - started < 20
    assert loop.rss_kib() - before < 20_000  # not the 26 MB sent
    assert httpx.get(loop.url + "/health").status_code == 200


def test_a_greenlet_per_connection_is_refused_where_gevent_has_not_patched() -> None:
    from pytest_llmsim.server.listener import ConnectionServer

    with pytest.raises(RuntimeError, match="gevent has patched"):
        ConnectionServer("127.0.0.1", 0, lambda environ, start_response: [], cooperative=True)


def test_the_heap_is_trimmed_once_a_wave_of_connections_has_closed() -> None:
    """malloc_trim gives a wave's freed memory back (RSS grew with every wave of 1,000 WebSocket sessions)
    but pauses the process for milliseconds: once a wave has ended, not for each close."""
    from pytest_llmsim.server.memory_trim import WaveTrimmer

    calls: list[int] = []
    trimmer = WaveTrimmer(trim=lambda pad: calls.append(pad) or 1)
    for now_open in range(1, 1001):
        trimmer.opened(now_open)
    for still_open in range(999, 62, -1):  # most of the wave closed, a few more than a sixteenth still open
        trimmer.closed(still_open)
    assert calls == []
    for still_open in range(62, -1, -1):  # down to a sixteenth: the wave has ended
        trimmer.closed(still_open)
    assert calls == [0]
    for now_open in range(1, 101):  # a small wave: under 256 closes, no trim
        trimmer.opened(now_open)
    for still_open in range(99, -1, -1):
        trimmer.closed(still_open)
    assert calls == [0]
