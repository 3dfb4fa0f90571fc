"""Ollama's native API through the official ``ollama`` client (sync, async, streaming, tools, formats)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import ollama
import pytest

from pytest_llmsim import GENERATION_FAULT_KINDS, LLMBackend, ToolCall

pytestmark = pytest.mark.usefixtures("loopback_only")
ASK: Any = [{"role": "user", "content": "Say something short."}]
TOOLS: Any = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]


_OPEN: list[ollama.Client] = []


def client(backend: LLMBackend) -> ollama.Client:
    made = ollama.Client(host=backend.root_url)
    _OPEN.append(made)
    return made


@pytest.fixture(autouse=True)
def _close_clients() -> Iterator[None]:
    """The ollama client keeps an httpx client open; close each one the test made."""
    yield
    while _OPEN:
        _OPEN.pop()._client.close()


def test_chat_reports_counts_and_simulated_durations(llm_backend: LLMBackend) -> None:
    llm_backend.configure(ttft=0.05, itl=0.01, speed=float("inf"))
    llm_backend.reply_with("Hello from Ollama")
    answer = client(llm_backend).chat(model="llama3:latest", messages=ASK, stream=False)
    assert answer.message.content == "Hello from Ollama" and answer.done and answer.done_reason == "stop"
    record = llm_backend.requests[-1]
    assert (answer.prompt_eval_count, answer.eval_count) == (record.prompt_tokens, record.completion_tokens)
    assert answer.prompt_eval_duration == pytest.approx(50_000_000, rel=0.01)  # ttft, in nanoseconds
    assert answer.total_duration is not None and answer.prompt_eval_duration is not None
    assert answer.eval_duration == answer.total_duration - answer.prompt_eval_duration
    assert (record.api, record.model) == ("ollama.chat", "llama3")
    limited = client(llm_backend).chat(model="llama3", messages=ASK, options={"num_predict": 3}, stream=False)
    assert limited.done_reason == "length" and limited.eval_count == 3


def test_streams_are_ndjson_by_default(llm_backend: LLMBackend) -> None:
    llm_backend.reply_with("one two three", "four five")
    parts = list(client(llm_backend).chat(model="llama3", messages=ASK, stream=True))
    assert [part.done for part in parts][-1] is True and not any(part.done for part in parts[:-1])
    assert "".join(part.message.content for part in parts) == "one two three"
    with httpx.stream("POST", llm_backend.url_for("/api/generate"), json={"model": "llama3", "prompt": "hi"}) as raw:
        assert raw.headers["content-type"].startswith("application/x-ndjson")
        lines = [json.loads(line) for line in raw.iter_lines() if line]
    assert "".join(line["response"] for line in lines) == "four five" and lines[-1]["done"] is True


def test_generate_embed_and_the_model_routes(llm_backend: LLMBackend) -> None:
    ol = client(llm_backend)
    generated = ol.generate(model="llama3", prompt="Once upon", system="Be brief.", options={"num_predict": 4},
                            stream=False)
    assert generated.eval_count == 4 and llm_backend.requests[-1].api == "ollama.generate"
    vectors = ol.embed(model="nomic-embed-text", input=["a", "b"])
    assert len(vectors.embeddings) == 2 and llm_backend.requests[-1].api == "ollama.embed"
    legacy = httpx.post(llm_backend.url_for("/api/embeddings"), json={"model": "m", "prompt": "a"}).json()
    assert legacy["embedding"] == list(vectors.embeddings[0])
    assert [m.model for m in ol.list().models] == ["llmsim:latest"]
    assert "tools" in (ol.show("llmsim").capabilities or [])
    assert sorted(m.model for m in ol.ps().models) == ["llama3:latest", "m:latest", "nomic-embed-text:latest"]
    assert httpx.get(llm_backend.url_for("/api/version")).json()["version"]


def test_tools_and_structured_output(llm_backend: LLMBackend) -> None:
    llm_backend.reply_with(ToolCall("get_weather", {"city": "Paris"}))
    ol = client(llm_backend)
    called = ol.chat(model="llama3", messages=ASK, tools=TOOLS, stream=False)
    call = (called.message.tool_calls or [])[0]
    assert call.function.name == "get_weather" and call.function.arguments == {"city": "Paris"}
    history = [*ASK, called.message, {"role": "tool", "content": "21 degrees"}]
    assert ol.chat(model="llama3", messages=history, tools=TOOLS, stream=False).message.content
    llm_backend.reply_with(ToolCall("get_weather", {"city": "Oslo"}))
    streamed = [part for part in ol.chat(model="llama3", messages=ASK, tools=TOOLS, stream=True)
                if part.message.tool_calls]
    assert len(streamed) == 1 and (streamed[0].message.tool_calls or [])[0].function.arguments == {"city": "Oslo"}
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    shaped = ol.chat(model="llama3", messages=ASK, format=schema, stream=False)
    assert isinstance(json.loads(shaped.message.content or "")["n"], int)
    assert isinstance(json.loads(ol.chat(model="llama3", messages=ASK, format="json", stream=False).message.content
                                 or ""), dict)


def test_the_async_client(llm_backend: LLMBackend) -> None:
    async def ask() -> str:
        ol = ollama.AsyncClient(host=llm_backend.root_url)
        try:
            answer = await ol.chat(model="llama3", messages=ASK, stream=False)
        finally:
            await ol._client.aclose()
        return answer.message.content or ""

    llm_backend.reply_with("async answer")
    assert asyncio.run(ask()) == "async answer"


def test_errors_are_ollamas(llm_backend: LLMBackend) -> None:
    llm_backend.configure(strict_models=True)
    with pytest.raises(ollama.ResponseError) as missing:
        client(llm_backend).chat(model="nope", messages=ASK, stream=False)
    assert missing.value.status_code == 404 and missing.value.error == "model 'nope' not found"
    llm_backend.configure(strict_models=False)
    llm_backend.add_fault("error_event", after_tokens=2, times=1, message="went wrong")
    with pytest.raises(ollama.ResponseError, match="went wrong"):
        list(client(llm_backend).chat(model="llama3", messages=ASK, stream=True))
    llm_backend.add_fault("rate_limit", times=1)
    with pytest.raises(ollama.ResponseError) as limited:
        client(llm_backend).chat(model="llama3", messages=ASK, stream=False)
    assert limited.value.status_code == 429


@pytest.mark.parametrize("kind", sorted(GENERATION_FAULT_KINDS))
def test_every_fault_kind_keeps_the_server_serving(llm_backend: LLMBackend, kind: str) -> None:
    params: dict[str, Any] = {"stall": {"seconds": 0.05}, "http_error": {"status": 418}}.get(kind, {})
    llm_backend.add_fault(kind, times=2, **params)
    for stream in (False, True):
        try:
            response = httpx.post(llm_backend.url_for("/api/chat"), timeout=5,
                                  json={"model": "m", "messages": ASK, "stream": stream})
            if response.status_code >= 400:
                assert isinstance(response.json()["error"], str)
        except httpx.HTTPError:
            assert kind in ("drop", "drop_before_headers", "close_session", "bad_encoding")  # bad_encoding: a lie
    assert client(llm_backend).chat(model="m", messages=ASK, options={"num_predict": 2}, stream=False).eval_count == 2
    llm_backend.check()


@pytest.mark.parametrize(("path", "payload", "param"), [
    ("/api/chat", {"messages": ASK}, "model"),
    ("/api/chat", {"model": "m", "messages": "hi"}, "messages"),
    ("/api/chat", {"model": "m", "messages": [{"role": "robot", "content": "x"}]}, "messages[0].role"),
    ("/api/chat", {"model": "m", "messages": ASK, "options": {"num_predict": 0}}, "options.num_predict"),
    ("/api/chat", {"model": "m", "messages": ASK, "options": {"warp": 9}}, "options.warp"),
    ("/api/chat", {"model": "m", "messages": ASK, "format": "yaml"}, "format"),
    ("/api/chat", {"model": "m", "messages": ASK, "think": "maximum"}, "think"),
    ("/api/generate", {"model": "m", "prompt": 3}, "prompt"),
    ("/api/chat", {"model": "m", "messages": ASK, "keep_alive": "99999999h"}, "keep_alive"),  # past Go's Duration
    ("/api/generate", {"model": "m", "prompt": "x", "keep_alive": 1e18}, "keep_alive"),
    ("/api/embeddings", {"model": "m", "prompt": ["a", "b"]}, "prompt"),  # the legacy prompt is one string
    ("/api/embed", {"model": "m", "input": []}, "input"),
])
def test_bad_input_is_ollamas_error_naming_the_field(llm_backend: LLMBackend, path: str, payload: Any,
                                                     param: str) -> None:
    response = httpx.post(llm_backend.url_for(path), json=payload)
    assert response.status_code == 400 and isinstance(response.json()["error"], str)
    assert llm_backend.requests[-1].error is not None and llm_backend.requests[-1].error["param"] == param


def test_a_keep_alive_past_a_duration_leaves_api_ps_working(llm_backend: LLMBackend) -> None:
    httpx.post(llm_backend.url_for("/api/chat"), json={"model": "m", "messages": ASK, "keep_alive": "99999999h"})
    assert httpx.get(llm_backend.url_for("/api/ps")).status_code == 200
    longest = client(llm_backend).chat(model="m", messages=ASK, stream=False, keep_alive="2562047h")  # Go's most
    assert longest.done
    (loaded,) = client(llm_backend).ps().models
    assert loaded.expires_at is not None


def test_fields_ollama_does_not_define_are_ignored_and_logged(llm_backend: LLMBackend) -> None:
    body = {"model": "m", "stream": False, "bogus": 1, "messages": [
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "w", "arguments": {}}}]},
        {"role": "tool", "content": "sunny", "tool_call_id": "call_1"}]}
    answer = httpx.post(llm_backend.url_for("/api/chat"), json=body)
    assert answer.status_code == 200, answer.text
    assert llm_backend.requests[-1].ignored_fields == ["bogus", "messages[2].tool_call_id"]
    llm_backend.configure(strict_fields=True)  # refused for those who ask, in Ollama's shape
    strict = httpx.post(llm_backend.url_for("/api/chat"), json=body)
    assert strict.status_code == 400 and "bogus" in strict.json()["error"]


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # LiteLLM's own event loops
def test_litellm_ollama_chat_tool_loop(llm_backend: LLMBackend) -> None:
    import os

    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    litellm = pytest.importorskip("litellm")
    tools = [{"type": "function", "function": {"name": "weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
    messages: list[dict[str, Any]] = [{"role": "user", "content": "weather in Paris?"}]
    first = litellm.completion(model="ollama_chat/llama3", messages=messages, tools=tools, tool_choice="required",
                               api_base=llm_backend.root_url, max_tokens=40)
    (call,) = first.choices[0].message.tool_calls
    messages += [first.choices[0].message.model_dump(), {"role": "tool", "tool_call_id": call.id,
                                                         "content": "sunny"}]
    second = litellm.completion(model="ollama_chat/llama3", messages=messages, api_base=llm_backend.root_url,
                                max_tokens=4)
    assert second.usage.completion_tokens == 4
    assert "messages[2].tool_call_id" in llm_backend.requests[-1].ignored_fields


def test_durations_are_never_zero_at_zero_latency(llm_backend: LLMBackend) -> None:
    llm_backend.configure(ttft=0.0, itl=0.0, speed=float("inf"))
    answer = client(llm_backend).chat(model="m", messages=ASK, stream=False, options={"num_predict": 5})
    assert answer.eval_count == 5 and answer.eval_duration > 0 and answer.prompt_eval_duration > 0
    assert answer.eval_count / (answer.eval_duration / 1e9) > 0  # as Ollama's CLI prints tokens per second
    assert answer.total_duration == answer.load_duration + answer.prompt_eval_duration + answer.eval_duration
    embedded = client(llm_backend).embed(model="m", input="a")
    assert embedded.total_duration > 0


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # LiteLLM's own event loops
def test_litellm_ollama_chat_route(llm_backend: LLMBackend) -> None:
    import os

    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    litellm = pytest.importorskip("litellm")
    answer = litellm.completion(model="ollama_chat/llama3", messages=ASK, api_base=llm_backend.root_url, max_tokens=4)
    assert answer.usage.completion_tokens == 4
    sent = llm_backend.requests[-1]
    assert (sent.api, sent.path, sent.body["options"]["num_predict"]) == ("ollama.chat", "/api/chat", 4)
    chunks = litellm.completion(model="ollama_chat/llama3", messages=ASK, api_base=llm_backend.root_url,
                                max_tokens=4, stream=True)
    assert "".join(chunk.choices[0].delta.content or "" for chunk in chunks)


def test_a_cold_model_loads_once_and_stays_loaded_for_its_keep_alive(llm_backend: LLMBackend) -> None:
    llm_backend.configure(ollama_load_seconds=2.0, ttft=0.01, speed=float("inf"))
    ol = client(llm_backend)
    cold = ol.chat(model="llama3", messages=ASK, stream=False)
    assert cold.load_duration == 2_000_000_000
    assert cold.total_duration == cold.load_duration + cold.prompt_eval_duration + cold.eval_duration
    record = llm_backend.requests[-1]
    assert record.load_time == 2.0 and record.ttft == pytest.approx(2.01) and record.queue_time == 0
    warm = ol.chat(model="llama3", messages=ASK, stream=False, keep_alive=0)  # unloaded when it ends
    assert warm.load_duration == 0 and llm_backend.requests[-1].load_time is None
    assert ol.ps().models == []
    again = ol.generate(model="llama3", prompt="hi", stream=False, keep_alive="1h30m")
    assert again.load_duration == 2_000_000_000
    (loaded,) = ol.ps().models
    assert loaded.model == "llama3:latest" and loaded.expires_at is not None
    other = ol.embed(model="nomic-embed-text", input="a")
    assert other.load_duration == 2_000_000_000  # each model loads on its own
    assert ol.chat(model="llama3", messages=ASK, stream=False).load_duration == 0
    assert llm_backend.metrics.ttft.max == pytest.approx(2.01)  # the metrics see the wait too


def test_requests_that_arrive_while_a_model_loads_wait_for_the_same_load(llm_backend: LLMBackend) -> None:
    llm_backend.configure(ollama_load_seconds=1.0, speed=20.0)  # 50 ms of wall time
    url = llm_backend.url_for("/api/chat")

    def ask(_: int) -> float:
        answer = httpx.post(url, json={"model": "llama3", "messages": ASK, "stream": False}, timeout=10).json()
        return float(answer["load_duration"]) / 1e9

    with ThreadPoolExecutor(2) as pool:
        first, second = sorted(pool.map(ask, range(2)), reverse=True)
    assert first == pytest.approx(1.0, abs=1e-6)
    assert second < first  # the model loaded once: the later request waited for what was left of it


def test_a_load_is_cut_short_by_a_client_that_gives_up(llm_backend: LLMBackend) -> None:
    llm_backend.configure(ollama_load_seconds=60.0, speed=100.0)  # 0.6 s of wall time
    with pytest.raises(httpx.TimeoutException):
        httpx.post(llm_backend.url_for("/api/chat"), json={"model": "llama3", "messages": ASK}, timeout=0.1)
    assert llm_backend.wait_idle(timeout=5)
    (record,) = llm_backend.requests
    assert record.status == 499 and record.cancelled


@pytest.mark.parametrize("keep_alive", ["5 minutes", "m", "-", True, [], {}, "1x"])
def test_a_keep_alive_that_is_not_a_duration_is_refused(llm_backend: LLMBackend, keep_alive: Any) -> None:
    body = {"model": "m", "messages": ASK, "keep_alive": keep_alive}
    answer = httpx.post(llm_backend.url_for("/api/chat"), json=body)
    message = answer.json()["error"]
    assert answer.status_code == 400 and ("keep_alive" in message or "invalid duration" in message)
