"""The HTTP handler under raw sockets: request-line and header errors, pooled threads."""

from __future__ import annotations

import json
import socket

import httpx
import pytest

from pytest_llmsim import LLMBackend


def raw(backend: LLMBackend, data: bytes) -> bytes:
    with socket.create_connection((backend.host, backend.port), timeout=5) as sock:
        sock.sendall(data)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


@pytest.mark.parametrize(("request_bytes", "status"), [
    (b"NONSENSE\r\n\r\n", b"400"),
    (b"GET /health HTTP/1.1 extra\r\n\r\n", b"400"),
    (b"GET /health HTTP/x.y\r\n\r\n", b"400"),
    (b"GET /health HTTP/2.0\r\n\r\n", b"505"),
    (b"POST /health\r\n\r\n", b"400"),
    (b"GET /health HTTP/1.1\r\n" + b"".join(b"X-H%d: v\r\n" % i for i in range(101)) + b"\r\n", b"431"),
    (b"GET /health HTTP/1.1\r\nX-Long: " + b"a" * 70000 + b"\r\n\r\n", b"431"),
    (b"GET /" + b"a" * 70000 + b" HTTP/1.1\r\n\r\n", b"414"),
    (b"\r\n", b"400"),
])
def test_malformed_requests_get_an_error_status(llm_backend: LLMBackend, request_bytes: bytes,
                                                status: bytes) -> None:
    """Always a status line (http.server would answer HTTP/0.9-style, with none) and a JSON
    body in OpenAI's error shape, never an HTML page."""
    response = raw(llm_backend, request_bytes)
    head, _, body = response.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 " + status + b" ")
    assert b"Content-Type: application/json" in head and b"Connection: close" in head
    error = json.loads(body)["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"]
    assert httpx.get(llm_backend.url_for("/health")).status_code == 200


def test_headers_reach_the_request_log(llm_backend: LLMBackend) -> None:
    body = b'{"model": "m", "prompt": "hi", "max_tokens": 1}'
    response = raw(llm_backend, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                                b"Connection: close\r\nX-Custom-Thing:  spaced value \r\nNo-Colon-Line\r\n"
                                b"Content-Length: %d\r\n\r\n" % len(body) + body)
    assert b" 200 " in response.split(b"\r\n", 1)[0] + b" "
    headers = llm_backend.requests[-1].headers
    assert headers["X-Custom-Thing"] == "spaced value"
    assert headers["Content-Type"] == "application/json"


def test_expect_100_continue(llm_backend: LLMBackend) -> None:
    body = b'{"model": "m", "prompt": "hi", "max_tokens": 1}'
    response = raw(llm_backend, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
                                b"Connection: close\r\n"
                                b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    assert response.startswith(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200")


def test_handler_threads_are_reused(llm_backend: LLMBackend) -> None:
    import threading

    before = {t.name for t in threading.enumerate() if t.name.startswith("llmsim-http-worker")}
    with httpx.Client() as client:
        for _ in range(20):
            assert client.get(llm_backend.url_for("/health")).status_code == 200
    after = {t.name for t in threading.enumerate() if t.name.startswith("llmsim-http-worker")}
    assert len(after - before) <= 2
