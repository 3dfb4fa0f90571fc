"""What a hostile or broken client must not do to a server (the defects issue, part 3).

Each case runs against ``llmsim serve`` in its own process, one per ``--io`` mode
and module, so a freeze or a crash fails the test instead of taking pytest with it.
"""

from __future__ import annotations

import socket
import ssl
import time
from collections.abc import Iterator

import httpx
import pytest
from serve_process import Served

from pytest_llmsim import RemoteBackend

# A TLS record header announcing a 512-byte handshake message: the server waits for the rest.
_HANDSHAKE_START = b"\x16\x03\x01\x02\x00"


@pytest.fixture(scope="module", params=["threads", "gevent", "loop"])
def tls_served(request: pytest.FixtureRequest) -> Iterator[Served]:
    server = Served(request.param, "--tls", "true", "--keepalive-timeout", "1")
    yield server
    server.stop()


def _closed_by_server(sock: socket.socket) -> bool:
    try:
        return sock.recv(1) == b""
    except TimeoutError:
        return False
    except OSError:
        return True  # reset


def test_a_handshake_dripped_a_byte_at_a_time_is_cut_at_the_head_deadline(tls_served: Served) -> None:
    with socket.create_connection(("127.0.0.1", tls_served.port)) as sock:
        sock.sendall(_HANDSHAKE_START)
        sock.settimeout(0.2)
        started = time.monotonic()
        closed = False
        # A byte every 0.2 s: every read comes within keepalive_timeout (1 s), the handshake never ends.
        while not closed and time.monotonic() - started < 15:
            try:
                sock.sendall(b"\0")
            except OSError:
                closed = True
                break
            closed = _closed_by_server(sock)
        assert closed, "the server kept a handshake that never ends"
        assert time.monotonic() - started < 10  # 1 s, with room for a machine ten times slower


def _threads_settled(served: Served) -> int:
    """The process's thread count once it has stopped growing (new connections start their threads)."""
    count = served.threads()
    for _ in range(30):
        time.sleep(0.1)
        now = served.threads()
        if now == count:
            return count
        count = now
    return count


def test_unfinished_handshakes_hold_no_relay_thread_and_https_is_served_beside_them(tls_served: Served) -> None:
    remote = RemoteBackend(tls_served.url)
    remote.configure(keepalive_timeout=30)
    try:
        trust = ssl.create_default_context(cafile=remote.ca_file)
        with httpx.Client(verify=trust) as client:  # a warm connection first: its threads are counted before
            assert client.get(tls_served.secure_url + "/health").status_code == 200
            before = _threads_settled(tls_served)
            drips = [socket.create_connection(("127.0.0.1", tls_served.port)) for _ in range(20)]
            try:
                for sock in drips:
                    sock.sendall(_HANDSHAKE_START)
                during = _threads_settled(tls_served)
                # threads mode: a handler thread each, no relay thread; gevent and loop: greenlets only
                allowed = 20 if tls_served.io == "threads" else 0
                assert during - before <= allowed + 1, (before, during)
                with httpx.Client(verify=trust, timeout=10) as fresh:
                    assert fresh.get(tls_served.secure_url + "/health").status_code == 200
            finally:
                for sock in drips:
                    sock.close()
    finally:
        remote.reset()
