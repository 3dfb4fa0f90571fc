"""Hostile and careless clients: no request takes the backend down, every hang-up is
counted at once, every shutdown is prompt, every bad input is a clean 4xx.

Wall-clock bounds here are several times what the benchmark (``benchmarks/abuse.py``)
measures, so a busy machine does not fail them; the broken behaviour they guard
against was ten times slower or worse.
"""

from __future__ import annotations

import gc
import io
import json
import socket
import threading
import time
import tracemalloc
from typing import Any

import httpx
import pytest
from werkzeug.datastructures import Headers
from werkzeug.exceptions import BadRequest, RequestEntityTooLarge

from pytest_llmsim import LLMBackend, SimConfig
from pytest_llmsim.api.openai_completions import parse_completion
from pytest_llmsim.content.model import MODEL_CONTENT
from pytest_llmsim.server.request_body import _read_sized_body
from pytest_llmsim.server.trusted_headers import TrustedHeaders
from pytest_llmsim.sim import SimError
from pytest_llmsim.sim.request_log import RequestLog, RequestRecord
from pytest_llmsim.sim.simulator import Simulator

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"


def chat_body(content: str = "hi", max_tokens: int = 4, **extra: Any) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": content}], "max_tokens": max_tokens,
            **extra}


def connect(backend: LLMBackend) -> socket.socket:
    return socket.create_connection((backend.host, backend.port), timeout=10)


