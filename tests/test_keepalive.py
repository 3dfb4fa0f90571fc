"""HTTP/1.1 persistent connections: kept by default, closed when asked, closed on purpose."""

from __future__ import annotations

import json
import socket
import sys
import time
from typing import Any

import httpx
import pytest

from pytest_llmsim import LLMBackend
from pytest_llmsim.server.connection import Connection

BODY = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}).encode()


def request(path: str = "/v1/chat/completions", body: bytes = BODY, extra: bytes = b"",
            version: bytes = b"HTTP/1.1") -> bytes:
    return (b"POST %s %s\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n%s\r\n%s"
            % (path.encode(), version, len(body), extra, body))


def read_response(sock: socket.socket) -> tuple[bytes, bytes]:
    """One response (head, body), by Content-Length or chunked framing."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("closed before a response")
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    lowered = head.lower()
    if b"transfer-encoding: chunked" in lowered:
        while not rest.endswith(b"0\r\n\r\n"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            rest += chunk
        return head, rest
    length = int(lowered.split(b"content-length: ")[1].split(b"\r\n")[0])
    while len(rest) < length:
        rest += sock.recv(65536)
    return head, rest


def connect(backend: LLMBackend) -> socket.socket:
    return socket.create_connection((backend.host, backend.port), timeout=5)


def closed(sock: socket.socket) -> bool:
    try:
        return sock.recv(1) == b""
    except OSError:
        return True


def test_requests_share_one_connection(llm_backend: LLMBackend) -> None:
    stream = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3,
                         "stream": True}).encode()
    with connect(llm_backend) as sock:
        for body in (BODY, stream, BODY):  # a streamed answer in between: chunked framing holds
            sock.sendall(request(body=body))
            head, payload = read_response(sock)
            assert head.startswith(b"HTTP/1.1 200") and b"connection: close" not in head.lower()
        assert payload.startswith(b"{") and json.loads(payload)["usage"]["completion_tokens"] == 2
    assert [r.status for r in llm_backend.requests] == [200, 200, 200]


def test_an_httpx_client_reuses_its_connection(llm_backend: LLMBackend) -> None:
    ports = set()
    with httpx.Client() as client:
        for _ in range(3):
            response = client.get(llm_backend.url_for("/health"), extensions={})
            stream = response.extensions["network_stream"]
            ports.add(stream.get_extra_info("socket").getsockname()[1])
    assert len(ports) == 1


def test_connection_close_and_http_1_0_are_honoured(llm_backend: LLMBackend) -> None:
    for extra, version in ((b"Connection: close\r\n", b"HTTP/1.1"), (b"", b"HTTP/1.0")):
        with connect(llm_backend) as sock:
            sock.sendall(request(extra=extra, version=version))
            head, _ = read_response(sock)
            assert b"connection: close" in head.lower()
            assert closed(sock)


def test_keepalive_can_be_turned_off(llm_backend: LLMBackend) -> None:
    llm_backend.configure(keepalive=False)
    with connect(llm_backend) as sock:
        sock.sendall(request())
        head, _ = read_response(sock)
        assert b"connection: close" in head.lower() and closed(sock)


def test_max_requests_closes_without_telling_the_client(llm_backend: LLMBackend) -> None:
    """A stale pooled connection, on purpose: the gateway's retry path gets exercised."""
    llm_backend.configure(keepalive_max_requests=2)
    with connect(llm_backend) as sock:
        for _ in range(2):
            sock.sendall(request())
            head, _ = read_response(sock)
            assert b"connection: close" not in head.lower()  # no warning given
        assert closed(sock)


def test_an_idle_kept_alive_connection_is_closed_after_the_timeout(llm_backend: LLMBackend) -> None:
    llm_backend.configure(keepalive_timeout=0.3)
    with connect(llm_backend) as sock:
        sock.sendall(request())
        read_response(sock)
        started = time.monotonic()
        assert closed(sock) and time.monotonic() - started < 3  # after 0.3 s; never, before (margin: load)


def test_an_unread_large_body_says_it_closes(llm_backend: LLMBackend) -> None:
    llm_backend.configure(max_body_bytes=1000)
    big = b'{"model": "m", "messages": "' + b"x" * (2 * 1024 * 1024) + b'"}'
    with connect(llm_backend) as sock:
        sock.sendall(request(body=big))
        head, _ = read_response(sock)
        assert head.startswith(b"HTTP/1.1 413") and b"connection: close" in head.lower()


def test_a_refused_large_body_gets_its_answer_not_a_reset(llm_backend: LLMBackend) -> None:
    """The server answers 413 before reading a body it refuses and closes; closing with the client's
    bytes unread makes the kernel send a reset, which fails the client's send and can discard the answer
    already on its way. The server must drain what the client is still sending before it closes."""
    llm_backend.configure(max_body_bytes=1000)
    big = b'{"model": "m", "messages": "' + b"x" * (16 * 1024 * 1024) + b'"}'
    with connect(llm_backend) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 64 * 1024)  # the body cannot hide in buffers
        sock.sendall(request(body=big))
        head, _ = read_response(sock)
        assert head.startswith(b"HTTP/1.1 413") and b"connection: close" in head.lower()
        assert closed(sock)
    assert httpx.get(llm_backend.url_for("/health")).status_code == 200


