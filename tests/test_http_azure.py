"""Azure OpenAI through ``openai.AzureOpenAI`` (deployments and ``api-version``) and the v1 surface."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from pytest_llmsim import GENERATION_FAULT_KINDS, LLMBackend, ToolCall

pytestmark = pytest.mark.usefixtures("loopback_only")
VERSION = "2024-10-21"
ASK: list[Any] = [{"role": "user", "content": "Say something short."}]


@pytest.fixture
def azure(llm_backend: LLMBackend) -> Iterator[openai.AzureOpenAI]:
    client = openai.AzureOpenAI(azure_endpoint=llm_backend.root_url, api_key="test-key", api_version=VERSION,
                                max_retries=0)
    yield client
    client.close()


def deployment_url(backend: LLMBackend, deployment: str = "gpt-4o", route: str = "chat/completions",
                   version: str | None = VERSION) -> str:
    query = "" if version is None else f"?api-version={version}"
    return backend.url_for(f"/openai/deployments/{deployment}/{route}{query}")


def test_chat_through_a_deployment_carries_azures_annotations(llm_backend: LLMBackend,
                                                              azure: openai.AzureOpenAI) -> None:
    llm_backend.reply_with("Hello from Azure")
    raw = azure.chat.completions.with_raw_response.create(model="gpt-4o", messages=ASK)
    answer = raw.parse()
    assert answer.choices[0].message.content == "Hello from Azure"
    extra = answer.model_extra or {}
    assert extra["prompt_filter_results"][0]["content_filter_results"]["hate"] == {"filtered": False,
                                                                                  "severity": "safe"}
    assert (answer.choices[0].model_extra or {})["content_filter_results"]["violence"]["filtered"] is False
    assert raw.headers["apim-request-id"]
    record = llm_backend.requests[-1]
    assert (record.api, record.model, record.route) == ("azure.chat", "gpt-4o",
                                                        "/openai/deployments/{deployment}/chat/completions")


def test_streams_open_with_the_prompt_filter_chunk(llm_backend: LLMBackend, azure: openai.AzureOpenAI) -> None:
    llm_backend.reply_with("one two")
    chunks = list(azure.chat.completions.create(model="gpt-4o", messages=ASK, stream=True))
    assert chunks[0].choices == [] and (chunks[0].model_extra or {})["prompt_filter_results"]
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "one two"


def test_completions_embeddings_responses_and_models(llm_backend: LLMBackend, azure: openai.AzureOpenAI) -> None:
    completion = azure.completions.create(model="gpt-35-instruct", prompt="Once", max_tokens=3)
    assert completion.usage is not None and completion.usage.completion_tokens == 3
    assert llm_backend.requests[-1].api == "azure.completions"
    vectors = azure.embeddings.create(model="text-embedding-3-small", input=["a", "b"])
    assert len(vectors.data) == 2 and llm_backend.requests[-1].api == "azure.embeddings"
    response = azure.responses.create(model="gpt-4o", input="hi", max_output_tokens=16)
    assert response.output_text and llm_backend.requests[-1].api == "azure.responses"
    assert [model.id for model in azure.models.list()] == ["llmsim"]


def test_a_tool_call_and_structured_output(llm_backend: LLMBackend, azure: openai.AzureOpenAI) -> None:
    llm_backend.reply_with(ToolCall("get_weather", {"city": "Oslo"}))
    tools: Any = [{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
    called = azure.chat.completions.create(model="gpt-4o", messages=ASK, tools=tools)
    call = (called.choices[0].message.tool_calls or [])[0]
    assert call.function.name == "get_weather" and json.loads(call.function.arguments) == {"city": "Oslo"}
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"],
              "additionalProperties": False}
    structured = azure.chat.completions.create(model="gpt-4o", messages=ASK, response_format={
        "type": "json_schema", "json_schema": {"name": "n", "schema": schema, "strict": True}})
    assert isinstance(json.loads(structured.choices[0].message.content or "")["n"], int)


def test_a_missing_or_unknown_api_version_is_resource_not_found(llm_backend: LLMBackend) -> None:
    for version in (None, "1999", "2024-13-45", "9999-99-99-preview", "2024-02-30", "1999-01-01"):
        response = httpx.post(deployment_url(llm_backend, version=version), json={"messages": ASK})
        assert response.status_code == 404
        assert response.json() == {"error": {"code": "404", "message": "Resource not found"}}
    assert httpx.post(deployment_url(llm_backend, version="2025-04-01-preview"), json={"messages": ASK}).is_success


def test_unknown_deployments_under_strict_models(llm_backend: LLMBackend, azure: openai.AzureOpenAI) -> None:
    llm_backend.configure(strict_models=True)
    with pytest.raises(openai.NotFoundError) as raised:
        azure.chat.completions.create(model="no-such-deployment", messages=ASK)
    assert raised.value.code == "DeploymentNotFound"
    assert azure.chat.completions.create(model="llmsim", messages=ASK).choices


def test_a_throttle_is_worded_as_azure_words_it_and_the_sdk_retries(llm_backend: LLMBackend) -> None:
    llm_backend.add_fault("rate_limit", times=1, retry_after=0.1)
    client = openai.AzureOpenAI(azure_endpoint=llm_backend.root_url, api_key="k", api_version=VERSION, max_retries=1)
    try:
        assert client.chat.completions.create(model="gpt-4o", messages=ASK, max_tokens=2).choices
    finally:
        client.close()
    assert [record.status for record in llm_backend.requests] == [429, 200]
    llm_backend.add_fault("rate_limit", times=1, retry_after=2)
    refused = httpx.post(deployment_url(llm_backend), json={"messages": ASK})
    assert refused.status_code == 429 and refused.json()["error"]["code"] == "429"
    assert "retry after 2 second" in refused.json()["error"]["message"]
    assert refused.headers["retry-after"] == "2" and refused.headers["retry-after-ms"] == "2000"


def test_simulated_limits_send_azures_remaining_headers(llm_backend: LLMBackend) -> None:
    llm_backend.configure(rpm=5, tpm=10_000)
    answer = httpx.post(deployment_url(llm_backend), json={"messages": ASK})
    assert answer.headers["x-ratelimit-remaining-requests"] == "4"
    assert "x-ratelimit-remaining-tokens" in answer.headers and "x-ratelimit-limit-requests" not in answer.headers


def test_the_v1_surface_needs_no_api_version(llm_backend: LLMBackend) -> None:
    client = openai.OpenAI(base_url=llm_backend.root_url + "/openai/v1/", api_key="test-key", max_retries=0)
    try:
        answer = client.chat.completions.create(model="gpt-4o", messages=ASK, max_tokens=3)
        assert answer.usage is not None and answer.usage.completion_tokens == 3
        assert llm_backend.requests[-1].api == "azure.v1.chat"
        assert client.responses.create(model="gpt-4o", input="hi", max_output_tokens=16).output_text
        assert client.embeddings.create(model="e", input="x").data
        assert [model.id for model in client.models.list()] == ["llmsim"]
    finally:
        client.close()


@pytest.mark.parametrize("kind", sorted(GENERATION_FAULT_KINDS))
def test_every_fault_kind_keeps_the_server_serving(llm_backend: LLMBackend, azure: openai.AzureOpenAI,
                                                   kind: str) -> None:
    params: dict[str, Any] = {"stall": {"seconds": 0.05}, "http_error": {"status": 418}}.get(kind, {})
    llm_backend.add_fault(kind, times=2, **params)
    for stream in (False, True):
        try:
            response = httpx.post(deployment_url(llm_backend), json={"messages": ASK, "stream": stream}, timeout=5)
            if response.status_code >= 400:
                assert response.json()["error"]["message"] and response.headers["apim-request-id"]
        except httpx.HTTPError:
            assert kind in ("drop", "drop_before_headers", "close_session", "bad_encoding")  # bad_encoding: a lie
    assert azure.chat.completions.create(model="gpt-4o", messages=ASK, max_tokens=2).choices
    assert llm_backend.wait_idle()  # a dropped stream is counted after the client sees the drop
    assert llm_backend.metrics.faults.get(kind) == 2
    llm_backend.check()


@pytest.mark.parametrize(("payload", "param"), [({"messages": "hi"}, "messages"),
                                                ({"messages": ASK, "max_tokens": "many"}, "max_tokens"),
                                                ({"messages": ASK, "n": 99}, "n")])
def test_bad_input_answers_openais_shape_on_azures_paths(llm_backend: LLMBackend, payload: Any, param: str) -> None:
    response = httpx.post(deployment_url(llm_backend), json=payload)
    assert response.status_code == 400 and response.json()["error"]["param"] == param


@pytest.mark.parametrize(("kind", "error_class"), [("rate_limit", openai.RateLimitError),
                                                   ("invalid_api_key", openai.AuthenticationError),
                                                   ("context_length", openai.BadRequestError),
                                                   ("model_not_found", openai.NotFoundError),
                                                   ("server_error", openai.InternalServerError),
                                                   ("timeout", openai.InternalServerError)])
def test_http_faults_are_the_sdks_own_errors(llm_backend: LLMBackend, azure: openai.AzureOpenAI, kind: str,
                                             error_class: type[openai.APIStatusError]) -> None:
    llm_backend.add_fault(kind, times=1)
    with pytest.raises(error_class):
        azure.chat.completions.create(model="gpt-4o", messages=ASK)


def test_a_drop_mid_stream_and_cached_tokens(llm_backend: LLMBackend, azure: openai.AzureOpenAI) -> None:
    llm_backend.add_fault("drop", after_tokens=2, times=1)
    seen: list[str] = []
    with pytest.raises(openai.APIConnectionError):
        for chunk in azure.chat.completions.create(model="gpt-4o", messages=ASK, stream=True, max_tokens=8):
            seen.extend(choice.delta.content or "" for choice in chunk.choices)
    assert len([piece for piece in seen if piece]) == 2
    llm_backend.configure(block_size=16)
    system: Any = [{"role": "system", "content": "You are a meticulous assistant. " * 40}, *ASK]
    azure.chat.completions.create(model="gpt-4o", messages=system, max_tokens=2)
    again = azure.chat.completions.create(model="gpt-4o", messages=system, max_tokens=2)
    assert again.usage is not None and again.usage.prompt_tokens_details is not None
    assert (again.usage.prompt_tokens_details.cached_tokens or 0) >= 16 * 10


def test_a_required_api_key_is_checked_in_each_apis_shape(llm_backend: LLMBackend) -> None:
    llm_backend.configure(required_api_key="sk-right")
    wrong = httpx.post(deployment_url(llm_backend), json={"messages": ASK}, headers={"api-key": "sk-wrong"})
    assert wrong.status_code == 401 and wrong.json()["error"]["code"] == "invalid_api_key"
    assert httpx.post(deployment_url(llm_backend), json={"messages": ASK}, headers={"api-key": "sk-right"}).is_success
    gemini = httpx.post(llm_backend.url_for("/v1beta/models/m:generateContent?key=sk-wrong"),
                        json={"contents": [{"parts": [{"text": "hi"}]}]})
    assert gemini.status_code == 401 and gemini.json()["error"]["status"] == "UNAUTHENTICATED"
    assert httpx.post(llm_backend.url_for("/v1/chat/completions"), json={"model": "m", "messages": ASK},
                      headers={"Authorization": "Bearer sk-right"}).is_success