def post_raw(sock: socket.socket, path: str, body: dict[str, Any]) -> None:
    data = json.dumps(body).encode()
    sock.sendall(b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: %d\r\n\r\n%s" % (path.encode(), len(data), data))


def read_all(sock: socket.socket) -> bytes:
    chunks = []
    while chunk := sock.recv(65536):
        chunks.append(chunk)
    return b"".join(chunks)


def wait_for(condition: Any, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


# --- a small request must not cost unbounded work or memory ---


def test_amplifying_request_is_refused_by_the_work_cap(llm_backend: LLMBackend) -> None:
    started = time.monotonic()
    response = httpx.post(llm_backend.url_for(COMPLETIONS),
                          json={"model": "m", "prompt": ["a"] * 50, "n": 16, "max_tokens": 32000})
    assert time.monotonic() - started < 2  # refused by arithmetic, in ms; generating would take minutes
    assert response.status_code == 400
    error = response.json()["error"]
    assert (error["code"], error["param"], error["type"]) == (
        "request_too_large", "max_tokens", "invalid_request_error")
    assert "25,600,050 tokens" in error["message"] and "max_request_tokens" in error["message"]
    assert llm_backend.in_flight == 0


def test_work_cap_is_a_setting_and_counts_prompt_tokens(llm_backend: LLMBackend) -> None:
    llm_backend.configure(max_request_tokens=100)
    too_long = httpx.post(llm_backend.url_for(COMPLETIONS), json={"model": "m", "prompt": "word " * 150})
    assert too_long.status_code == 400 and too_long.json()["error"]["param"] == "prompt"
    ok = httpx.post(llm_backend.url_for(COMPLETIONS), json={"model": "m", "prompt": "hi", "max_tokens": 90})
    assert ok.status_code == 200


def test_prompts_per_request_are_capped_before_tokenizing(llm_backend: LLMBackend) -> None:
    started = time.monotonic()
    response = httpx.post(llm_backend.url_for(COMPLETIONS), json={"model": "m", "prompt": [[1]] * 1_000_000},
                          timeout=30)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "array_above_max_length"
    assert time.monotonic() - started < 10  # parsing 8 MB of JSON; tokenizing a million prompts: minutes


def test_a_long_answer_is_never_materialised() -> None:
    """n=16 x 32,000 tokens: the plan is lazy views, the gaps one run per choice."""
    simulator = Simulator(SimConfig(speed=float("inf"), max_batch_size=64, natural_answer_cap=0), MODEL_CONTENT)
    try:
        request = parse_completion({"model": "m", "prompt": "hi", "n": 16, "max_tokens": 32_000})
        tracemalloc.start()
        generation = simulator.start(request)
        generation.feed.wait()
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        assert generation.completion_tokens == 16 * 32_000
        assert peak < 2_000_000  # bytes; materialised, it was over 30 MB
        output = generation.outputs[0]
        assert "".join(output.pieces[31_990:32_000]) == output.text[-len("".join(output.pieces[31_990:])):]
        simulator.runtime.release(generation.feed)
    finally:
        simulator.stop()


def test_queue_is_checked_before_outputs_are_planned(monkeypatch: pytest.MonkeyPatch) -> None:
    simulator = Simulator(SimConfig(max_batch_size=1, max_waiting=0, ttft=100.0, speed=1.0), MODEL_CONTENT)
    try:
        first = simulator.start(parse_completion({"model": "m", "prompt": "hi"}))

        def no_planning(*args: Any) -> Any:
            raise AssertionError("outputs were planned for a request the queue cannot take")

        monkeypatch.setattr(simulator.planner, "plan", no_planning)
        with pytest.raises(SimError) as caught:
            simulator.start(parse_completion({"model": "m", "prompt": "hi"}))
        assert (caught.value.status, caught.value.code) == (503, "queue_full")
        simulator.cancel(first)
    finally:
        simulator.stop()


def test_a_huge_stream_that_is_not_read_stalls_no_one(llm_backend: LLMBackend) -> None:
    """Half a million tokens due at once for a client that never reads: other clients
    are served at once, and the server's memory for it stays bounded."""
    llm_backend.configure(speed=float("inf"), natural_answer_cap=0)  # answers run to max_tokens
    hog = connect(llm_backend)
    hog.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    post_raw(hog, CHAT, chat_body("go", 32_000, n=16, stream=True))
    try:
        time.sleep(0.2)
        started = time.monotonic()
        for _ in range(5):
            response = httpx.post(llm_backend.url_for(CHAT), json=chat_body(), timeout=10)
            assert response.status_code == 200
        assert time.monotonic() - started < 3  # it took 4 s per request before
    finally:
        hog.close()
    assert llm_backend.wait_idle(timeout=5)
    hogged = [r for r in llm_backend.requests if r.stream]
    assert hogged[0].status == 499 and hogged[0].cancelled
    assert hogged[0].completion_tokens < hogged[0].generated_tokens


# --- what is kept stays bounded ---


def test_internal_errors_are_kept_bounded_and_without_their_bodies(llm_backend: LLMBackend,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("simulated bug")

    monkeypatch.setattr(llm_backend._simulator, "start", broken)
    big = "x" * 200_000
    for _ in range(20):
        response = httpx.post(llm_backend.url_for(CHAT), json=chat_body(big))
        assert response.status_code == 500
        assert response.json()["error"]["code"] == "internal_error"
    server = llm_backend.httpserver
    assert server.internal_error_count == 20 and len(server.handler_errors) == 8
    for error in server.handler_errors:
        tb = error.__traceback__
        while tb is not None:
            assert not any(isinstance(v, str) and len(v) >= 200_000 for v in tb.tb_frame.f_locals.values())
            tb = tb.tb_next
    with pytest.raises(RuntimeError, match="simulated bug"):
        llm_backend.check()
    llm_backend.reset()  # the test's own teardown would raise it again


def test_a_logged_body_is_no_object_graph_for_the_collector_until_read(llm_backend: LLMBackend) -> None:
    """An agent's request (20 tools) logged as parsed JSON held about 128 tracked objects: a log of 10,000 of
    them made each full collection stop the process for about 300 ms. The log keeps the body as the bytes
    received and parses it when it is first read, to the same value."""
    tools = [{"type": "function", "function": {"name": f"tool_{i}", "description": "Look something up.",
                                               "parameters": {"type": "object", "properties": {
                                                   "query": {"type": "string"}, "limit": {"type": "integer"},
                                                   "tags": {"type": "array", "items": {"type": "string"}}},
                                                   "required": ["query"]}}} for i in range(20)]
    sent = {**chat_body("Which tool?"), "tools": tools, "metadata": {"big": 12345678901234567890123}}
    assert httpx.post(llm_backend.url_for(CHAT), json=sent).status_code == 200
    record = llm_backend.requests[-1]
    held = [item for item in gc.get_referents(record) if gc.is_tracked(item)]
    assert len(held) <= 4, held  # its class, the headers, the finish reasons, the ignored fields
    assert record.body == sent  # parsed as it was read (an integer past 64 bits exact) ...
    assert record.body is record.body  # ... once
    record.body = {"replaced": True}
    assert record.body == {"replaced": True}
    assert RequestRecord("GET", "/", Headers(), body={"given": 1}).body == {"given": 1}


def test_request_log_is_capped_by_bytes_with_truncated_bodies(llm_backend: LLMBackend) -> None:
    llm_backend.configure(max_log_bytes=20_000, max_log_body_bytes=1_000)
    content = "y" * 5_000
    for _ in range(30):
        assert httpx.post(llm_backend.url_for(CHAT), json=chat_body(content)).status_code == 200
    records = llm_backend.requests
    assert 1 < len(records) < 30
    assert sum(r.size_bytes for r in records) <= 20_000
    last = records[-1]
    assert last.body_truncated and last.body_bytes > 5_000
    assert isinstance(last.body, str) and last.body.endswith(f"[truncated by pytest-llmsim: {last.body_bytes} "
                                                             "bytes in all]")
    assert llm_backend.metrics.requests_total == 30  # the counters keep counting


def test_request_log_keeps_the_newest_record_whatever_its_size() -> None:
    log = RequestLog(max_entries=10, max_bytes=100)
    for _ in range(3):
        record = RequestRecord("POST", "/v1/x", {"H": "v" * 500})
        log.append(record)
    assert len(log) == 1 and log.dropped == 2


def test_request_log_adds_no_object_of_its_own_per_record() -> None:
    """The log keeps each record's size apart from it: a (record, size) pair per entry was one more
    object for the garbage collector to scan at every collection while the record is kept (a test
    session's full collections came sooner for it), and the bounds still hold."""
    records = [RequestRecord("POST", "/v1/x", {"H": "v"}) for _ in range(200)]
    log = RequestLog(max_entries=150)
    gc.collect()
    before = len(gc.get_objects())
    for record in records:
        log.append(record)
    gc.collect()
    assert len(gc.get_objects()) - before < 10
    assert len(log) == 150 and log.dropped == 50 and log.snapshot() == records[50:]
    assert log.total_bytes == sum(record.size_bytes for record in records[50:])


@pytest.mark.parametrize("headers", [Headers([("X-Key", "abc"), ("X-Key", "second"), ("Host", "h:1")]),
                                     TrustedHeaders([("X-Key", "abc"), ("X-Key", "second"), ("Host", "h:1")])])
def test_a_records_size_counts_its_body_and_every_header_as_received(headers: Headers) -> None:
    record = RequestRecord("POST", "/v1/x", headers)
    record.keep_body({"a": 1}, b'{"a":1}', 1000)
    assert record.size_bytes == len(b'{"a":1}') + len("X-Key" "abc" "X-Key" "second" "Host" "h:1")


def test_client_chosen_paths_never_become_metric_labels(llm_backend: LLMBackend) -> None:
    with httpx.Client() as client:
        for i in range(30):
            assert client.get(llm_backend.url_for(f"/v1/made-up-{i}")).status_code == 404
            assert client.get(llm_backend.url_for(f"/v1/models/other-{i}")).status_code == 404
    text = llm_backend.prometheus_text()
    endpoints = {line.split('endpoint="')[1].split('"')[0] for line in text.splitlines()
                 if line.startswith("llmsim:requests_total")}
    assert endpoints == {"unknown", "/v1/models/{id}"}
    assert llm_backend.requests[-1].route == "/v1/models/{id}"


# --- shutdown and connections ---


def test_stop_is_prompt_whatever_the_clients_do() -> None:
    backend = LLMBackend(speed=1.0, itl=0.01).start()
    idle = connect(backend)
    partial = connect(backend)
    partial.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Le")
    reader = connect(backend)
    reader.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    post_raw(reader, CHAT, chat_body("go", 20_000, stream=True))
    time.sleep(0.3)
    started = time.monotonic()
    backend.stop()
    elapsed = time.monotonic() - started
    for sock in (idle, partial, reader):
        sock.close()
    assert elapsed < 3  # 10 s per stuck connection before; the target is 1 s
    assert not backend.is_running


def test_idle_and_slow_header_connections_are_closed_after_the_timeout(llm_backend: LLMBackend) -> None:
    llm_backend.configure(keepalive_timeout=0.3)
    idle = connect(llm_backend)
    slow = connect(llm_backend)
    started = time.monotonic()
    slow.sendall(b"GET /health HTTP/1.1\r\n")
    for _ in range(3):  # a byte every 0.15 s: never idle for the timeout, but never done
        time.sleep(0.15)
        try:
            slow.sendall(b"X")
        except OSError:
            break
    assert read_all(idle) == b"" and time.monotonic() - started < 3  # after keepalive_timeout (0.3 s); never, before
    assert read_all(slow) == b""
    idle.close()
    slow.close()
    assert httpx.get(llm_backend.url_for("/health")).status_code == 200


def test_a_port_in_use_is_a_clear_oserror() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(OSError, match=f"cannot listen on 127.0.0.1:{port}"):
            LLMBackend(port=port).start()


@pytest.mark.parametrize(("host", "port"), [("127.0.0.1", 70000), ("127.0.0.1", -1), ("", 0), ("  ", 0)])
def test_bad_listen_addresses_are_refused(host: str, port: int) -> None:
    with pytest.raises(ValueError, match=r"port must be|host must be"):
        LLMBackend(host=host, port=port)


def test_a_stopped_backend_starts_again_on_the_same_port() -> None:
    backend = LLMBackend().start()
    try:
        port = backend.port
        assert httpx.post(backend.url_for(CHAT), json=chat_body()).status_code == 200
        backend.stop()
        with pytest.raises(httpx.ConnectError):
            httpx.get(backend.url_for("/health"))
        backend.start()
        assert backend.port == port
        assert httpx.get(backend.url_for("/health")).status_code == 200
        assert httpx.post(backend.url_for(CHAT), json=chat_body()).status_code == 200
        assert backend.metrics.requests_by_status == {200: 2}
    finally:
        backend.stop()


def test_no_thread_for_a_connection_answers_503_and_recovers(monkeypatch: pytest.MonkeyPatch) -> None:
    backend = LLMBackend().start()
    original = threading.Thread.start

    def refuse_workers(self: threading.Thread) -> None:
        if self.name.startswith("llmsim-http-worker"):
            raise RuntimeError("can't start new thread")
        original(self)

    try:
        monkeypatch.setattr(threading.Thread, "start", refuse_workers)
        response = httpx.get(backend.url_for("/health"))
        assert response.status_code == 503 and response.json()["error"]["code"] == "service_unavailable"
        monkeypatch.undo()
        assert httpx.get(backend.url_for("/health")).status_code == 200
    finally:
        backend.stop()  # no "cannot join thread before it is started"


def test_idle_handler_threads_retire() -> None:
    backend = LLMBackend(ttft=0.3, speed=1.0, max_batch_size=64).start()
    try:
        backend.httpserver.worker_idle_seconds = 0.2
        with httpx.Client(limits=httpx.Limits(max_connections=40)) as client:
            threads = [threading.Thread(target=client.post, args=(backend.url_for(CHAT),),
                                        kwargs={"json": chat_body()}) for _ in range(40)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        assert backend.httpserver.worker_count >= 30
        assert wait_for(lambda: backend.httpserver.worker_count <= 5, timeout=5)
        assert httpx.post(backend.url_for(CHAT), json=chat_body()).status_code == 200
    finally:
        backend.stop()


# --- hang-ups are counted, at once, in any phase ---


@pytest.mark.parametrize("phase", ["long-ttft", "fast-tokens", "queued", "stall"])
def test_a_client_that_gives_up_frees_its_slot_at_once(llm_backend: LLMBackend, phase: str) -> None:
    settings: dict[str, Any] = {"speed": 1.0, "max_batch_size": 1}
    body = chat_body("hi", 4)
    if phase == "long-ttft":
        settings["ttft"] = 10.0
    elif phase == "fast-tokens":  # a token every 10 ms: the hang-up check must not wait for a pause
        settings["itl"] = 0.01
        body = chat_body("hi", 5_000)
    elif phase == "stall":
        llm_backend.add_fault("stall", seconds=30)
    llm_backend.configure(**settings)
    blocker = None
    if phase == "queued":
        llm_backend.configure(ttft=10.0)
        blocker = connect(llm_backend)
        post_raw(blocker, CHAT, chat_body())
        assert wait_for(lambda: llm_backend.running == 1)
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(llm_backend.url_for(CHAT), json=body, timeout=0.3)
    gone_at = time.monotonic()
    expected_left = 1 if blocker is not None else 0
    assert wait_for(lambda: len([r for r in llm_backend.requests if r.cancelled]) == 1, timeout=5)
    assert time.monotonic() - gone_at < 1.0  # the target is 50 ms; it was 1.5 to 9 s
    record = next(r for r in llm_backend.requests if r.cancelled)
    assert record.status == 499 and record.completion_tokens == 0
    assert llm_backend.in_flight == expected_left
    if blocker is not None:
        blocker.close()
    assert llm_backend.wait_idle(timeout=5)


def test_unread_n16_streams_are_counted_as_hang_ups(llm_backend: LLMBackend) -> None:
    llm_backend.configure(speed=float("inf"), natural_answer_cap=0)  # answers run to max_tokens
    socks = []
    for _ in range(4):
        sock = connect(llm_backend)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        post_raw(sock, CHAT, chat_body("go", 3_000, n=16, stream=True))
        socks.append(sock)
    time.sleep(0.3)
    for sock in socks:
        sock.close()
    assert llm_backend.wait_idle(timeout=5)
    assert llm_backend.metrics.cancelled == 4
    assert llm_backend.metrics.requests_by_status == {499: 4}
    for record in llm_backend.requests:
        assert record.cancelled and record.finish_reasons == [None] * 16
        assert record.completion_tokens < record.generated_tokens == 16 * 3_000


def test_completion_tokens_are_what_the_client_received(llm_backend: LLMBackend) -> None:
    llm_backend.configure(itl=0.01, speed=1.0)
    received = 0
    with httpx.stream("POST", llm_backend.url_for(CHAT), json=chat_body("go", 2_000, stream=True)) as r:
        for line in r.iter_lines():
            if '"content":"' in line and '"content":""' not in line:
                received += 1
            if received == 10:
                break
    assert llm_backend.wait_idle(timeout=5)
    (record,) = llm_backend.requests
    assert record.status == 499 and 10 <= record.completion_tokens <= record.generated_tokens
    metrics = llm_backend.metrics
    assert (metrics.completion_tokens, metrics.generated_tokens) == (record.completion_tokens,
                                                                     record.generated_tokens)
    text = llm_backend.prometheus_text()
    assert f'vllm:generation_tokens_total{{engine="0",model_name="llmsim"}} {float(record.generated_tokens)}' in text


# --- no 500 for bad input ---


def _post_bytes(backend: LLMBackend, path: str, data: bytes) -> httpx.Response:
    return httpx.post(backend.url_for(path), content=data, headers={"Content-Type": "application/json"})


@pytest.mark.parametrize(("name", "data"), [
    ("nested-2000", b"[" * 2000 + b"]" * 2000),
    ("nested-object-field", b'{"model": "m", "messages": [{"role": "user", "content": "x"}], "temperature": '
     + b"[" * 900 + b"]" * 900 + b"}"),
    ("deep-tools", b'{"model": "m", "messages": [{"role": "user", "content": "x"}], "tools": [{"type": '
     b'"function", "function": {"name": "f", "parameters": ' + b'{"a":' * 500 + b"1" + b"}" * 500 + b"}}]}"),
])
def test_deeply_nested_json_is_a_400(llm_backend: LLMBackend, name: str, data: bytes) -> None:
    response = _post_bytes(llm_backend, CHAT, data)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["type"] == "invalid_request_error"
    llm_backend.check()


@pytest.mark.parametrize("token", [100256, 100261, 100275, 100277])
def test_unassigned_token_ids_are_a_400(llm_backend: LLMBackend, token: int) -> None:
    response = httpx.post(llm_backend.url_for(COMPLETIONS), json={"model": "m", "prompt": [1, token]})
    assert response.status_code == 400
    error = response.json()["error"]
    assert (error["param"], error["code"]) == ("prompt", "invalid_value") and str(token) in error["message"]
    llm_backend.check()


def test_a_malformed_chunked_body_is_a_400(llm_backend: LLMBackend) -> None:
    sock = connect(llm_backend)
    sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Transfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n")
    response = read_all(sock)
    sock.close()
    assert response.startswith(b"HTTP/1.1 400 "), response[:200]
    assert json.loads(response.partition(b"\r\n\r\n")[2])["error"]["code"] == "invalid_body"
    llm_backend.check()


def test_a_chunked_body_over_the_limit_is_a_413(llm_backend: LLMBackend) -> None:
    """A chunked body has no length to refuse up front; past ``max_body_bytes`` it is a 413 all the same
    (werkzeug cut it at the limit, and the truncated JSON was answered as invalid)."""
    llm_backend.configure(max_body_bytes=1000)
    data = json.dumps(chat_body("y" * 5000)).encode()
    sock = connect(llm_backend)
    sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n%x\r\n%s\r\n0\r\n\r\n"
                 % (len(data), data))
    response = read_all(sock)
    sock.close()
    assert response.startswith(b"HTTP/1.1 413 "), response[:200]
    assert json.loads(response.partition(b"\r\n\r\n")[2])["error"]["code"] == "request_too_large"
    small = json.dumps(chat_body("fits")).encode()
    sock = connect(llm_backend)
    sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n%x\r\n%s\r\n0\r\n\r\n"
                 % (len(small), small))
    assert read_all(sock).startswith(b"HTTP/1.1 200 ")
    sock.close()
    llm_backend.check()


def test_a_chunked_body_and_a_body_sent_in_pieces_are_read_whole(llm_backend: LLMBackend) -> None:
    """A chunked body goes through werkzeug's stream, a sized one is read straight from the input:
    both give the whole JSON, even when it arrives in several packets."""
    data = json.dumps(chat_body("pieces of a body", model="chunked-m")).encode()
    sock = connect(llm_backend)
    sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n")
    for piece in (data[:10], data[10:]):
        sock.sendall(b"%x\r\n%s\r\n" % (len(piece), piece))
    sock.sendall(b"0\r\n\r\n")
    chunked = read_all(sock)
    sock.close()
    sock = connect(llm_backend)
    sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(data), data[:7]))
    time.sleep(0.05)  # the handler is already reading: the rest comes in a later packet
    sock.sendall(data[7:])
    sized = read_all(sock)
    sock.close()
    for response in (chunked, sized):
        assert response.startswith(b"HTTP/1.1 200 "), response[:200]
    assert [r.body["model"] for r in llm_backend.requests] == ["chunked-m", "chunked-m"]
    assert [r.body_bytes for r in llm_backend.requests] == [len(data), len(data)]
    llm_backend.check()


