"""The connection core under raw sockets: request-line and header errors, pooled threads, werkzeug's environ."""

from __future__ import annotations

import email.utils
import json
import socket
import subprocess
import sys
import threading
import time
from typing import Any

import httpx
import pytest
from werkzeug.serving import make_server

from pytest_llmsim import LLMBackend
from pytest_llmsim.server.listener import ConnectionServer
from pytest_llmsim.server.sockets import CoalescingWriter


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
                                b"Connection: close\r\nX-Custom-Thing:  spaced value \r\n"
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


# --- the lean request path: the same environ and head as werkzeug's, the same bytes on the wire ---


def _environ_of(serve: Any, request: bytes) -> dict[str, Any]:
    """The environ a WSGI server given by ``serve(app)`` (a started server) built for ``request``."""
    seen: list[dict[str, Any]] = []

    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        seen.append(dict(environ))
        start_response("200 OK", [("Content-Length", "2")])
        return [b"ok"]

    server = serve(app)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        with socket.create_connection(server.server_address[:2], timeout=5) as sock:
            sock.sendall(request)
            assert sock.recv(65536).startswith(b"HTTP/1.1 200 OK\r\n")
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
    [environ] = seen
    return environ


# Differ by server, not by request: the ports, the socket, the body stream, the server's name.
SERVER_KEYS = {"REMOTE_PORT", "SERVER_PORT", "werkzeug.socket", "wsgi.input", "SERVER_SOFTWARE", "wsgi.errors",
               "werkzeug.server.shutdown"}


@pytest.mark.parametrize(("target", "headers"), [
    ("/v1/chat/completions", b""),
    ("/a%20b/c?x=1&y=%41", b""),
    ("/caf%C3%A9?q=%C3%A9&r", b""),
    ("/p?", b"X-Dup: 1\r\nX-Dup: 2\r\n"),
    ("/x", b"Content-Type: application/json\r\nContent-Length: 0\r\nX_Under: 1\r\n"),
    ("/x", b"Transfer-Encoding: chunked\r\n"),
    ("/x#fragment", b""),
    ("http://elsewhere:1/absolute?q", b""),
])
def test_the_environ_is_werkzeugs(target: str, headers: bytes) -> None:
    """Built without werkzeug's URL parsing, the connection's environ has the keys and values werkzeug's
    own development server builds for the same bytes (only what names a server differs)."""
    request = (b"GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\n%sConnection: close\r\n\r\n" % (target.encode(), headers)
               + (b"0\r\n\r\n" if b"chunked" in headers else b""))
    ours = _environ_of(lambda app: ConnectionServer("127.0.0.1", 0, app), request)
    reference = _environ_of(lambda app: make_server("127.0.0.1", 0, app, threaded=True), request)
    assert ours["llmsim.accepted_at"] <= time.monotonic()  # ours alone: when it arrived, its body's deadline
    assert {k: v for k, v in ours.items() if k not in SERVER_KEYS and not k.startswith("llmsim.")} == {
        k: v for k, v in reference.items() if k not in SERVER_KEYS}


