"""Bad input gets an OpenAI-shaped error, and the server keeps serving."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest

from pytest_llmsim import LLMBackend

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
GOOD_CHAT: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}

CASES: list[tuple[str, str, Any, int, str | None, str | None]] = [
    # (id, path, body, status, param, code)
    ("not-json", CHAT, b"{not json", 400, None, "invalid_json"),
    ("body-not-object", CHAT, [1, 2], 400, None, "invalid_type"),
    ("missing-messages", CHAT, {"model": "m"}, 400, "messages", "missing_required_parameter"),
    ("messages-not-array", CHAT, {"model": "m", "messages": "hi"}, 400, "messages", "invalid_type"),
    ("messages-empty", CHAT, {"model": "m", "messages": []}, 400, "messages", "empty_array"),
    ("bad-role", CHAT, {"model": "m", "messages": [{"role": "wizard", "content": "x"}]}, 400,
     "messages[0].role", "invalid_value"),
    ("content-wrong-type", CHAT, {"model": "m", "messages": [{"role": "user", "content": 5}]}, 400,
     "messages[0].content", "invalid_type"),
    ("image-part", CHAT, {"model": "m", "messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "data:,"}}]}]}, 400,
     "messages[0].content[0].type", "unsupported_value"),
    ("missing-model", CHAT, {"messages": [{"role": "user", "content": "x"}]}, 400, "model",
     "missing_required_parameter"),
    ("max-tokens-zero", CHAT, {**GOOD_CHAT, "max_tokens": 0}, 400, "max_tokens", "integer_below_min_value"),
    ("max-tokens-negative", CHAT, {**GOOD_CHAT, "max_completion_tokens": -5}, 400,
     "max_completion_tokens", "integer_below_min_value"),
    ("max-tokens-string", CHAT, {**GOOD_CHAT, "max_tokens": "10"}, 400, "max_tokens", "invalid_type"),
    ("temperature-high", CHAT, {**GOOD_CHAT, "temperature": 3.5}, 400, "temperature",
     "decimal_out_of_range"),
    ("n-zero", CHAT, {**GOOD_CHAT, "n": 0}, 400, "n", "integer_out_of_range"),
    ("stop-too-many", CHAT, {**GOOD_CHAT, "stop": ["a", "b", "c", "d", "e"]}, 400, "stop", "invalid_type"),
    ("stream-options-without-stream", CHAT, {**GOOD_CHAT, "stream_options": {"include_usage": True}},
     400, "stream_options", "invalid_value"),
    ("top-logprobs-without-logprobs", CHAT, {**GOOD_CHAT, "top_logprobs": 3}, 400, "top_logprobs",
     "invalid_value"),
    ("top-logprobs-too-many", CHAT, {**GOOD_CHAT, "logprobs": True, "top_logprobs": 21}, 400, "top_logprobs",
     "integer_out_of_range"),
    ("completion-logprobs-too-many", COMPLETIONS, {"model": "m", "prompt": "hi", "logprobs": 6}, 400, "logprobs",
     "integer_out_of_range"),
    ("tool-choice-without-tools", CHAT, {**GOOD_CHAT, "tool_choice": "required"}, 400, "tool_choice",
     "invalid_value"),
    ("tool-choice-unknown-function", CHAT, {**GOOD_CHAT, "tool_choice": {"type": "function", "function": {
        "name": "g"}}, "tools": [{"type": "function", "function": {"name": "f"}}]}, 400, "tool_choice",
     "invalid_value"),
    ("tool-not-a-function", CHAT, {**GOOD_CHAT, "tools": [{"type": "web_search"}]}, 400, "tools[0].type",
     "unsupported_value"),
    ("tool-without-function", CHAT, {**GOOD_CHAT, "tools": [{"type": "function"}]}, 400, "tools[0].function",
     "invalid_value"),
    ("tool-bad-name", CHAT, {**GOOD_CHAT, "tools": [{"type": "function", "function": {"name": "no spaces"}}]},
     400, "tools[0].function.name", "invalid_value"),
    ("tool-malformed-schema", CHAT, {**GOOD_CHAT, "tools": [{"type": "function", "function": {
        "name": "f", "parameters": {"type": "objekt"}}}]}, 400, "tools[0].function.parameters", "invalid_schema"),
    ("tool-schema-not-object", CHAT, {**GOOD_CHAT, "tools": [{"type": "function", "function": {
        "name": "f", "parameters": [1]}}]}, 400, "tools[0].function.parameters", "invalid_schema"),
    ("tool-schema-unsatisfiable", CHAT, {**GOOD_CHAT, "tool_choice": "required", "tools": [
        {"type": "function", "function": {"name": "f", "parameters": {
            "type": "object", "properties": {"n": {"type": "integer", "minimum": 5, "maximum": 1}},
            "required": ["n"]}}}]}, 400, "tools", "invalid_schema"),
    ("response-format-unknown", CHAT, {**GOOD_CHAT, "response_format": {"type": "xml"}}, 400, "response_format",
     "invalid_value"),
    ("response-format-no-schema", CHAT, {**GOOD_CHAT, "response_format": {"type": "json_schema", "json_schema": {
        "name": "x"}}}, 400, "response_format.json_schema.schema", "missing_required_parameter"),
    ("response-format-bad-schema", CHAT, {**GOOD_CHAT, "response_format": {"type": "json_schema", "json_schema": {
        "name": "x", "schema": {"type": 5}}}}, 400, "response_format.json_schema.schema", "invalid_schema"),
    ("missing-prompt", COMPLETIONS, {"model": "m"}, 400, "prompt", "missing_required_parameter"),
    ("prompt-empty-list", COMPLETIONS, {"model": "m", "prompt": []}, 400, "prompt", "invalid_type"),
    ("prompt-bad-token-id", COMPLETIONS, {"model": "m", "prompt": [1, 10_000_000]}, 400, "prompt",
     "invalid_value"),
    ("context-too-long", CHAT, {**GOOD_CHAT, "max_tokens": 40000}, 400, "messages",
     "context_length_exceeded"),
    ("completion-context-too-long", COMPLETIONS, {"model": "m", "prompt": "hi", "max_tokens": 32768}, 400,
     "prompt", "context_length_exceeded"),
]


def check_error(response: httpx.Response, status: int, param: str | None, code: str | None) -> None:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert isinstance(error["message"], str) and error["message"]
    assert error["type"] == "invalid_request_error"
    assert (error["param"], error["code"]) == (param, code)


@pytest.mark.parametrize(("path", "body", "status", "param", "code"),
                         [case[1:] for case in CASES], ids=[case[0] for case in CASES])
def test_bad_request_then_good_request(llm_backend: LLMBackend, path: str, body: Any, status: int,
                                       param: str | None, code: str | None) -> None:
    url = llm_backend.url_for(path)
    if isinstance(body, bytes):
        response = httpx.post(url, content=body, headers={"content-type": "application/json"})
    else:
        response = httpx.post(url, json=body)
    check_error(response, status, param, code)
    assert llm_backend.requests[-1].status == status
    good = httpx.post(llm_backend.url_for(CHAT), json=GOOD_CHAT)
    assert good.status_code == 200 and good.json()["choices"]
    assert llm_backend.metrics.requests_by_status == {status: 1, 200: 1}


def test_unknown_route_is_404(llm_backend: LLMBackend) -> None:
    response = httpx.post(llm_backend.url_for("/v1/engines/davinci/completions"), json={})
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "unknown_url"
    assert httpx.post(llm_backend.url_for(CHAT), json=GOOD_CHAT).status_code == 200


def test_wrong_method_is_405(llm_backend: LLMBackend) -> None:
    response = httpx.get(llm_backend.url_for(CHAT))
    assert response.status_code == 405
    assert response.headers["allow"] == "POST"
    assert response.json()["error"]["code"] == "method_not_allowed"
    assert httpx.post(llm_backend.url_for("/v1/models")).status_code == 405
    head = httpx.head(llm_backend.url_for("/v1/models"))  # HEAD is allowed wherever GET is
    assert head.status_code == 200 and head.content == b""


def test_oversized_body_is_413(llm_backend: LLMBackend) -> None:
    llm_backend.configure(max_body_bytes=1024)
    big = {**GOOD_CHAT, "messages": [{"role": "user", "content": "x" * 5000}]}
    response = httpx.post(llm_backend.url_for(CHAT), json=big)
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "request_too_large"
    assert "1024" in response.json()["error"]["message"]
    assert httpx.post(llm_backend.url_for(CHAT), json=GOOD_CHAT).status_code == 200


def test_sdk_maps_errors_to_its_exception_classes(llm_backend: LLMBackend) -> None:
    client = openai.OpenAI(base_url=llm_backend.base_url, api_key="sk", max_retries=0)
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}],
                                       max_tokens=10**6)
    assert caught.value.code == "context_length_exceeded"
    assert caught.value.param == "messages"


def test_full_waiting_queue_answers_503(llm_backend: LLMBackend) -> None:
    llm_backend.configure(max_batch_size=1, max_waiting=0, ttft=0.5, speed=10)
    with httpx.Client() as http, httpx.stream("POST", llm_backend.url_for(CHAT),
                                              json={**GOOD_CHAT, "stream": True}) as first:
        assert first.status_code == 200
        busy = http.post(llm_backend.url_for(CHAT), json=GOOD_CHAT)
        assert busy.status_code == 503
        assert busy.json()["error"]["type"] == "server_error"
        assert busy.json()["error"]["code"] == "queue_full"
        first.read()
    assert llm_backend.metrics.requests_by_status == {200: 1, 503: 1}