class _Trickle(io.RawIOBase):
    """A raw input stream that hands out at most three bytes per read, as a raw socket may."""

    def __init__(self, data: bytes) -> None:
        self._data = data

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        piece, self._data = self._data[:min(3, len(buffer))], self._data[min(3, len(buffer)):]
        buffer[:len(piece)] = piece
        return len(piece)


def test_a_sized_body_is_read_whole_from_a_stream_that_returns_less() -> None:
    """Other WSGI servers' inputs may return part of a read: the body is still read whole, and one that
    ends before its Content-Length is a 400 (werkzeug's BadRequest, which the route turns into invalid_body)."""
    data = b'{"model": "m", "messages": []}'
    environ = {"CONTENT_LENGTH": str(len(data)), "wsgi.input": _Trickle(data)}
    assert _read_sized_body(environ, 1 << 20) == data
    with pytest.raises(BadRequest):
        _read_sized_body({"CONTENT_LENGTH": "100", "wsgi.input": _Trickle(data)}, 1 << 20)
    with pytest.raises(RequestEntityTooLarge):
        _read_sized_body({"CONTENT_LENGTH": "100", "wsgi.input": _Trickle(data)}, 99)
    assert _read_sized_body({"wsgi.input": _Trickle(data)}, 1 << 20) is None  # no length: werkzeug's stream


