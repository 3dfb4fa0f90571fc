"""WebSocket sessions on the connection core, driven by the ``websockets`` client the official SDKs use.

A throwaway echo session (``tests/echo_session.py``) registered on a backend in this process (threads)
and on one served with ``--io loop``: the handshake and its refusals, subprotocols, fragmentation,
ping/pong, per-message deflate, the message size bound, the idle deadline and how a session ended.
"""

from __future__ import annotations

import json
import socket
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from echo_session import ENDED, echo
from polling import wait_for
from serve_process import Served

from pytest_llmsim import LLMBackend

websockets_sync = pytest.importorskip("websockets.sync.client")
from websockets.exceptions import ConnectionClosed, InvalidStatus  # noqa: E402

ECHO_SCRIPT = Path(__file__).parent / "echo_session.py"


@pytest.fixture(scope="module")
def served_loop() -> Iterator[str]:
    """The echo session served under gevent's patching (``--io loop``): its base URL."""
    pytest.importorskip("gevent")
    served = Served("loop", command=[sys.executable, str(ECHO_SCRIPT), "--io", "loop", "--idle", "1"])
    yield served.url
    served.stop()


@pytest.fixture
def echo_url(llm_backend: LLMBackend) -> str:
    """The echo session on this test's backend (a thread per connection); ``/idle`` after it closes after 1 s
    idle (the other route's default deadline leaves room for a slow machine between messages)."""
    if not hasattr(llm_backend, "_server"):
        pytest.skip("registers a session handler: needs the backend in this process")
    llm_backend.httpserver.add_session("/v1/echo", echo, subprotocols=("echo.v2", "echo.v1"))
    llm_backend.httpserver.add_session("/v1/echo/idle", echo, idle_seconds=1.0)
    return f"ws://127.0.0.1:{llm_backend.port}/v1/echo"


def _ws(base: str) -> str:
    return base.replace("http://", "ws://") + "/v1/echo"


def test_text_binary_and_fragmented_messages_come_back_whole(echo_url: str) -> None:
    with websockets_sync.connect(echo_url, subprotocols=["echo.v1", "echo.v2"]) as ws:  # type: ignore[list-item]
        assert ws.subprotocol == "echo.v2"  # the server's preference among those offered
        ws.send("hello")
        assert ws.recv(timeout=10) == "hello"
        ws.send(b"\x00\x01binary")
        assert ws.recv(timeout=10) == b"\x00\x01binary"
        ws.send(["frag", "mented ", "message"])  # one message in three frames
        assert ws.recv(timeout=10) == "fragmented message"
        ws.ping(b"are you there").wait(10)  # answered with a pong carrying the same bytes


def test_per_message_deflate_is_used_when_offered(echo_url: str) -> None:
    text = "the same words over and over " * 2000
    with websockets_sync.connect(echo_url, compression="deflate") as ws:
        assert "permessage-deflate" in ws.response.headers.get("Sec-WebSocket-Extensions", "")
        ws.send(text)
        assert ws.recv(timeout=10) == text
    with websockets_sync.connect(echo_url, compression=None) as ws:
        assert "Sec-WebSocket-Extensions" not in ws.response.headers
        ws.send("plain")
        assert ws.recv(timeout=10) == "plain"


def test_a_message_over_the_bound_closes_with_1009_also_when_deflate_hides_its_size(
        llm_backend: LLMBackend) -> None:
    """What deflate expands to counts: 4 MB of zeros arrive as a few KB and are refused all the same."""
    if not hasattr(llm_backend, "_server"):
        pytest.skip("registers a session handler: needs the backend in this process")
    llm_backend.httpserver.add_session("/v1/small", echo, max_message_bytes=65536)
    url = f"ws://127.0.0.1:{llm_backend.port}/v1/small"
    for compression in ("deflate", None):
        with websockets_sync.connect(url, compression=compression, max_size=None) as ws:
            ws.send("x" * 1000)
            assert ws.recv(timeout=10) == "x" * 1000  # under the bound
            ws.send("\x00" * 4_000_000)
            with pytest.raises(ConnectionClosed) as closed:
                ws.recv(timeout=10)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1009


