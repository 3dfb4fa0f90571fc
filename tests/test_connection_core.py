"""The connection core under ``llmsim serve --io loop``: what is its own, beyond the HTTP suites it passes.

The HTTP-level suites run in every mode (``test_remote.py``, ``--llmsim-isolation=process-loop``);
these tests cover the bounds of a parser that holds a header until its line ends, and that a
greenlet per connection is refused where nothing has patched the process.
"""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import pytest

pytest.importorskip("gevent")


class Loop:
    """An ``llmsim serve --io loop`` process: its URL and PID."""

    def __init__(self, url: str, pid: int) -> None:
        self.url, self.pid = url, pid

    def rss_kib(self) -> int:
        with open(f"/proc/{self.pid}/status") as status:
            return int(re.search(r"VmRSS:\s+(\d+)", status.read()).group(1))  # type: ignore[union-attr]


@pytest.fixture(scope="module")
def loop() -> Iterator[Loop]:
    process = subprocess.Popen(
        [sys.executable, "-m", "pytest_llmsim.cli", "serve", "--port", "0", "--speed", "inf", "--io", "loop"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert process.stdout is not None
    match = re.search(r"(http://127\.0\.0\.1:\d+)", process.stdout.readline())
    assert match, process.stderr.read() if process.stderr else ""
    yield Loop(match.group(1), process.pid)
    process.send_signal(signal.SIGINT)
    try:
        process.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_an_endless_header_line_is_a_431_and_memory_stays_bounded(loop: Loop) -> None:
    """httptools keeps a header's bytes until its line ends: a client that never ends one would grow
    the server without bound. The head is refused once it passes what the line limits allow."""
    host, port = loop.url.removeprefix("http://").split(":")
    before = loop.rss_kib()
    with socket.create_connection((host, int(port)), timeout=20) as sock:
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
