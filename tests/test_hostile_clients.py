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
from polling import wait_for
from serve_process import Served

from pytest_llmsim import RemoteBackend

# A TLS record header announcing a 512-byte handshake message: the server waits for the rest.
_HANDSHAKE_START = b"\x16\x03\x01\x02\x00"


@pytest.fixture(scope="module", params=["threads", "loop"])  # "gevent" is another name for "loop": one server
def served(request: pytest.FixtureRequest) -> Iterator[Served]:
    """One server per mode for the module (the suite's time), its deadline short: 0.5 s."""
    server = Served(request.param, "--keepalive-timeout", "0.5")
    yield server
    assert "Traceback" not in server.stop()  # no case may print one (a half-closed client, an idle close)


@pytest.fixture
def tls_served(served: Served) -> Iterator[Served]:
    """The module's server with HTTPS on (the port answers plain HTTP too: the control API)."""
    remote = RemoteBackend(served.url)
    remote.configure(tls=True)
    yield served
    remote.reset()


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
        # A byte every 0.2 s: every read comes within keepalive_timeout (0.5 s), the handshake never ends.
        while not closed and time.monotonic() - started < 15:
            try:
                sock.sendall(b"\0")
            except OSError:
                closed = True
                break
            closed = _closed_by_server(sock)
        assert closed, "the server kept a handshake that never ends"
        assert time.monotonic() - started < 10  # 0.5 s, with room for a machine ten times slower


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
    remote.configure(keepalive_timeout=30)  # the drips stay while the threads are counted
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


# --- malformed heads, half-closed clients, idle closes (items 12-16) ---

def _exchange(served: Served, raw: bytes) -> bytes:
    """Send ``raw`` on a new connection; everything the server sends until it closes (at most 10 s)."""
    with socket.create_connection(("127.0.0.1", served.port)) as sock:
        sock.settimeout(10)
        sock.sendall(raw)
        received = b""
        try:
            while chunk := sock.recv(65536):
                received += chunk
        except TimeoutError:
            received += b"<still open>"
        except ConnectionResetError:
            pass
        return received


def _logged(served: Served) -> int:
    return int(httpx.get(served.url + "/llmsim/v1/requests").json()["total"])


CHAT_BODY = b'{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":2}'


@pytest.mark.parametrize("raw", [
    b"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n",
    b"GET http://127.0.0.1:99999/health HTTP/1.1\r\nHost: x\r\n\r\n",
    b"GET http:///health HTTP/1.1\r\nHost: x\r\n\r\n",
    b"GET http://[::1/health HTTP/1.1\r\nHost: x\r\n\r\n",
    b"G\x01ET /health HTTP/1.1\r\nHost: x\r\n\r\n",
    *(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" + length +
      b"\r\n\r\n" + CHAT_BODY
      for length in (b"Content-Length: 72, 72", b"Content-Length: +72", b"Content-Length: 72x",
                     b"Content-Length: 72\r\nContent-Length: 73")),
], ids=["connect", "port-99999", "empty-host", "unclosed-bracket", "control-in-method", "length-list",
        "length-plus", "length-suffix", "two-lengths"])
def test_a_malformed_head_is_a_400_that_closes_and_is_not_logged(served: Served, raw: bytes) -> None:
    logged = _logged(served)
    answer = _exchange(served, raw)
    assert answer.startswith(b"HTTP/1.1 400 "), answer[:200]
    assert answer.endswith(b"}") and b"<still open>" not in answer  # answered, then closed
    assert _logged(served) == logged
    served.assert_alive()


