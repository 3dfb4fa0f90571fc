"""The ``content_filter`` fault kind, rendered by each API as its own content filter renders it."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest

from pytest_llmsim import FaultError, LLMBackend

CHAT: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}
GEMINI: dict[str, Any] = {"contents": [{"parts": [{"text": "hi"}]}], "generationConfig": {"maxOutputTokens": 8}}
CONVERSE: dict[str, Any] = {"messages": [{"role": "user", "content": [{"text": "hi"}]}],
                            "inferenceConfig": {"maxTokens": 8}}
MESSAGES: dict[str, Any] = {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}


def post(backend: LLMBackend, path: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(backend.url_for(path), json=body)


def test_a_blocked_prompt_is_openais_and_azures_400(llm_backend: LLMBackend) -> None:
    llm_backend.add_fault("content_filter", times=2)
    client = openai.OpenAI(base_url=llm_backend.base_url, api_key="k", max_retries=0)
    try:
        with pytest.raises(openai.BadRequestError) as raised:
            client.chat.completions.create(**CHAT)
    finally:
        client.close()
    assert raised.value.code == "content_filter"
    azure = post(llm_backend, "/openai/deployments/d/chat/completions?api-version=2024-10-21", CHAT).json()
    assert azure["error"]["code"] == "content_filter"
    assert azure["error"]["innererror"]["code"] == "ResponsibleAIPolicyViolation"
    assert azure["error"]["innererror"]["content_filter_result"]["hate"]["filtered"] is True
    assert llm_backend.metrics.faults == {"content_filter": 2}


def test_a_filtered_answer_ends_with_content_filter(llm_backend: LLMBackend) -> None:
    llm_backend.add_fault("content_filter", side="completion", after_tokens=3)
    answer = post(llm_backend, "/v1/chat/completions", CHAT).json()
    assert answer["choices"][0]["finish_reason"] == "content_filter" and answer["usage"]["completion_tokens"] == 3
    with httpx.stream("POST", llm_backend.url_for("/v1/chat/completions"), json={**CHAT, "stream": True}) as streamed:
        lines = [line for line in streamed.iter_lines() if line.startswith("data: {")]
    assert '"finish_reason":"content_filter"' in lines[-1].replace(" ", "")
    responses = post(llm_backend, "/v1/responses", {"model": "m", "input": "hi", "max_output_tokens": 20}).json()
    assert responses["status"] == "incomplete" and responses["incomplete_details"] == {"reason": "content_filter"}


def test_claude_refuses(llm_backend: LLMBackend) -> None:
    llm_backend.add_fault("content_filter", side="completion", after_tokens=2, times=1)
    cut = post(llm_backend, "/v1/messages", MESSAGES).json()
    assert cut["stop_reason"] == "refusal" and cut["usage"]["output_tokens"] == 2
    llm_backend.add_fault("content_filter", times=1)
    blocked = post(llm_backend, "/v1/messages", MESSAGES).json()
    assert blocked["stop_reason"] == "refusal" and blocked["usage"]["output_tokens"] == 0


def test_gemini_blocks_the_prompt_or_stops_for_safety(llm_backend: LLMBackend) -> None:
    llm_backend.add_fault("content_filter", times=2)
    blocked = post(llm_backend, "/v1beta/models/m:generateContent", GEMINI)
    assert blocked.status_code == 200
    assert blocked.json()["promptFeedback"] == {"blockReason": "SAFETY"} and "candidates" not in blocked.json()
    with httpx.stream("POST", llm_backend.url_for("/v1beta/models/m:streamGenerateContent?alt=sse"),
                      json=GEMINI) as streamed:
        events = [line for line in streamed.iter_lines() if line.startswith("data: ")]
    assert len(events) == 1 and '"blockReason":"SAFETY"' in events[0]
    llm_backend.add_fault("content_filter", side="completion", after_tokens=2, times=1)
    stopped = post(llm_backend, "/v1beta/models/m:generateContent", GEMINI).json()
    assert stopped["candidates"][0]["finishReason"] == "SAFETY"
    assert stopped["usageMetadata"]["candidatesTokenCount"] == 2


def test_converse_is_content_filtered(llm_backend: LLMBackend) -> None:
    llm_backend.add_fault("content_filter", side="completion", after_tokens=1)
    answer = post(llm_backend, "/model/m/converse", CONVERSE).json()
    assert answer["stopReason"] == "content_filtered" and answer["usage"]["outputTokens"] == 1


def test_apis_without_a_content_filter_refuse_the_kind(llm_backend: LLMBackend) -> None:
    llm_backend.add_fault("content_filter")
    refused = post(llm_backend, "/v1/embeddings", {"model": "m", "input": "x"})
    assert refused.status_code == 400 and refused.json()["error"]["code"] == "unsupported_fault"
    gemini_embed = post(llm_backend, "/v1beta/models/m:embedContent", {"content": {"parts": [{"text": "x"}]}})
    assert gemini_embed.status_code == 400 and gemini_embed.json()["error"]["status"] == "INVALID_ARGUMENT"
    with pytest.raises(FaultError, match="side"):
        llm_backend.add_fault("content_filter", side="both")
