"""The OpenAI-compatible providers, each driven by its official SDK (the openai SDK where a provider has no Python
one that speaks HTTP: DeepSeek, and xAI, whose SDK is gRPC-only): fields, thinking, usage, extras, errors."""

from __future__ import annotations

import json

import httpx
import openai
import pytest

from pytest_llmsim import LLMBackend, ToolCall

USER = [{"role": "user", "content": "What is the capital of Norway?"}]


def post(backend: LLMBackend, path: str, body: dict[str, object], **headers: str) -> httpx.Response:
    return httpx.post(backend.root_url + path, json=body, headers={"Authorization": "Bearer k", **headers}, timeout=30)


def events(response: httpx.Response) -> list[dict[str, object]]:
    return [json.loads(line[6:]) for line in response.text.splitlines()
            if line.startswith("data: ") and line != "data: [DONE]"]


def test_groq_reasoning_usage_and_x_groq(llm_backend: LLMBackend) -> None:
    import groq

    llm_backend.configure(itl=0.01)
    client = groq.Groq(api_key="gsk_test", base_url=llm_backend.root_url)
    answer = client.chat.completions.create(model="qwen/qwen3-32b", messages=USER, max_tokens=40,  # type: ignore
                                            reasoning_effort="default", reasoning_format="parsed")
    message = answer.choices[0].message
    assert message.reasoning and answer.usage is not None
    details = answer.usage.completion_tokens_details
    assert details is not None and details.reasoning_tokens
    assert answer.usage.total_time is not None and answer.usage.total_time >= answer.usage.completion_time >= 0.39
    assert answer.x_groq is not None and answer.x_groq.id.startswith("req_")
    chunks = list(client.chat.completions.create(model="llama-3.3-70b-versatile", messages=USER,  # type: ignore
                                                 max_tokens=5, stream=True))
    assert chunks[0].x_groq is not None and chunks[0].x_groq.id == chunks[-1].x_groq.id  # type: ignore[union-attr]
    assert chunks[-1].x_groq.usage.completion_tokens == 5  # type: ignore[union-attr]
    raw = client.chat.completions.create(model="qwen/qwen3-32b", messages=USER, max_tokens=40,  # type: ignore
                                         reasoning_format="raw")
    assert (raw.choices[0].message.content or "").startswith("<think>")
    assert [r.api for r in llm_backend.requests] == ["groq.chat"] * 3
    # the same path without a Groq model is Azure's v1 surface
    azure = post(llm_backend, "/openai/v1/chat/completions", {"model": "gpt-4o", "messages": USER}).json()
    assert "content_filter_results" in azure["choices"][0]