def test_a_short_body_then_half_close_is_no_500(llm_backend: LLMBackend) -> None:
    sock = connect(llm_backend)
    sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: 500\r\n\r\n{\"model\": ")
    sock.shutdown(socket.SHUT_WR)
    response = read_all(sock)
    sock.close()
    assert not response.startswith(b"HTTP/1.1 500")
    assert wait_for(lambda: len(llm_backend.requests) == 1)
    assert llm_backend.requests[0].status == 400
    llm_backend.check()  # nothing that would turn the test into an ERROR at teardown


# --- the spec, field by field ---


def test_spec_allows_an_empty_model_and_a_null_prompt(llm_backend: LLMBackend) -> None:
    chat = httpx.post(llm_backend.url_for(CHAT), json={**chat_body(), "model": ""})
    assert chat.status_code == 200 and chat.json()["model"] == ""
    completion = httpx.post(llm_backend.url_for(COMPLETIONS), json={"model": "m", "prompt": None, "max_tokens": 3})
    assert completion.status_code == 200
    assert completion.json()["usage"]["prompt_tokens"] == 1  # <|endoftext|>, one token
    scored = httpx.post(llm_backend.url_for(COMPLETIONS),
                        json={"model": "m", "prompt": "score me", "max_tokens": 0, "echo": True})
    assert scored.status_code == 200
    assert scored.json()["choices"][0]["text"] == "score me"
    assert scored.json()["usage"]["completion_tokens"] == 0