def test_a_half_closed_client_is_sent_nothing(served: Served) -> None:
    remote = RemoteBackend(served.url)
    remote.configure(ttft=300.0, speed=10.0, keepalive_timeout=30)  # the hang-up is seen first, the head in time
    try:
        streamed = CHAT_BODY.replace(b'"max_tokens":2', b'"max_tokens":2,"stream":true')
        for body in (CHAT_BODY, streamed):
            raw = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                   b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
            with socket.create_connection(("127.0.0.1", served.port)) as sock:
                sock.settimeout(20)
                sock.sendall(raw)
                sock.shutdown(socket.SHUT_WR)  # half-closed: the server takes it as gone
                try:
                    received = sock.recv(65536)
                except ConnectionResetError:
                    received = b""
            if body is CHAT_BODY:
                assert received == b"", received[:200]
            else:  # a stream's headers go out at admission, which may come before the client's FIN does
                assert b" 499 " not in received and not received.endswith(b"0\r\n\r\n"), received[:300]
        # Logged when each handler ends, which may be after the client saw the connection close
        statuses = wait_for(lambda: [record["status"] for record in
                                     httpx.get(served.url + "/llmsim/v1/requests").json()["records"][-2:]],
                            lambda last: last == [499, 499])
        assert statuses == [499, 499]
    finally:
        remote.reset()


def test_an_idle_connection_closed_by_its_deadline_prints_nothing(served: Served) -> None:
    kept = socket.create_connection(("127.0.0.1", served.port))
    partial = socket.create_connection(("127.0.0.1", served.port))
    with kept, partial:
        kept.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        kept.settimeout(10)
        assert kept.recv(100).startswith(b"HTTP/1.1 200")
        partial.sendall(b"GET /health HTTP/1.1\r\nHo")  # a head that stops: cut by the deadline (0.5 s)
        partial.settimeout(10)
        for sock in (kept, partial):
            try:
                while sock.recv(65536):
                    pass
            except OSError:
                pass
    # the module's teardown checks stderr for a traceback


# --- multipart uploads (issue 58's transcription and image edits read them on generation routes) ---

def _multipart(boundary: bytes = b"llmsimboundary") -> bytes:
    wav = (b"RIFF" + (36 + 32000).to_bytes(4, "little") + b"WAVEfmt " + (16).to_bytes(4, "little")
           + b"\x01\x00\x01\x00" + (16000).to_bytes(4, "little") + (32000).to_bytes(4, "little") + b"\x02\x00\x10\x00"
           + b"data" + (32000).to_bytes(4, "little") + b"\x00" * 32000)
    return (b"--" + boundary + b'\r\nContent-Disposition: form-data; name="model"\r\n\r\nwhisper-1\r\n--' + boundary
            + b'\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\nContent-Type: audio/wav\r\n\r\n'
            + wav + b"\r\n--" + boundary + b"--\r\n")


def _upload_head(length: int, boundary: bytes = b"llmsimboundary") -> bytes:
    return (b"POST /v1/audio/transcriptions HTTP/1.1\r\nHost: x\r\nContent-Type: multipart/form-data; boundary="
            + boundary + b"\r\nContent-Length: %d\r\n\r\n" % length)


def test_a_multipart_upload_that_drips_stops_or_lies_leaves_the_server_serving(served: Served) -> None:
    body = _multipart()
    # stops mid-body: a 408 at the body's deadline (0.5 s here), the connection closed
    answer = _exchange(served, _upload_head(len(body)) + body[:len(body) // 2])
    assert answer.startswith(b"HTTP/1.1 408 ") and b"<still open>" not in answer, answer[:200]
    # hangs up mid-body: nothing to answer, nothing printed (the module's teardown checks for a traceback)
    with socket.create_connection(("127.0.0.1", served.port)) as sock:
        sock.sendall(_upload_head(len(body)) + body[:1000])
    # a body whose parts do not end as its boundary says: a 400 in OpenAI's shape, the connection still usable
    broken = body.replace(b"--llmsimboundary--", b"--somethingelse--")
    refused = httpx.post(served.url + "/v1/audio/transcriptions", content=broken,
                         headers={"Content-Type": "multipart/form-data; boundary=llmsimboundary"})
    assert refused.status_code == 400 and refused.json()["error"]["message"], refused.text[:200]
    whole = httpx.post(served.url + "/v1/audio/transcriptions", content=body,
                       headers={"Content-Type": "multipart/form-data; boundary=llmsimboundary"})
    assert whole.status_code == 200 and whole.json()["text"]
    served.assert_alive()