def test_mistral_strict_fields_tool_ids_and_errors(llm_backend: LLMBackend) -> None:
    from mistralai.client import Mistral, errors

    client = Mistral(api_key="k", server_url=llm_backend.root_url)
    answer = client.chat.complete(model="mistral-small-latest", messages=USER, max_tokens=6, random_seed=7)  # type: ignore
    assert answer.usage.completion_tokens == 6 and answer.usage.total_tokens == answer.usage.prompt_tokens + 6
    chunks = list(client.chat.stream(model="mistral-small-latest", messages=USER, max_tokens=4))  # type: ignore
    assert chunks[-1].data.usage is not None and chunks[-1].data.usage.completion_tokens == 4
    assert all(chunk.data.usage is None for chunk in chunks[:-1])
    llm_backend.reply_with(ToolCall("get_weather", {"city": "Oslo"}))
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
    called = client.chat.complete(model="mistral-large-latest", messages=USER, tools=tools,  # type: ignore
                                  tool_choice="any")
    (call,) = called.choices[0].message.tool_calls or []
    assert call.id is not None and len(call.id) == 9 and call.id.isalnum()
    # history from another provider: OpenAI's call ids are refused, as Mistral refuses them
    history = [*USER, {"role": "assistant", "content": "", "tool_calls": [
        {"id": "call_abc123xyz", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "call_abc123xyz", "content": "cold"}]
    with pytest.raises(errors.SDKError, match="length of 9"):
        client.chat.complete(model="mistral-large-latest", messages=history)  # type: ignore
    extra = post(llm_backend, "/v1/chat/completions", {"model": "mistral-small", "messages": USER,
                                                        "max_completion_tokens": 9})
    assert extra.status_code == 422
    assert extra.json()["message"]["detail"][0] == {"type": "extra_forbidden", "loc": ["body", "max_completion_tokens"],
                                                    "msg": "Extra inputs are not permitted", "input": 9}
    # x-llmsim-provider settles a model name no provider claims
    named = post(llm_backend, "/v1/chat/completions", {"model": "my-model", "messages": USER, "seed": 1},
                 **{"x-llmsim-provider": "mistral"})
    assert named.status_code == 422 and named.json()["object"] == "error"
    llm_backend.add_fault("rate_limit", times=1)
    with pytest.raises(errors.SDKError) as limited:
        client.chat.complete(model="mistral-small", messages=USER)  # type: ignore
    assert limited.value.status_code == 429 and json.loads(limited.value.body)["type"] == "rate_limited"


def test_together_deltas_usage_and_reasoning(llm_backend: LLMBackend) -> None:
    import together

    client = together.Together(api_key="k", base_url=llm_backend.root_url)
    model = "meta-llama/Llama-3.3-70B-Instruct-Turbo"
    answer = client.chat.completions.create(model=model, messages=USER, max_tokens=5)  # type: ignore
    assert answer.usage is not None and answer.usage.completion_tokens == 5 and answer.prompt == []
    chunks = list(client.chat.completions.create(model=model, messages=USER, max_tokens=5, stream=True))  # type: ignore
    assert all(chunk.choices[0].delta.role == "assistant" for chunk in chunks if chunk.choices)
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 5
    thinking = client.chat.completions.create(model="Qwen/Qwen3-235B-A22B-Thinking", messages=USER,  # type: ignore
                                              max_tokens=60, reasoning={"enabled": True},
                                              extra_headers={"x-llmsim-provider": "together"})
    assert thinking.choices[0].message.reasoning  # type: ignore[union-attr]


def test_openrouter_models_cost_and_errors(llm_backend: LLMBackend) -> None:
    from openrouter import OpenRouter, errors

    with OpenRouter(api_key="k", server_url=llm_backend.root_url + "/api/v1") as client:
        answer = client.chat.send(model="openai/gpt-4o", messages=USER, max_tokens=6)  # type: ignore[arg-type]
        assert answer.usage is not None and answer.usage.cost is not None and answer.usage.cost > 0
        thinking = post(llm_backend, "/api/v1/chat/completions", {
            "models": ["anthropic/claude-sonnet-4", "openai/gpt-4o"], "messages": USER, "max_tokens": 60,
            "reasoning": {"effort": "low"}}).json()
        assert thinking["model"] == "anthropic/claude-sonnet-4" and thinking["choices"][0]["message"]["reasoning"]
        streamed = events(post(llm_backend, "/api/v1/chat/completions",
                               {"model": "openai/gpt-4o", "messages": USER, "max_tokens": 3, "stream": True}))
        assert streamed[-1]["choices"] == [] and streamed[-1]["usage"]["cost"] > 0  # type: ignore[index]
        llm_backend.configure(rpm=1)
        client.chat.send(model="openai/gpt-4o", messages=USER, max_tokens=1)  # type: ignore[arg-type]
        with pytest.raises(errors.OpenRouterError) as limited:
            client.chat.send(model="openai/gpt-4o", messages=USER, max_tokens=1)  # type: ignore[arg-type]
    assert limited.value.status_code == 429
    body = json.loads(limited.value.body)
    assert body["error"]["code"] == 429 and limited.value.headers["x-ratelimit-remaining"] == "0"


def test_perplexity_citations_and_thinking(llm_backend: LLMBackend) -> None:
    from perplexity import Perplexity

    client = Perplexity(api_key="pplx-k", base_url=llm_backend.root_url)
    answer = client.chat.completions.create(model="sonar", messages=USER, max_tokens=8)  # type: ignore
    assert len(answer.citations or []) == 3 and answer.search_results[0].url == answer.citations[0]  # type: ignore
    assert answer.usage is not None and answer.usage.num_search_queries == 1 and answer.usage.cost.total_cost > 0
    unsearched = client.chat.completions.create(model="sonar", messages=USER, max_tokens=8,  # type: ignore
                                                disable_search=True)
    assert unsearched.citations == [] and unsearched.usage.num_search_queries == 0  # type: ignore[union-attr]
    chunks = list(client.chat.completions.create(model="sonar-reasoning", messages=USER, max_tokens=40,  # type: ignore
                                                 stream=True))
    text = "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
    assert text.startswith("<think>") and "</think>" in text
    assert chunks[-1].usage is not None and chunks[-1].citations == answer.citations


def test_deepseek_and_xai_through_the_openai_sdk(llm_backend: LLMBackend) -> None:
    client = openai.OpenAI(base_url=llm_backend.base_url, api_key="k")
    answer = client.chat.completions.create(model="deepseek-reasoner", messages=USER, max_tokens=60)  # type: ignore
    extra = answer.choices[0].message.model_extra or {}
    assert extra["reasoning_content"] and answer.usage is not None
    usage = answer.usage.model_extra or {}
    assert usage["prompt_cache_hit_tokens"] + usage["prompt_cache_miss_tokens"] == answer.usage.prompt_tokens
    streamed = list(client.chat.completions.create(model="deepseek-chat", messages=USER, max_tokens=3,  # type: ignore
                                                   stream=True, stream_options={"include_usage": True}))
    assert streamed[-1].usage is not None and (streamed[-1].usage.model_extra or {})["prompt_cache_miss_tokens"] > 0
    grok = client.chat.completions.create(model="grok-3-mini", messages=USER, max_tokens=60,  # type: ignore
                                          reasoning_effort="high")
    assert (grok.choices[0].message.model_extra or {})["reasoning_content"]
    assert (grok.usage.model_extra or {})["num_sources_used"] == 0  # type: ignore[union-attr]
    llm_backend.configure(api_keys=["good"])
    # keys are checked before the body is read: on the shared path only the header says whose answer a wrong key gets
    xai = {"x-llmsim-provider": "xai"}
    with pytest.raises(openai.BadRequestError) as wrong_key:  # xAI answers a wrong key 400
        client.chat.completions.create(model="grok-4", messages=USER, extra_headers=xai)  # type: ignore[arg-type]
    assert set(wrong_key.value.response.json()) == {"code", "error"}
    with pytest.raises(openai.AuthenticationError):
        client.chat.completions.create(model="grok-4", messages=USER)  # type: ignore[arg-type]
    assert [r.api for r in llm_backend.requests] == ["deepseek.chat"] * 2 + ["xai.chat"] * 2 + ["openai.chat"]


LITELLM_ROUTES = [  # LiteLLM's provider prefix, a model of that provider, the base URL LiteLLM is given, our API name
    ("mistral", "mistral-small-latest", "/v1", "mistral.chat"),
    ("groq", "openai/gpt-oss-20b", "/openai/v1", "groq.chat"),  # a Llama name: LiteLLM fetches its tokenizer
    ("deepseek", "deepseek-chat", "/v1", "deepseek.chat"),
    ("xai", "grok-3-mini", "/v1", "xai.chat"),
    ("together_ai", "Qwen/Qwen2.5-72B-Instruct-Turbo", "/v1", "together.chat"),
    ("openrouter", "openai/gpt-4o", "/api/v1", "openrouter.chat"),
    ("perplexity", "sonar", "", "perplexity.chat"),
]


def test_litellm_routes_each_provider(llm_backend: LLMBackend, monkeypatch: pytest.MonkeyPatch) -> None:
    """A real gateway's provider adapters (LiteLLM's) reach each provider's path and read its answers."""
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # never a tokenizer download (models are chosen so none is wanted)
    import litellm

    for prefix, model, base, _ in LITELLM_ROUTES:
        whole = litellm.completion(model=f"{prefix}/{model}", messages=USER, max_tokens=4, api_key="k",
                                   api_base=llm_backend.root_url + base)
        assert whole.usage.completion_tokens == 4, prefix  # type: ignore[union-attr]
        streamed = litellm.completion(model=f"{prefix}/{model}", messages=USER, max_tokens=4, api_key="k",
                                      api_base=llm_backend.root_url + base, stream=True)
        text = "".join(chunk.choices[0].delta.content or "" for chunk in streamed)  # type: ignore[union-attr]
        assert text == whole.choices[0].message.content, prefix  # type: ignore[union-attr]
    assert [r.api for r in llm_backend.requests] == [api for *_, api in LITELLM_ROUTES for _ in range(2)]