# --- portability: no MSG_DONTWAIT (Windows) ---


def test_without_msg_dontwait_waits_hang_ups_and_streams_still_work(llm_backend: LLMBackend,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Windows has no MSG_DONTWAIT; emulated here by removing the constant."""
    monkeypatch.delattr(socket, "MSG_DONTWAIT")
    llm_backend.configure(ttft=0.3, itl=0.001, speed=1.0)
    waited = httpx.post(llm_backend.url_for(CHAT), json=chat_body("hi", 3), timeout=10)
    assert waited.status_code == 200  # it waited past several 50 ms hang-up checks
    with httpx.stream("POST", llm_backend.url_for(CHAT), json=chat_body("hi", 20, stream=True)) as response:
        events = [line for line in response.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "data: [DONE]" and len(events) == 20 + 3
    llm_backend.configure(ttft=10.0)
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(llm_backend.url_for(CHAT), json=chat_body(), timeout=0.3)
    assert wait_for(lambda: any(r.status == 499 for r in llm_backend.requests), timeout=3)
    llm_backend.check()


def test_an_engine_defect_ends_requests_instead_of_stranding_them(llm_backend: LLMBackend,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The engine raising (a bug) must not leave handlers waiting for ever: the requests in flight end,
    the server keeps serving, and check() raises the error at the test's end."""
    llm_backend.configure(ttft=0.2, itl=0.01, speed=20)
    from pytest_llmsim.sim.engine import Engine

    real_step = Engine._step
    calls = {"n": 0}

    def broken_step(self: Engine, seq: Any) -> None:
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("simulated engine defect")
        real_step(self, seq)

    monkeypatch.setattr(Engine, "_step", broken_step)
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}
    first = httpx.post(llm_backend.url_for("/v1/chat/completions"), json=body, timeout=10)
    assert first.status_code == 200  # answered (cut short), not stranded
    second = httpx.post(llm_backend.url_for("/v1/chat/completions"), json=body, timeout=10)
    assert second.status_code == 200 and second.json()["usage"]["completion_tokens"] == 3
    with pytest.raises(RuntimeError, match="simulated engine defect"):
        llm_backend.check()