def test_the_response_head_is_one_write_with_server_and_date(llm_backend: LLMBackend) -> None:
    response = raw(llm_backend, b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    head, _, body = response.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    assert lines[0] == "HTTP/1.1 200 OK"
    fields = dict(line.split(": ", 1) for line in lines[1:])
    assert fields["Server"].startswith("Werkzeug/") and "Python/" in fields["Server"]
    assert abs(email.utils.parsedate_to_datetime(fields["Date"]).timestamp() - time.time()) < 5
    assert fields["Connection"] == "close" and int(fields["Content-Length"]) == len(body)


def test_a_write_larger_than_the_socket_buffer_arrives_whole() -> None:
    """The writer's first send is non-blocking and takes what fits; the rest follows with ``sendall``."""
    sender, receiver = socket.socketpair()
    sender.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    data = bytes(range(256)) * 40_000  # 10 MB: far more than one send takes
    received = bytearray()

    def read_slowly() -> None:
        while chunk := receiver.recv(65536):
            received.extend(chunk)
            time.sleep(0.0001)

    reader = threading.Thread(target=read_slowly)
    reader.start()
    writer = CoalescingWriter(sender)
    writer.write(data[:10])
    writer.write(data[10:])
    writer.flush()
    sender.close()
    reader.join(10)
    receiver.close()
    assert bytes(received) == data


# --- RFC 9112: what a request's head and chunked body may and may not be (checked against h11) ---

CHAT_BODY = b'{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":1}'


def _chunked(*chunks: bytes, last: bytes = b"0\r\n\r\n") -> bytes:
    return b"".join(chunks) + last


_SPLIT = b"%x\r\n%s\r\n%x\r\n%s\r\n" % (10, CHAT_BODY[:10], len(CHAT_BODY) - 10, CHAT_BODY[10:])
HEAD = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nConnection: close\r\n"


@pytest.mark.parametrize(("request_bytes", "status"), [
    # chunk extensions and trailer fields are valid (they were refused)
    (HEAD + b"Transfer-Encoding: chunked\r\n\r\n" + _chunked(_SPLIT.replace(b"\r\n", b";a=1;b\r\n", 1)), b"200"),
    # llhttp refuses whitespace after an extension's ';', which RFC 9112 allows and h11 refuses too
    (HEAD + b"Transfer-Encoding: chunked\r\n\r\n" + _chunked(_SPLIT.replace(b"\r\n", b' ; n="q;v"\r\n', 1)), b"400"),
    (HEAD + b"Transfer-Encoding: chunked\r\n\r\n" + _chunked(_SPLIT.replace(b"\r\n", b' ;n="q;v"\r\n', 1)), b"200"),
    (HEAD + b"Transfer-Encoding: chunked\r\n\r\n" + _chunked(_SPLIT, last=b"0\r\nX-Checksum: abc\r\n\r\n"), b"200"),
    (HEAD + b"Transfer-Encoding: chunked\r\n\r\n" + _chunked(_SPLIT), b"200"),
    # chunk sizes are hex digits only (Python's int() took these)
    (HEAD + b"Transfer-Encoding: chunked\r\n\r\n" + _chunked(b"0x%x\r\n%s\r\n" % (len(CHAT_BODY), CHAT_BODY)), b"400"),
    (HEAD + b"Transfer-Encoding: chunked\r\n\r\n" + _chunked(b"+%x\r\n%s\r\n" % (len(CHAT_BODY), CHAT_BODY)), b"400"),
    (HEAD + b"Transfer-Encoding: chunked\r\n\r\n" + _chunked(b"1_0\r\n%s\r\n" % CHAT_BODY[:16]), b"400"),
    # a coding this server does not decode is a 501; one not ending in chunked, or with a length, a 400
    (HEAD + b"Transfer-Encoding: gzip, chunked\r\n\r\n" + _chunked(_SPLIT), b"501"),
    (HEAD + b"Transfer-Encoding: gzip\r\n\r\n", b"400"),
    (HEAD + b"Transfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n" + _chunked(_SPLIT), b"400"),
    # HTTP/1.1 needs one Host; a header line needs a colon right after its name; no NUL in a value
    (b"GET /health HTTP/1.1\r\nConnection: close\r\n\r\n", b"400"),
    (b"GET /health HTTP/1.1\r\nHost: a\r\nHost: b\r\nConnection: close\r\n\r\n", b"400"),
    (b"GET /health HTTP/1.1\r\nHost: x\r\nNo colon here\r\nConnection: close\r\n\r\n", b"400"),
    (b"GET /health HTTP/1.1\r\nHost: x\r\nX-A : 1\r\nConnection: close\r\n\r\n", b"400"),
    (b"GET /health HTTP/1.1\r\nHost: x\r\nX-A: 1\x002\r\nConnection: close\r\n\r\n", b"400"),
    (b"GET /health HTTP/1.1\r\nHost: x\r\nX-A: 1\r\n folded\r\nConnection: close\r\n\r\n", b"400"),
    (b"GET /health HTTP/1.0\r\n\r\n", b"200"),  # HTTP/1.0 needs no Host
])
def test_requests_are_parsed_as_rfc_9112_says(llm_backend: LLMBackend, request_bytes: bytes, status: bytes) -> None:
    response = raw(llm_backend, request_bytes)
    assert response.split(b" ", 2)[1] == status, response[:300]
    rfc_leaves_it_open = b"folded" in request_bytes or (b"Content-Length" in request_bytes and b"chunked" in
                                                         request_bytes) or b' ;' in request_bytes
    assert _h11_accepts(request_bytes) == (status == b"200") or status == b"501" or rfc_leaves_it_open
    assert raw(llm_backend, b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").startswith(
        b"HTTP/1.1 200")


def _h11_accepts(data: bytes) -> bool:
    """h11's verdict on a whole request (the head and its body), as a server."""
    import h11

    connection = h11.Connection(h11.SERVER)
    connection.receive_data(data)
    try:
        while True:
            event = connection.next_event()
            if event is h11.NEED_DATA or isinstance(event, h11.EndOfMessage):
                return isinstance(event, h11.EndOfMessage) or data.endswith(b"\r\n\r\n")
    except h11.RemoteProtocolError:
        return False


def test_an_empty_request_target_gets_a_status_line(llm_backend: LLMBackend) -> None:
    response = raw(llm_backend, b"GET  HTTP/1.1\r\nHost: x\r\n\r\n")
    assert response.startswith(b"HTTP/1.1 400 "), response[:100]  # was an HTTP/0.9 answer: no status line


def test_a_raw_utf8_path_reads_as_utf8_in_the_404(llm_backend: LLMBackend) -> None:
    response = raw(llm_backend, "GET /café HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
    body = json.loads(response.partition(b"\r\n\r\n")[2])
    assert response.startswith(b"HTTP/1.1 404") and "/café" in body["error"]["message"], body


GEVENT_ACCEPT_SCRIPT = """
from gevent import monkey
monkey.patch_all()
import socket
import gevent
from pytest_llmsim.server.listener import ConnectionServer

def app(environ, start_response):
    start_response("200 OK", [("Content-Length", "2")])
    return [b"ok"]

server = ConnectionServer("127.0.0.1", 0, app)
assert server.cooperative
clients = [socket.create_connection(server.server_address[:2], timeout=5) for _ in range(3)]
for sock in clients:
    sock.sendall(b"GET / HTTP/1.1\\r\\nHost: x\\r\\nConnection: close\\r\\n\\r\\n")
spawned, turns = [], []
spawn = server._spawn
server._spawn = lambda *args: (spawned.append(1), spawn(*args))
gevent.spawn(server.serve_forever, 0.05)
gevent.spawn(lambda: turns.append(len(spawned)))  # its turn comes once the accept loop first waits

def answer(sock):
    try:
        return sock.recv(65536)[:17]
    except OSError:
        return b""

answers = [answer(sock) for sock in clients]
print(turns[0], answers == [b"HTTP/1.1 200 OK\\r\\n"] * 3)
server.shutdown()
server.server_close()
"""


def test_under_gevent_the_accept_loop_takes_a_burst_without_waiting_for_a_turn() -> None:
    """Under gevent (``llmsim serve --io loop``) a burst of waiting connections is accepted in one turn of
    the accept loop, each greenlet started without waiting for its first turn: a pooled
    ``Thread.start()`` waited up to 0.4 s each with the hub busy writing 1,024 streams, and a burst's
    last connections waited 8 s to be read."""
    pytest.importorskip("gevent")
    done = subprocess.run([sys.executable, "-c", GEVENT_ACCEPT_SCRIPT], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["3", "True"]
