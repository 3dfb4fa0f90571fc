"""Every generation fault kind on the APIs issue 58 added (the OpenAI-compatible providers, images, speech,
transcription, Bedrock InvokeModel's other families): each answers in its API's own error shape, whole and
streamed, and the server keeps serving."""

from __future__ import annotations

import io
import wave
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from pytest_llmsim import GENERATION_FAULT_KINDS, LLMBackend

ASK = [{"role": "user", "content": "hello"}]


def _chat(model: str) -> dict[str, Any]:
    return {"model": model, "messages": ASK, "max_tokens": 3}


def _openai_shape(body: Any) -> bool:
    return isinstance(body.get("error"), dict) and bool(body["error"].get("message"))


def _wav() -> bytes:
    samples = io.BytesIO()
    with wave.open(samples, "wb") as audio:
        audio.setnchannels(1)
        audio.setsampwidth(2)
        audio.setframerate(16000)
        audio.writeframes(b"\x00\x00" * 16000)
    return samples.getvalue()


# name -> (path, JSON body or None for a multipart upload, does it stream, is an error body its API's shape)
TARGETS: dict[str, tuple[str, dict[str, Any] | None, bool, Callable[[Any], bool]]] = {
    "mistral": ("/v1/chat/completions", _chat("mistral-small-latest"), True,
                lambda body: body.get("object") == "error" or "message" in body),
    "openrouter": ("/api/v1/chat/completions", _chat("openai/gpt-4o"), True,
                   lambda body: isinstance(body.get("error", {}).get("code"), int)),
    "xai": ("/v1/chat/completions", _chat("grok-3"), True, lambda body: set(body) == {"code", "error"}),
    "groq": ("/openai/v1/chat/completions", _chat("llama-3.3-70b-versatile"), True, _openai_shape),
    "together": ("/v1/chat/completions", _chat("Qwen/Qwen2.5-72B-Instruct-Turbo"), True, _openai_shape),
    "deepseek": ("/v1/chat/completions", _chat("deepseek-chat"), True, _openai_shape),
    "perplexity": ("/chat/completions", _chat("sonar"), True, _openai_shape),
    "images": ("/v1/images/generations", {"model": "gpt-image-1", "prompt": "a fox", "quality": "low"}, False,
               _openai_shape),
    "speech": ("/v1/audio/speech", {"model": "tts-1", "voice": "alloy", "input": "Hello there."}, False,
               _openai_shape),
    "transcription": ("/v1/audio/transcriptions", None, False, _openai_shape),
    "bedrock-titan": ("/model/amazon.titan-text-express-v1/invoke", {"inputText": "hello"}, False,
                      lambda body: "message" in body),
}


def _send(client: httpx.Client, path: str, body: dict[str, Any] | None, stream: bool) -> httpx.Response:
    if body is None:
        return client.post(path, data={"model": "whisper-1"}, files={"file": ("a.wav", _wav(), "audio/wav")})
    return client.post(path, json={**body, "stream": True} if stream else body)


@pytest.mark.parametrize("kind", sorted(GENERATION_FAULT_KINDS))
def test_every_fault_kind_answers_in_each_new_apis_shape(llm_backend: LLMBackend, kind: str) -> None:
    params: dict[str, Any] = {"stall": {"seconds": 0.02}, "http_error": {"status": 418}}.get(kind, {})
    faulted = 0
    with httpx.Client(base_url=llm_backend.root_url, timeout=30, headers={"Authorization": "Bearer k"}) as client:
        for name, (path, body, streams, shaped) in TARGETS.items():
            for stream in (False, True) if streams else (False,):
                llm_backend.add_fault(kind, times=1, **params)
                try:
                    response = _send(client, path, body, stream)
                    if response.status_code >= 400:
                        assert shaped(response.json()), (name, stream, response.text[:300])
                        if name == "bedrock-titan":
                            assert response.headers["x-amzn-ErrorType"]
                except httpx.HTTPError:
                    assert kind in ("drop", "drop_before_headers", "close_session", "bad_encoding"), (name, kind)
                faulted += 1
                llm_backend.clear_faults()
                answer = _send(client, path, body, stream)  # the server keeps serving this API
                assert answer.status_code == 200, (name, stream, answer.text[:300])
    assert llm_backend.wait_idle(timeout=30)
    assert llm_backend.metrics.faults.get(kind, 0) >= faulted - 8  # (a kind an API refuses is a 400, not counted)
    llm_backend.check()


def test_error_events_mid_stream_are_each_providers_own(llm_backend: LLMBackend) -> None:
    """``error_event``: the event that ends a provider's stream carries that provider's error body."""
    expected = {"mistral": '"object":"error"', "openrouter": '"code":500', "xai": '"code":"Internalerror"',
                "groq": '"error":{"message"'}
    with httpx.Client(base_url=llm_backend.root_url, timeout=30) as client:
        for name, needle in expected.items():
            path, body, _, _ = TARGETS[name]
            llm_backend.add_fault("error_event", after_tokens=1, times=1)
            text = client.post(path, json={**(body or {}), "stream": True}).text
            assert needle in text.replace(" ", ""), (name, text[-300:])  # (spaces removed from both)
