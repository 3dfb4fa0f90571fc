"""Compressed answers (the ``compression`` setting), compressed request bodies and the ``bad_encoding`` fault.

Driven by the openai SDK and httpx (which decode gzip and br as gateways' HTTP clients do) and by LiteLLM;
the stream's pieces are read raw to show each event is flushed as it is written, not held for the end.
"""

from __future__ import annotations

import gzip
import json
import os
import zlib

import httpx
import openai
import pytest

from pytest_llmsim import LLMBackend

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 6}


def _client(backend: LLMBackend) -> openai.OpenAI:
    return openai.OpenAI(base_url=backend.base_url, api_key="k", max_retries=0)


@pytest.mark.llm_config(compression="gzip")
def test_json_answers_errors_and_streams_are_gzipped_when_the_client_accepts_it(llm_backend: LLMBackend) -> None:
    raw = _client(llm_backend).chat.completions.with_raw_response.create(**CHAT)  # type: ignore[call-overload]
    assert raw.headers["content-encoding"] == "gzip" and "Accept-Encoding" in raw.headers["vary"]
    assert raw.parse().usage.completion_tokens == 6  # the SDK's httpx decoded it
    chunks = list(_client(llm_backend).chat.completions.create(**CHAT, stream=True))  # type: ignore[call-overload]
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    llm_backend.configure(api_keys=["sk-right"])
    refused = httpx.post(llm_backend.base_url + "/chat/completions", json=CHAT)
    assert refused.status_code == 401 and refused.headers["content-encoding"] == "gzip"  # error bodies too
    assert refused.json()["error"]["code"] == "invalid_api_key"
    llm_backend.configure(api_keys=[])
    for accept in ("identity", "gzip;q=0", "br"):
        plain = httpx.post(llm_backend.base_url + "/chat/completions", json=CHAT, headers={"Accept-Encoding": accept})
        assert "content-encoding" not in plain.headers and plain.json()["usage"]["completion_tokens"] == 6, accept
    assert "content-encoding" not in httpx.get(llm_backend.url_for("/health")).headers  # not JSON: as it was


@pytest.mark.llm_config(compression="gzip", speed=1.0, ttft=0.0, itl=0.3)
def test_a_gzip_stream_flushes_each_event_as_it_is_written(llm_backend: LLMBackend) -> None:
    """Every raw piece decodes on its own to whole events: none waits for the next, or for the stream's end."""
    decoder = zlib.decompressobj(16 + zlib.MAX_WBITS)
    events: list[str] = []
    with httpx.stream("POST", llm_backend.base_url + "/chat/completions", json={**CHAT, "stream": True},
                      headers={"Accept-Encoding": "gzip"}, timeout=30) as response:
        assert response.headers["content-encoding"] == "gzip"
        for piece in response.iter_raw():
            text = decoder.decompress(piece).decode()
            if text:
                assert text.endswith("\n\n"), text  # a whole event (or several), never a part of one
                events.extend(event for event in text.split("\n\n") if event)
    assert decoder.eof and events[-1] == "data: [DONE]" and len(events) >= 7


@pytest.mark.llm_config(compression="br")
def test_brotli_where_the_client_asks_for_it(llm_backend: LLMBackend) -> None:
    pytest.importorskip("brotli")
    answer = httpx.post(llm_backend.base_url + "/chat/completions", json=CHAT, headers={"Accept-Encoding": "br"})
    assert answer.headers["content-encoding"] == "br" and answer.json()["usage"]["completion_tokens"] == 6
    streamed = httpx.post(llm_backend.base_url + "/chat/completions", json={**CHAT, "stream": True},
                          headers={"Accept-Encoding": "gzip, br"})
    assert streamed.headers["content-encoding"] == "br" and streamed.text.endswith("data: [DONE]\n\n")


def test_a_request_body_in_gzip_is_decoded_within_the_body_limit(llm_backend: LLMBackend) -> None:
    url = llm_backend.base_url + "/chat/completions"
    packed = gzip.compress(json.dumps(CHAT).encode())
    answer = httpx.post(url, content=packed, headers={"Content-Type": "application/json", "Content-Encoding": "gzip"})
    assert answer.status_code == 200 and answer.json()["usage"]["completion_tokens"] == 6
    llm_backend.configure(max_body_bytes=100_000)
    bomb = gzip.compress(b'{"model": "m", "pad": "' + b"a" * 5_000_000 + b'"}')  # 5 MB in a few KB
    assert len(bomb) < 100_000
    refused = httpx.post(url, content=bomb, headers={"Content-Type": "application/json", "Content-Encoding": "gzip"})
    assert refused.status_code == 413 and "max_body_bytes" in refused.json()["error"]["message"]
    broken = httpx.post(url, content=packed[:-10], headers={"Content-Encoding": "gzip"})
    assert broken.status_code == 400 and "gzip" in broken.json()["error"]["message"]
    unknown = httpx.post(url, content=b"{}", headers={"Content-Encoding": "compress"})
    assert unknown.status_code == 415 and unknown.json()["error"]["code"] == "unsupported_content_encoding"


@pytest.mark.llm_config(compression="gzip")
@pytest.mark.parametrize("stream", [False, True])
def test_the_bad_encoding_fault_breaks_a_gateways_decoder(llm_backend: LLMBackend, stream: bool) -> None:
    body = {**CHAT, "stream": stream}
    llm_backend.add_fault("bad_encoding", mode="lie", times=1)
    with pytest.raises(httpx.DecodingError):  # says gzip, sends plain bytes
        httpx.post(llm_backend.base_url + "/chat/completions", json=body).read()
    llm_backend.add_fault("bad_encoding", mode="truncate", times=1)
    with httpx.stream("POST", llm_backend.base_url + "/chat/completions", json=body) as response:
        raw = b"".join(response.iter_raw())  # the HTTP framing is whole: only the gzip member is cut
    assert response.status_code == 200 and response.headers["content-encoding"] == "gzip"
    decoder = zlib.decompressobj(16 + zlib.MAX_WBITS)
    decoder.decompress(raw)
    assert not decoder.eof  # a decoder that does not check for the member's end passes a part on as whole
    assert httpx.post(llm_backend.base_url + "/chat/completions", json=body).status_code == 200  # then served


@pytest.mark.llm_config(compression="gzip")
def test_litellm_reads_gzipped_answers(llm_backend: LLMBackend) -> None:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    litellm = pytest.importorskip("litellm", reason="LiteLLM is in the integrations extra")
    answer = litellm.completion(model="openai/m", api_base=llm_backend.base_url, api_key="k", max_tokens=5,
                                messages=[{"role": "user", "content": "hi"}])
    assert answer.usage.completion_tokens == 5
    chunks = list(litellm.completion(model="openai/m", api_base=llm_backend.base_url, api_key="k", max_tokens=5,
                                     stream=True, messages=[{"role": "user", "content": "hi"}]))
    assert "".join(chunk.choices[0].delta.content or "" for chunk in chunks)
    assert llm_backend.requests[-1].status == 200
