"""One small request must not crash or freeze the backend (the defects found by hostile probing).

The dangerous requests run against ``llmsim serve`` in its own process, in both ``--io``
modes, so a crash fails the test (the process is gone) instead of killing pytest. Each
request is followed by an innocent one, which must be answered at once.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from serve_process import Served

from pytest_llmsim import LLMBackend

CHAT = "/v1/chat/completions"


def chat(**extra: Any) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5, **extra}


def schema_format(schema: dict[str, Any]) -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}


def one_tool(parameters: dict[str, Any]) -> dict[str, Any]:
    return {"tools": [{"type": "function", "function": {"name": "f", "parameters": parameters}}],
            "tool_choice": "required"}


# "gevent" is another name for "loop" (one server): test_cli checks the name serves.
@pytest.fixture(scope="module", params=["threads", "loop"])
def served(request: pytest.FixtureRequest) -> Iterator[Served]:
    server = Served(request.param)
    yield server
    server.stop()


def expect_error(response: httpx.Response, status: int, code: str, param: str | None = None) -> dict[str, Any]:
    assert response.status_code == status, response.text[:500]
    error: dict[str, Any] = response.json()["error"]
    assert error["code"] == code
    if param is not None:
        assert error["param"] == param
    return error


# --- 1 and 4: schema instances are bounded by the output budget before anything is built ---


@pytest.mark.parametrize("schema, keyword", [
    ({"type": "string", "minLength": 1_000_000_000}, "minLength 1,000,000,000"),
    ({"type": "array", "minItems": 1_000_000_000}, "minItems 1,000,000,000"),
    ({"type": "object", "minProperties": 1_000_000_000}, "minProperties 1,000,000,000"),
    ({"type": "object", "properties": {"a": {"type": "array", "minItems": 1_000_000}}, "required": ["a"]},
     "/properties/a: minItems 1,000,000"),
])
def test_a_huge_schema_minimum_is_a_400_naming_the_schema_path(served: Served, schema: dict[str, Any],
                                                               keyword: str) -> None:
    error = expect_error(served.post(CHAT, chat(response_format=schema_format(schema))), 400, "invalid_schema",
                         "response_format")
    assert keyword in error["message"] and "max_tokens=5" in error["message"]
    served.assert_alive()


def _ref_tree(levels: int) -> dict[str, Any]:
    """A 2^levels-leaf instance from a schema of a few hundred bytes."""
    defs: dict[str, Any] = {f"d{i}": {"type": "array", "minItems": 2,
                                      "prefixItems": [{"$ref": f"#/$defs/d{i + 1}"}] * 2} for i in range(levels)}
    defs[f"d{levels}"] = {"type": "integer"}
    return {"$defs": defs, "$ref": "#/$defs/d0"}


def _all_of_tree(levels: int) -> dict[str, Any]:
    defs: dict[str, Any] = {f"a{i}": {"allOf": [{"$ref": f"#/$defs/a{i + 1}"}] * 2} for i in range(levels)}
    defs[f"a{levels}"] = {"type": "string"}
    return {"$defs": defs, "$ref": "#/$defs/a0"}


@pytest.mark.parametrize("schema, max_tokens, words", [
    (_ref_tree(22), None, "more than 100,000 steps"), (_all_of_tree(28), None, "more than 100,000 steps"),
    (_ref_tree(22), 100, "does not fit the output budget of 3,456 characters")])
def test_an_exponential_schema_stops_at_its_bound(served: Served, schema: dict[str, Any], max_tokens: int | None,
                                                  words: str) -> None:
    started = time.monotonic()
    response = served.post(CHAT, chat(max_tokens=max_tokens, **one_tool(schema)))
    error = expect_error(response, 400, "invalid_schema", "tools")
    assert words in error["message"] and "tool 'f'" in error["message"]
    assert time.monotonic() - started < 10  # unbounded, it took 6-40 s and 1.6 GB
    served.assert_alive()


# --- 2: a long whitespace run cannot crash tiktoken ---


@pytest.mark.parametrize("path, body", [
    ("/tokenize", {"model": "m", "prompt": " " * 1_000_000 + "x"}),
    (CHAT, chat(messages=[{"role": "user", "content": "\t" * 1_000_000 + "x"}])),
    ("/v1/completions", {"model": "m", "prompt": "a" + "\u3000" * 1_000_000 + "b", "max_tokens": 2}),
])
def test_a_million_spaces_are_tokenized(served: Served, path: str, body: dict[str, Any]) -> None:
    response = served.post(path, body)
    if response.status_code == 400:  # counted, and longer than the context: an answer, not a crash
        expect_error(response, 400, "context_length_exceeded")
    else:
        assert response.status_code == 200, response.text[:300]
    served.assert_alive()


# --- 3: client regexes run in linear time, or are refused ---


def test_a_catastrophic_pattern_does_not_freeze_anyone(served: Served) -> None:
    parameters = {"type": "object", "properties": {"a": {"type": "string", "pattern": "(x+x+)+y", "minLength": 34}},
                  "required": ["a"]}
    innocent: list[float] = []

    def innocent_client() -> None:
        started = time.monotonic()
        served.post(CHAT, chat(), timeout=30)
        innocent.append(time.monotonic() - started)

    other = threading.Thread(target=innocent_client)
    started = time.monotonic()
    other.start()
    response = served.post(CHAT, chat(**one_tool(parameters)), timeout=30)
    other.join()
    assert response.status_code == 200, response.text
    assert time.monotonic() - started < 5 and innocent[0] < 5  # backtracking: no answer in 40 s
    served.assert_alive()


def test_a_pattern_without_a_linear_time_match_is_refused_naming_it(served: Served) -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string", "pattern": "^(?=x)x+$"}}}
    error = expect_error(served.post(CHAT, chat(response_format=schema_format(schema))), 400, "invalid_schema")
    assert "/properties/a/pattern" in error["message"] and "linear-time" in error["message"]


def test_a_catastrophic_rule_or_fault_pattern_runs_in_linear_time(llm_backend: LLMBackend) -> None:
    llm_backend.on(prompt=r"^(a+)+$").reply("matched")
    llm_backend.add_fault("server_error", prompt=r"^(b+)+$")
    started = time.monotonic()
    client = httpx.Client(base_url=llm_backend.root_url, timeout=10)
    with client:
        for text in ("a" * 40 + "!", "b" * 40 + "!"):
            reply = client.post(CHAT, json=chat(messages=[{"role": "user", "content": text}]))
            assert reply.status_code == 200 and reply.json()["choices"][0]["message"]["content"] != "matched"
        assert client.post(CHAT, json=chat(messages=[{"role": "user", "content": "a" * 40}])).json()[
            "choices"][0]["message"]["content"] == "matched"
    assert time.monotonic() - started < 5  # Python's re: 2^40 steps


def test_a_lookaround_in_a_rule_or_fault_is_refused() -> None:
    backend = LLMBackend()
    with pytest.raises(ValueError, match="linear-time"):
        backend.on(prompt=r"(?=a)a").reply("x")
    from pytest_llmsim import FaultError

    with pytest.raises(FaultError, match="linear-time"):
        backend.add_fault("server_error", prompt=r"(a)\1")


# --- 5: the logprob fan-out and the answer's size are bounded before any work ---


def test_the_logprob_fan_out_counts_against_max_request_tokens(served: Served) -> None:
    started = time.monotonic()
    error = expect_error(served.post(CHAT, chat(n=16, max_tokens=32000, logprobs=True, top_logprobs=20)), 400,
                         "request_too_large", "max_tokens")
    assert "top_logprobs=20" in error["message"] and time.monotonic() - started < 5  # refused before any work: ms
    served.assert_alive()


def test_a_non_streamed_answer_over_max_response_bytes_is_refused(llm_backend: LLMBackend) -> None:
    llm_backend.configure(max_response_bytes=100_000)
    response = httpx.post(llm_backend.url_for(CHAT), json=chat(max_tokens=2000, logprobs=True, top_logprobs=1))
    error = expect_error(response, 400, "response_too_large", "max_tokens")
    assert "max_response_bytes" in error["message"]
    streamed = httpx.post(llm_backend.url_for(CHAT), json=chat(max_tokens=2000, logprobs=True, top_logprobs=1,
                                                               stream=True))
    assert streamed.status_code == 200 and streamed.text.rstrip().endswith("data: [DONE]")
    assert httpx.post(llm_backend.url_for(CHAT), json=chat(max_tokens=200)).status_code == 200


# --- 13: a request that can never fit is a 400, not a 503 forever ---


def test_the_api_maximum_of_inputs_is_served_on_an_idle_default_backend(llm_backend: LLMBackend) -> None:
    response = httpx.post(llm_backend.url_for("/v1/embeddings"), json={"model": "m", "input": ["x"] * 2048},
                          timeout=30)
    assert response.status_code == 200 and len(response.json()["data"]) == 2048


def test_a_request_larger_than_batch_and_queue_is_a_400(llm_backend: LLMBackend) -> None:
    llm_backend.configure(max_batch_size=4, max_waiting=4)
    response = httpx.post(llm_backend.url_for("/v1/completions"), json={"model": "m", "prompt": ["x"] * 9})
    error = expect_error(response, 400, "request_too_large", "prompt")
    assert "max_batch_size=4 + max_waiting=4" in error["message"]
    response = httpx.post(llm_backend.url_for("/v1/completions"), json={"model": "m", "prompt": "x", "n": 9})
    expect_error(response, 400, "request_too_large", "n")
    response = httpx.post(llm_backend.url_for("/v1/completions"), json={"model": "m", "prompt": ["x"] * 8})
    assert response.status_code == 200


# --- 7: a request body has a deadline, as its head does ---


def _slow_body(url: str, path: str) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=10)
    sock.sendall(f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                 f"Content-Length: 500\r\n\r\n{{".encode())
    return sock


@pytest.mark.parametrize("path", [CHAT, "/llmsim/v1/faults"])
def test_a_body_that_stops_arriving_is_answered_408_at_the_deadline(served: Served, path: str) -> None:
    assert httpx.patch(served.url + "/llmsim/v1/config", json={"keepalive_timeout": 0.5}).status_code == 200
    try:
        stalled = [_slow_body(served.url, path) for _ in range(50)]
        served.assert_alive()  # 50 stalled bodies hold no one up
        started = time.monotonic()
        answers = []
        for sock in stalled:
            with sock:
                data = b""
                while chunk := sock.recv(65536):
                    data += chunk
                answers.append(data)
        assert time.monotonic() - started < 5  # never answered before
        for answer in answers:
            assert answer.startswith(b"HTTP/1.1 408 ") and b"Connection: close" in answer
            assert b'"request_timeout"' in answer
        served.assert_alive()
    finally:
        httpx.patch(served.url + "/llmsim/v1/config", json={"keepalive_timeout": 5.0})


# --- 6: a web page cannot drive the control API ---


@pytest.mark.parametrize("content_type, body", [
    ("text/plain", '{"kind": "server_error"}'),  # what a no-cors fetch sends
    ("application/x-www-form-urlencoded", "kind=server_error"),  # what an HTML form sends
    ("multipart/form-data; boundary=x", "--x--"),
    (None, ""),  # fetch(url, {method: "POST", mode: "no-cors"})
])
def test_a_cross_site_post_changes_nothing(llm_backend: LLMBackend, content_type: str | None, body: str) -> None:
    headers = {"Content-Type": content_type} if content_type else {}
    for route in ("faults", "reset", "replies"):
        response = httpx.post(llm_backend.root_url + "/llmsim/v1/" + route, content=body, headers=headers)
        expect_error(response, 415, "unsupported_media_type")
    response = httpx.patch(llm_backend.root_url + "/llmsim/v1/config", content='{"model": "evil"}',
                           headers=headers)
    expect_error(response, 415, "unsupported_media_type")
    assert llm_backend.faults == [] and llm_backend.config.model != "evil"


def test_a_foreign_origin_or_host_is_refused(llm_backend: LLMBackend) -> None:
    control = llm_backend.root_url + "/llmsim/v1/"
    response = httpx.post(control + "faults", json={"kind": "server_error"}, headers={"Origin": "https://evil.example"})
    expect_error(response, 403, "forbidden_origin")
    expect_error(httpx.get(control + "requests", headers={"Origin": "null"}), 403, "forbidden_origin")
    # DNS rebinding: the attacker's name resolves to 127.0.0.1, the page is then same-origin
    for host in ("attacker.example", f"attacker.example:{llm_backend.port}"):
        expect_error(httpx.get(control + "requests", headers={"Host": host}), 403, "forbidden_host")
    assert llm_backend.faults == []
    for host in ("localhost", f"127.0.0.1:{llm_backend.port}", "[::1]:1", "LOCALHOST:80"):
        assert httpx.get(control + "config", headers={"Host": host}).status_code == 200
    origin = {"Origin": f"http://localhost:{llm_backend.port}"}
    assert httpx.post(control + "faults", json={"kind": "server_error"}, headers=origin).status_code == 201
    # the API routes themselves stay open to any client and host name (a gateway's upstream name)
    assert httpx.post(llm_backend.url_for(CHAT), json=chat(), headers={"Host": "upstream.internal"}).status_code == 500


def test_allowed_hosts_are_answered() -> None:
    with LLMBackend(allowed_hosts=["llmsim.test"]) as backend:
        control = backend.root_url + "/llmsim/v1/config"
        assert httpx.get(control, headers={"Host": "llmsim.test:8000"}).status_code == 200
        assert httpx.get(control, headers={"Host": "other.test"}).status_code == 403


def test_serving_the_control_api_beyond_loopback_needs_a_token_or_a_word(capsys: pytest.CaptureFixture[str]) -> None:
    from pytest_llmsim.cli import main

    with pytest.raises(SystemExit) as caught:
        main(["serve", "--host", "0.0.0.0", "--port", "0"])
    assert caught.value.code == 2
    err = capsys.readouterr().err
    assert "--control-token" in err and "--allow-remote-control" in err


# --- 8: credentials leave the process fingerprinted ---


def test_credentials_are_fingerprinted_on_the_control_api(llm_backend: LLMBackend) -> None:
    from pytest_llmsim import RemoteBackend, key_fingerprint

    key = "sk-test-0123456789abcd"
    secrets = {"Authorization": f"Bearer {key}", "X-Api-Key": "anthropic-key-5678", "Api-Key": "azure-key-9999",
               "Cookie": "session=s3cr3t-cookie-value"}
    assert httpx.post(llm_backend.url_for(CHAT), json=chat(), headers=secrets).status_code == 200
    assert llm_backend.requests[0].headers["Authorization"] == f"Bearer {key}"  # in process: as sent
    text = httpx.get(llm_backend.root_url + "/llmsim/v1/requests").text
    for value in secrets.values():
        assert value not in text and value.split(" ")[-1] not in text
    (remote_record,) = RemoteBackend(llm_backend.base_url).requests
    authorization = remote_record.headers["Authorization"]
    assert authorization == key_fingerprint(f"Bearer {key}") and authorization.endswith(key_fingerprint(key))
    assert authorization.startswith("Bearer …abcd (sha256:") and len(authorization) == len("Bearer …abcd (sha256:)") + 8
    assert remote_record.headers["X-Api-Key"] == key_fingerprint("anthropic-key-5678")
    assert key_fingerprint("short") == f"… (sha256:{__import__('hashlib').sha256(b'short').hexdigest()[:8]})"


# --- 9: over HTTP, profiles by preset name only ---


@pytest.mark.parametrize("profile", ["/etc/hostname.toml", "../../../../tmp/x", "a" * 300, "nonexistent"])
def test_the_control_api_reads_no_file_as_a_profile(llm_backend: LLMBackend, tmp_path: Any, profile: str) -> None:
    control = llm_backend.root_url + "/llmsim/v1/"
    for method, route, body in (("PATCH", "config", {"profile": profile}),
                                ("POST", "reset", {"settings": {"profile": profile}})):
        response = httpx.request(method, control + route, json=body)
        error = expect_error(response, 400, "invalid_value")
        assert "preset name only" in error["message"] and "qwen2.5-0.5b-l4" in error["message"]
    assert httpx.patch(control + "config", json={"profile": "qwen2.5-0.5b-l4"}).json()["profile"] == "qwen2.5-0.5b-l4"


def test_a_profile_file_with_an_unknown_key_is_a_config_error(tmp_path: Any) -> None:
    from pytest_llmsim import ConfigError, SimConfig

    path = tmp_path / "p.toml"
    path.write_text('secret_key = "hunter2"\n')
    with pytest.raises(ConfigError, match="unknown setting"):
        SimConfig().replace(profile=str(path))
    with pytest.raises(ConfigError, match="unknown profile"):
        SimConfig().replace(profile="../" * 5 + "etc/passwd")


class PanicException(BaseException):
    """Stands for pyo3's panic type (a BaseException: ``except Exception`` misses it)."""


