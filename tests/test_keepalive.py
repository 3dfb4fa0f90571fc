"""HTTP/1.1 persistent connections: kept by default, closed when asked, closed on purpose."""

from __future__ import annotations

import json
import socket
import time

import httpx

from pytest_llmsim import LLMBackend

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
        assert closed(sock) and time.monotonic() - started < 3


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
