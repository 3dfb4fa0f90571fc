"""Cohere's v2 chat and embed through the official ``cohere`` SDK (``ClientV2``)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import cohere
import httpx
import pytest

from pytest_llmsim import GENERATION_FAULT_KINDS, LLMBackend, ToolCall

# the cohere SDK's own models use pydantic's deprecated `__fields__`
pytestmark = [pytest.mark.usefixtures("loopback_only"),
              pytest.mark.filterwarnings("ignore:The `__fields__` attribute is deprecated:DeprecationWarning")]
ASK: Any = [{"role": "user", "content": "Say something short."}]
TOOLS: Any = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]


@pytest.fixture
def co(llm_backend: LLMBackend) -> Iterator[cohere.ClientV2]:
    client = cohere.ClientV2(api_key="test-key", base_url=llm_backend.root_url)
    yield client
    client._client_wrapper.httpx_client.httpx_client.close()


def test_chat_answers_with_cohere_usage(llm_backend: LLMBackend, co: cohere.ClientV2) -> None:
    llm_backend.reply_with("Hello from Cohere")
    answer = co.chat(model="command-a", messages=ASK)
    assert answer.finish_reason == "COMPLETE" and answer.message.content is not None
    assert answer.message.content[0].text == "Hello from Cohere"  # type: ignore[union-attr]
    record = llm_backend.requests[-1]
    assert answer.usage is not None and answer.usage.tokens is not None
    assert answer.usage.tokens.input_tokens == record.prompt_tokens
    assert answer.usage.billed_units is not None and answer.usage.billed_units.output_tokens == record.completion_tokens
    assert record.api == "cohere.chat"
    limited = co.chat(model="command-a", messages=ASK, max_tokens=3)
    assert limited.finish_reason == "MAX_TOKENS"


def test_the_stream_is_coheres_event_sequence(llm_backend: LLMBackend, co: cohere.ClientV2) -> None:
    llm_backend.reply_with("one two three")
    events = list(co.chat_stream(model="command-a", messages=ASK))
    kinds = [event.type for event in events]
    assert kinds[:2] == ["message-start", "content-start"] and kinds[-2:] == ["content-end", "message-end"]
    text = "".join(e.delta.message.content.text for e in events  # type: ignore[union-attr]
                   if e.type == "content-delta")
    assert text == "one two three"
    assert events[-1].delta.finish_reason == "COMPLETE"  # type: ignore[union-attr]


def test_a_tool_call_round_trip(llm_backend: LLMBackend, co: cohere.ClientV2) -> None:
    llm_backend.reply_with(ToolCall("get_weather", {"city": "Paris"}))
    first = co.chat(model="command-a", messages=ASK, tools=TOOLS)
    assert first.finish_reason == "TOOL_CALL" and first.message.tool_plan
    call = (first.message.tool_calls or [])[0]
    assert call.function is not None and json.loads(call.function.arguments or "") == {"city": "Paris"}
    history = [*ASK, {"role": "assistant", "tool_plan": first.message.tool_plan, "tool_calls": [call.model_dump()]},
               {"role": "tool", "tool_call_id": call.id,
                "content": [{"type": "document", "document": {"data": "21C"}}]}]
    second = co.chat(model="command-a", messages=history, tools=TOOLS)
    assert second.finish_reason == "COMPLETE"
    streamed = list(co.chat_stream(model="command-a", messages=ASK, tools=TOOLS, tool_choice="REQUIRED"))
    kinds = [event.type for event in streamed]
    assert "tool-plan-delta" in kinds and "tool-call-start" in kinds and "tool-call-end" in kinds
    arguments = "".join(e.delta.message.tool_calls.function.arguments for e in streamed  # type: ignore[union-attr]
                        if e.type == "tool-call-delta")
    assert isinstance(json.loads(arguments)["city"], str)


def test_structured_output_and_embeddings(llm_backend: LLMBackend, co: cohere.ClientV2) -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    answer = co.chat(model="command-a", messages=ASK, response_format={"type": "json_object", "json_schema": schema})
    assert isinstance(json.loads(answer.message.content[0].text)["n"], int)  # type: ignore[index, union-attr]
    vectors = co.embed(model="embed-v4.0", texts=["a", "b"], input_type="search_document",
                       embedding_types=["float", "int8", "base64"], output_dimension=32)
    assert vectors.embeddings.float_ is not None and [len(v) for v in vectors.embeddings.float_] == [32, 32]
    assert vectors.embeddings.int8 is not None and all(-128 <= x <= 127 for x in vectors.embeddings.int8[0])
    assert llm_backend.requests[-1].api == "cohere.embed"


def test_a_throttle_is_retried_and_errors_are_the_sdks(llm_backend: LLMBackend, co: cohere.ClientV2) -> None:
    llm_backend.add_fault("rate_limit", times=1, retry_after=0.05)
    assert co.chat(model="command-a", messages=ASK, max_tokens=2).finish_reason == "MAX_TOKENS"
    assert [record.status for record in llm_backend.requests] == [429, 200]
    for kind, error_class in (("rate_limit", cohere.errors.TooManyRequestsError),
                              ("invalid_api_key", cohere.errors.UnauthorizedError),
                              ("server_error", cohere.errors.InternalServerError)):
        llm_backend.add_fault(kind, times=1)
        with pytest.raises(error_class):
            co.chat(model="command-a", messages=ASK, request_options={"max_retries": 0})


def test_a_mid_stream_error_is_an_error_message_end(llm_backend: LLMBackend, co: cohere.ClientV2) -> None:
    llm_backend.add_fault("error_event", after_tokens=2, times=1, message="went wrong")
    events = list(co.chat_stream(model="command-a", messages=ASK, max_tokens=8))
    assert events[-1].type == "message-end"
    assert events[-1].delta.finish_reason == "ERROR"  # type: ignore[union-attr]
    assert events[-1].delta.error == "went wrong"  # type: ignore[union-attr]


@pytest.mark.parametrize("kind", sorted(GENERATION_FAULT_KINDS))
def test_every_fault_kind_keeps_the_server_serving(llm_backend: LLMBackend, co: cohere.ClientV2, kind: str) -> None:
    params: dict[str, Any] = {"stall": {"seconds": 0.05}, "http_error": {"status": 418}}.get(kind, {})
    llm_backend.add_fault(kind, times=2, **params)
    for stream in (False, True):
        try:
            response = httpx.post(llm_backend.url_for("/v2/chat"), timeout=5,
                                  json={"model": "m", "messages": ASK, "stream": stream})
            if response.status_code >= 400:
                assert response.json()["message"]
        except httpx.HTTPError:
            assert kind in ("drop", "drop_before_headers", "close_session", "bad_encoding")  # bad_encoding: a lie
    assert co.chat(model="command-a", messages=ASK, max_tokens=2).finish_reason == "MAX_TOKENS"
    llm_backend.check()


@pytest.mark.parametrize(("payload", "param"), [
    ({"messages": ASK}, "model"),
    ({"model": "m"}, "messages"),
    ({"model": "m", "messages": [{"role": "robot", "content": "x"}]}, "messages[0].role"),
    ({"model": "m", "messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, "messages[0].content[0]"),
    ({"model": "m", "messages": ASK, "max_tokens": 0}, "max_tokens"),
    ({"model": "m", "messages": ASK, "tool_choice": "AUTO"}, "tool_choice"),
    ({"model": "m", "messages": ASK, "response_format": {"type": "xml"}}, "response_format.type"),
    ({"model": "m", "messages": ASK, "documents": ["d"]}, "documents"),
    ({"model": "m", "messages": ASK, "bogus": 1}, "bogus"),
])
def test_bad_chat_input_names_the_field(llm_backend: LLMBackend, payload: Any, param: str) -> None:
    response = httpx.post(llm_backend.url_for("/v2/chat"), json=payload)
    assert response.status_code == 400 and response.json()["message"]
    assert llm_backend.requests[-1].error is not None and llm_backend.requests[-1].error["param"] == param


@pytest.mark.parametrize(("payload", "param"), [
    ({"model": "e", "texts": [], "input_type": "search_query"}, "texts"),
    ({"model": "e", "texts": ["a"]}, "input_type"),
    ({"model": "e", "texts": ["a"], "input_type": "search_query", "embedding_types": ["binary"]}, "embedding_types"),
    ({"model": "e", "texts": ["a"], "input_type": "search_query", "images": ["data:"]}, "images"),
])
def test_bad_embed_input_names_the_field(llm_backend: LLMBackend, payload: Any, param: str) -> None:
    response = httpx.post(llm_backend.url_for("/v2/embed"), json=payload)
    assert response.status_code == 400
    assert llm_backend.requests[-1].error is not None and llm_backend.requests[-1].error["param"] == param
