"""HTTPS (``tls = true``): a certificate made on first use, trusted through ``ca_file``, on the same port."""

from __future__ import annotations

import os
import socket
import ssl
import time
from collections.abc import Iterator

import anthropic
import httpx
import openai
import pytest

from pytest_llmsim import LLMBackend, RemoteBackend

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}


@pytest.fixture()
def backend() -> Iterator[LLMBackend]:
    with LLMBackend(speed=200, tls=True) as served:
        yield served


def _trusting(backend: LLMBackend) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=backend.ca_file)


def test_the_official_sdks_are_served_over_https(backend: LLMBackend) -> None:
    assert backend.base_url.startswith("https://127.0.0.1:")
    with httpx.Client(verify=_trusting(backend)) as http:
        client = openai.OpenAI(base_url=backend.base_url, api_key="k", http_client=http)
        answer = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}],
                                                max_tokens=8)
        assert answer.usage is not None and answer.usage.completion_tokens == 8
        events = list(client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}],
                                                     max_tokens=300, stream=True))
        assert sum(1 for event in events if event.choices and event.choices[0].delta.content) == 300
    # anthropic's SDK runs on its own HTTP package (httpx2): its client takes the same trust
    with anthropic.DefaultHttpxClient(verify=_trusting(backend)) as claude_http:
        claude = anthropic.Anthropic(base_url=backend.root_url, api_key="k", http_client=claude_http)
        message = claude.messages.create(model="claude-sonnet-5-5", max_tokens=6,
                                         messages=[{"role": "user", "content": "hi"}])
        assert message.usage.output_tokens == 6
    records = backend.requests
    assert [record.status for record in records] == [200, 200, 200]
    assert records[1].completion_tokens == 300 and not records[1].cancelled


def test_the_certificate_is_checked_for_real(backend: LLMBackend) -> None:
    with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
        httpx.get(backend.url_for("/health"))  # the system's trust store does not know this authority
    context = _trusting(backend)
    raw = socket.create_connection((backend.host, backend.port))
    with context.wrap_socket(raw, server_hostname="localhost") as tls:  # a name the certificate carries
        assert tls.version() in ("TLSv1.2", "TLSv1.3")
        assert tls.selected_alpn_protocol() in (None, "http/1.1")


def test_plain_http_is_refused_in_the_apis_shape_while_tls_is_on(backend: LLMBackend) -> None:
    plain = backend.root_url.replace("https://", "http://")
    answer = httpx.post(plain + "/v1/chat/completions", json=CHAT)
    assert answer.status_code == 400
    assert answer.json()["error"]["code"] == "plain_http_to_https_port"
    assert "https://" in answer.json()["error"]["message"]
    claude = httpx.post(plain + "/v1/messages", json=CHAT)
    assert claude.status_code == 400 and claude.json()["type"] == "error"
    assert httpx.get(plain + "/llmsim/v1/config").json()["tls"] is True  # the control API answers either way
    backend.configure(tls=False)
    assert backend.base_url.startswith("http://")
    assert httpx.post(backend.base_url + "/chat/completions", json=CHAT).status_code == 200


def test_keep_alive_and_a_client_hanging_up_mid_stream_over_tls(backend: LLMBackend) -> None:
    backend.configure(speed=20, itl=0.01)
    with httpx.Client(verify=_trusting(backend)) as http:
        for _ in range(3):  # one connection, three requests
            assert http.post(backend.base_url + "/chat/completions", json=CHAT).status_code == 200
        body = dict(CHAT, max_tokens=2000, stream=True)
        with http.stream("POST", backend.base_url + "/chat/completions", json=body) as stream:
            for line in stream.iter_lines():
                if line.startswith("data: {") and '"content":"' in line:
                    break  # a token came: hang up with the rest still coming
    backend.wait_idle(timeout=10)
    record = backend.requests[-1]
    assert record.cancelled and record.status == 499
    assert record.completion_tokens < 2000


def test_stop_cuts_idle_and_half_open_tls_connections(backend: LLMBackend) -> None:
    context = _trusting(backend)
    idle = context.wrap_socket(socket.create_connection((backend.host, backend.port)), server_hostname="127.0.0.1")
    silent = socket.create_connection((backend.host, backend.port))  # sends nothing: not even a ClientHello
    silent.sendall(b"\x16")  # a handshake's first byte, and no more
    started = time.monotonic()
    backend.stop()
    assert time.monotonic() - started < 3  # stop's bound is 1 s; it waited for the silent client before
    for connection in (idle, silent):
        connection.settimeout(3)
        try:
            assert connection.recv(1) == b""  # closed by the server
        except ConnectionResetError:
            pass  # or reset: closed with bytes of the client's it never read
        connection.close()


def test_a_remote_handle_follows_the_setting() -> None:
    with LLMBackend(speed=200) as served:
        remote = RemoteBackend(served.root_url)
        assert remote.base_url.startswith("http://")
        remote.configure(tls=True)
        assert remote.base_url == served.base_url and remote.base_url.startswith("https://")
        assert remote.ca_file == served.ca_file
        with httpx.Client(verify=ssl.create_default_context(cafile=remote.ca_file)) as http:
            assert http.post(remote.base_url + "/chat/completions", json=CHAT).status_code == 200
        remote.reset()
        assert remote.base_url.startswith("http://")


@pytest.mark.llm_config(tls=True)
def test_a_marker_turns_https_on_for_one_test(llm_backend: LLMBackend) -> None:
    assert llm_backend.base_url.startswith("https://")
    with httpx.Client(verify=ssl.create_default_context(cafile=llm_backend.ca_file)) as http:
        assert http.post(llm_backend.base_url + "/chat/completions", json=CHAT).status_code == 200


def test_a_gateway_that_takes_only_https_upstreams(backend: LLMBackend, monkeypatch: pytest.MonkeyPatch) -> None:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    litellm = pytest.importorskip("litellm", reason="LiteLLM is in the integrations extra")

    monkeypatch.setattr(litellm, "ssl_verify", backend.ca_file)  # LiteLLM's own setting for a private CA
    answer = litellm.completion(model="openai/m", api_base=backend.base_url, api_key="k", max_tokens=5,
                                messages=[{"role": "user", "content": "hi"}])
    assert answer.usage.completion_tokens == 5
    assert backend.requests[-1].status == 200