def test_a_tokenizer_panic_is_logged_and_answered_400(llm_backend: LLMBackend, monkeypatch: pytest.MonkeyPatch,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    import tiktoken

    original = tiktoken.Encoding.encode_ordinary

    def panicking(self: tiktoken.Encoding, text: str) -> list[int]:
        if "boom" in text:
            raise PanicException("called `Result::unwrap()` on an `Err` value: RuntimeError(StackOverflow)")
        return original(self, text)

    monkeypatch.setattr(tiktoken.Encoding, "encode_ordinary", panicking)
    body = chat(messages=[{"role": "user", "content": "boom, a text never seen before"}])
    error = expect_error(httpx.post(llm_backend.url_for(CHAT), json=body), 400, "invalid_text", "messages")
    assert "StackOverflow" in error["message"]
    assert "tiktoken failed on a text of 30 characters" in caplog.text
    assert httpx.post(llm_backend.url_for(CHAT), json=chat()).status_code == 200
    expect_error(httpx.post(llm_backend.url_for("/tokenize"), json={"model": "m", "prompt": "boom"}), 400,
                 "invalid_text")


# --- the second defects issue, item 24: under gevent, a client that never pauses starves no one ---


def test_a_connection_that_never_pauses_lets_others_have_turns(served: Served) -> None:
    """300 requests pipelined on one kept-alive connection (a closed-loop client that sends its next
    request at once), then one more on a second connection: the second is served among the first few,
    not after all 300 (a greenlet ran until it would block, and it never did: 2 s socket timeouts
    under wrk -c64). Under threads the GIL's switching decides, and a loaded machine may let the busy
    connection's thread run ahead of the accept loop: the guarantee, and the test, are gevent's and the
    event-loop core's."""
    if served.io == "threads":
        pytest.skip("a greenlet's fairness: under threads the GIL's switch interval decides")
    assert httpx.post(served.url + "/llmsim/v1/reset", json={}).status_code == 200
    host, port = served.url.removeprefix("http://").split(":")
    body = json.dumps(chat(max_tokens=1)).encode()
    one = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
           b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    other_body = json.dumps(chat(max_tokens=1, model="the-other")).encode()
    other = one.replace(body, other_body).replace(b"%d" % len(body), b"%d" % len(other_body), 1)
    with socket.create_connection((host, int(port)), timeout=30) as busy, \
            socket.create_connection((host, int(port)), timeout=30) as patient:
        busy.sendall(one * 300)
        patient.sendall(other)
        assert patient.recv(65536).startswith(b"HTTP/1.1 200")
        answered = 0
        data = b""
        while answered < 300:
            data += busy.recv(1 << 20)
            answered = data.count(b"HTTP/1.1 200")
    assert httpx.post(served.url + "/llmsim/v1/wait-idle", json={"timeout": 5}).json()["idle"]
    records = httpx.get(served.url + "/llmsim/v1/requests").json()["records"]
    position = [record["model"] for record in records].index("the-other")
    assert position < 100, position  # served after all 300 before


def _dechunk(data: bytes) -> bytes:
    """An HTTP/1.1 chunked body's payload; AssertionError at the first frame that is not a chunk."""
    out, position = [], 0
    while True:
        line_end = data.index(b"\r\n", position)
        size_text = data[position:line_end]
        assert size_text and all(c in b"0123456789abcdef" for c in size_text), \
            f"not a chunk size at byte {position}: {data[position:position + 40]!r}"
        size = int(size_text, 16)
        if size == 0:
            return b"".join(out)
        out.append(data[line_end + 2:line_end + 2 + size])
        position = line_end + 2 + size + 2


def test_a_stream_a_client_reads_slowly_stays_well_framed() -> None:
    """When the socket's buffers fill under a slow reader, the engine's writer sends part of a chunk and leaves
    the rest to the handler, which sent that rest framed as a chunk of its own: the chunked stream broke at
    that point (found 2026-12-06, a gateway with backpressure reads exactly so)."""
    tokens = 20_000
    with LLMBackend(itl=0.00002, speed=1, max_model_len=tokens + 1000, natural_answer_cap=tokens) as backend:
        backend.reply_with("x " * tokens)
        host, port = backend.base_url.split("//")[1].split("/")[0].split(":")
        body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True,
                           "max_tokens": tokens})
        with socket.socket() as client:
            client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a small window: the server's sends stall
            client.connect((host, int(port)))
            client.sendall(f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json"
                           f"\r\nContent-Length: {len(body)}\r\n\r\n{body}".encode())
            time.sleep(1.5)  # the server writes on into full buffers
            client.settimeout(60)
            received = b""
            while not received.endswith(b"0\r\n\r\n"):
                part = client.recv(1 << 20)
                assert part, "the server closed the stream"
                received += part
        payload = _dechunk(received.partition(b"\r\n\r\n")[2])
        events = [event for event in payload.split(b"\n\n") if event]
        assert events[-1] == b"data: [DONE]" and len(events) == tokens + 3  # role, tokens, finish, [DONE]