def test_a_refused_chunked_body_gets_its_answer_not_a_reset(llm_backend: LLMBackend) -> None:
    llm_backend.configure(max_body_bytes=1000)
    chunk = b"x" * 65536
    body = b"".join(b"%x\r\n%s\r\n" % (len(chunk), chunk) for _ in range(256)) + b"0\r\n\r\n"  # 16 MiB
    with connect(llm_backend) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 64 * 1024)
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Transfer-Encoding: chunked\r\n\r\n" + body)
        head, _ = read_response(sock)
        assert head.startswith(b"HTTP/1.1 413") and b"connection: close" in head.lower()
        assert closed(sock)


def test_a_kept_alive_request_counts_from_when_it_arrived_not_from_when_it_was_read(
        llm_backend: LLMBackend, monkeypatch: pytest.MonkeyPatch) -> None:
    """A later request on a kept-alive connection arrives when its bytes reach the host (the kernel's
    receive stamp), as the first does: a handler that gets to it late (a busy server, the GIL) must not
    make its time to first token start late. Here the handler dawdles 200 ms before reading it: the answer,
    due 300 ms after the request was sent, must not come 200 ms later than that."""
    if not sys.platform.startswith("linux"):
        pytest.skip("receive stamps (SO_TIMESTAMP) are Linux's")
    if not hasattr(llm_backend, "_server"):
        pytest.skip("slows the server's own handler: needs the backend in this process")
    llm_backend.configure(speed=1.0, ttft=0.3, itl=0.0)
    next_message = Connection._next_message
    calls: list[Connection] = []

    def dawdling_next_message(self: Connection) -> Any:
        calls.append(self)
        if len(calls) == 2:  # the first is the connection's own; the second waits for the next request head
            time.sleep(0.2)
        return next_message(self)

    monkeypatch.setattr(Connection, "_next_message", dawdling_next_message)
    with connect(llm_backend) as sock:
        sock.sendall(request())
        read_response(sock)
        sock.sendall(request())  # sent now, while the handler dawdles: read ~200 ms later
        sent = time.monotonic()
        head, _ = read_response(sock)
        waited = time.monotonic() - sent
    assert head.startswith(b"HTTP/1.1 200")
    assert len(calls) >= 2, "the handler never dawdled"
    assert waited >= 0.28, waited  # never before the 0.3 s counted from the kernel's receive stamp
    # counted from the send (0.3 s), not from the dawdling handler's read (0.5 s): simulated, so load cannot move it
    assert llm_backend.requests[-1].ttft == pytest.approx(0.3)


def test_a_pipelined_request_waits_for_the_one_before_it(llm_backend: LLMBackend) -> None:
    """Two requests sent back to back on one connection (HTTP/1.1 pipelining) are taken in turn: the
    second's time to first token starts when the first is answered, not when both bytes arrived."""
    llm_backend.configure(speed=1.0, ttft=0.2, itl=0.0)
    with connect(llm_backend) as sock:
        sock.sendall(request() + request())
        sent = time.monotonic()
        read_response(sock)
        first = time.monotonic() - sent
        head, _ = read_response(sock)
        second = time.monotonic() - sent
    assert head.startswith(b"HTTP/1.1 200")
    # The server's own account, not the client's read times (a loaded machine skews those): the
    # second arrived when it was taken, so its TTFT is its own 0.2 s, not the first's wait as well.
    assert llm_backend.wait_idle(timeout=5)
    first_record, second_record = llm_backend.requests
    assert first_record.ttft == pytest.approx(0.2, abs=0.01) and second_record.ttft == pytest.approx(0.2, abs=0.01)
    assert first >= 0.19 and second > first, (first, second)


@pytest.mark.parametrize("which", ["first", "kept-alive"])
def test_a_head_that_arrived_in_time_is_not_cut_when_the_server_is_slow_to_parse_it(
        llm_backend: LLMBackend, monkeypatch: pytest.MonkeyPatch, which: str) -> None:
    """The request-head deadline is the client's: a head that reached the server in time is answered
    however long the server takes to get to parsing it (a thousand handler threads under one GIL can
    starve one for seconds). Cutting it reset fresh connections under 1,024 closed-loop streams."""
    if not hasattr(llm_backend, "_server"):
        pytest.skip("slows the server's own handler: needs the backend in this process")
    llm_backend.configure(keepalive_timeout=0.3)
    next_message = Connection._next_message
    starved: list[bool] = []

    def starved_next_message(self: Connection) -> Any:
        if (self._served == 0) == (which == "first"):
            starved.append(True)
            time.sleep(0.8)  # the head is in the kernel's buffer; the server is slow, not the client
        return next_message(self)

    monkeypatch.setattr(Connection, "_next_message", starved_next_message)
    with connect(llm_backend) as sock:
        sock.sendall(request())
        head, _ = read_response(sock)
        assert head.startswith(b"HTTP/1.1 200")
        sock.sendall(request())
        head, _ = read_response(sock)
        assert head.startswith(b"HTTP/1.1 200")
    assert starved