@pytest.mark.parametrize("content_type", ["application/json", "text/plain; charset=utf-8"])
@pytest.mark.parametrize("headers", [None, {}, {"x-request-id": "req_1", "Retry-After": "3"},
                                     {"Content-Type": "text/plain"}, {"content-length": "99", "Allow": "POST"}])
def test_a_complete_answer_is_the_response_werkzeug_would_build(headers: dict[str, str] | None,
                                                                content_type: str) -> None:
    """A complete answer (JSON, /health's empty text) builds its headers itself (werkzeug's general path cost
    ~4 % of a request): the same headers in the same order, status and body as werkzeug's ``Response``; a
    value werkzeug refuses is refused."""
    from werkzeug.wrappers import Response

    from pytest_llmsim.server.responses import CompleteResponse
    ours = CompleteResponse(b'{"a":1}', 429, headers, content_type)
    theirs = Response(b'{"a":1}', status=429, headers=headers, content_type=content_type)
    assert ours.headers.to_wsgi_list() == theirs.headers.to_wsgi_list()
    assert (ours.status, ours.status_code, ours.get_data()) == (theirs.status, theirs.status_code, theirs.get_data())
    with pytest.raises(ValueError, match="newline"):
        CompleteResponse(b"{}", 400, {"X-Echo": "a\r\nSet-Cookie: x=1"})


@pytest.mark.parametrize("key", ["X-Request-Id", "x-request-id", "X-REQUEST-ID", "Content-Length",
                                 "X-Llmsim-Fault", "Missing", ""])
def test_received_headers_answer_as_werkzeugs_headers(key: str) -> None:
    """The request headers the server builds answer get/in/[] as werkzeug's ``Headers`` would
    (their own ``get`` skips werkzeug's raise-and-catch for a missing name)."""
    pairs = [("X-Request-Id", "abc"), ("Content-Length", "12"), ("X-Request-Id", "second")]
    ours, theirs = TrustedHeaders(list(pairs)), Headers(pairs)
    assert ours.get(key) == theirs.get(key)
    assert ours.get(key, "fallback") == theirs.get(key, "fallback")
    assert ours.get(key, -1, type=int) == theirs.get(key, -1, type=int)
    assert (key in ours) == (key in theirs)
    assert ours.getlist(key) == theirs.getlist(key)