def test_an_idle_session_is_closed_with_1001_and_the_handler_sees_how_it_ended(echo_url: str) -> None:
    before = ENDED["idle"]
    with websockets_sync.connect(echo_url + "/idle") as ws, pytest.raises(ConnectionClosed) as closed:
        ws.recv(timeout=10)  # sends nothing: the 1 s idle deadline passes
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1001
    assert wait_for(lambda: ENDED["idle"], lambda count: count > before) == before + 1


def test_the_server_closes_with_its_code_and_sees_a_client_leave(echo_url: str) -> None:
    with websockets_sync.connect(echo_url) as ws:
        ws.send("close-me")
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=10)
    assert closed.value.rcvd is not None and (closed.value.rcvd.code, closed.value.rcvd.reason) == (4000, "asked to")
    gone, by_client = ENDED["gone"], ENDED["client"]
    with socket.create_connection(("127.0.0.1", int(echo_url.split(":")[2].split("/")[0])), timeout=10) as sock:
        sock.sendall(b"GET /v1/echo HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                     b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
        assert sock.recv(65536).startswith(b"HTTP/1.1 101 ")
    assert wait_for(lambda: ENDED["gone"], lambda count: count > gone) == gone + 1  # no close frame: 1006
    with websockets_sync.connect(echo_url) as ws:
        ws.send("x")
        ws.recv(timeout=10)
    assert wait_for(lambda: ENDED["client"], lambda count: count > by_client) == by_client + 1


def test_the_handshake_is_checked_before_the_upgrade(llm_backend: LLMBackend, echo_url: str) -> None:
    http = echo_url.replace("ws://", "http://")
    plain = httpx.get(http)
    assert plain.status_code == 426 and plain.headers["Upgrade"] == "websocket"
    assert plain.json()["error"]["code"] == "upgrade_required"  # the route's API's error shape
    no_key = httpx.get(http, headers={"Upgrade": "websocket", "Connection": "Upgrade", "Sec-WebSocket-Version": "13"})
    assert no_key.status_code == 400 and "Sec-WebSocket-Key" in no_key.json()["error"]["message"]
    old = httpx.get(http, headers={"Upgrade": "websocket", "Connection": "Upgrade", "Sec-WebSocket-Version": "8",
                                   "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="})
    assert old.status_code == 426 and old.headers["Sec-WebSocket-Version"] == "13"
    llm_backend.configure(api_keys=["sk-right"])
    with pytest.raises(InvalidStatus) as refused:
        websockets_sync.connect(echo_url)  # no key: refused before the 101, as a plain request is
    assert refused.value.response.status_code == 401
    with websockets_sync.connect(echo_url, additional_headers={"Authorization": "Bearer sk-right"}) as ws:
        ws.send("keyed")
        assert ws.recv(timeout=10) == "keyed"
    assert httpx.get(echo_url.replace("ws://", "http://").replace("/v1/echo", "/health")).status_code == 200


def test_sessions_are_served_under_the_loop_mode_beside_plain_requests(served_loop: str) -> None:
    results: list[str] = []

    def session(index: int) -> None:
        with websockets_sync.connect(_ws(served_loop)) as ws:
            for turn in range(5):
                ws.send(f"{index}:{turn}")
                results.append(str(ws.recv(timeout=20)))

    threads = [threading.Thread(target=session, args=(index,)) for index in range(8)]
    for thread in threads:
        thread.start()
    assert httpx.get(served_loop + "/health").status_code == 200  # plain requests beside open sessions
    for thread in threads:
        thread.join(30)
    assert sorted(results) == sorted(f"{index}:{turn}" for index in range(8) for turn in range(5))
    with websockets_sync.connect(_ws(served_loop) + "/idle") as ws, pytest.raises(ConnectionClosed) as closed:
        ws.recv(timeout=10)  # the idle deadline (1 s) under gevent's loop too
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1001
    with websockets_sync.connect(_ws(served_loop)) as ws:
        ws.send("count")
        assert json.loads(ws.recv(timeout=10))["client"] >= 8
