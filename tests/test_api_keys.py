"""api_keys: the keys a backend accepts, each with its own limits, so a gateway's key rotation can be tested."""

from __future__ import annotations

import os
from typing import Any

import anthropic
import httpx
import openai
import pytest

from pytest_llmsim import ConfigError, LLMBackend

ASK: Any = [{"role": "user", "content": "hi"}]


def _chat(backend: LLMBackend, key: str) -> Any:
    client = openai.OpenAI(base_url=backend.base_url, api_key=key, max_retries=0)
    try:
        return client.chat.completions.create(model="m", messages=ASK, max_tokens=2)
    finally:
        client.close()


def test_a_throttled_key_answers_429_while_another_is_served(llm_backend: LLMBackend) -> None:
    llm_backend.configure(api_keys={"sk-team-a": {"rpm": 1}, "sk-team-b": None})
    assert _chat(llm_backend, "sk-team-a").usage.completion_tokens == 2
    with pytest.raises(openai.RateLimitError):
        _chat(llm_backend, "sk-team-a")
    assert _chat(llm_backend, "sk-team-b").usage.completion_tokens == 2  # its own window, not team a's
    with pytest.raises(openai.AuthenticationError) as refused:
        _chat(llm_backend, "sk-other-1234")
    assert "sk-...1234" in refused.value.message and "sk-other" not in refused.value.message  # never echoed whole
    assert [r.status for r in llm_backend.requests] == [200, 429, 200, 401]


def test_every_api_answers_an_unknown_key_in_its_shape(llm_backend: LLMBackend) -> None:
    llm_backend.configure(api_keys=["sk-good"])
    claude = anthropic.Anthropic(base_url=llm_backend.root_url, api_key="sk-bad", max_retries=0)
    with pytest.raises(anthropic.AuthenticationError) as refused:
        claude.messages.create(model="claude-sonnet-5-5", max_tokens=4, messages=ASK)
    assert isinstance(refused.value.body, dict) and refused.value.body["error"]["type"] == "authentication_error"
    claude.close()
    gemini = httpx.post(llm_backend.url_for("/v1beta/models/gemini-2.5-flash:generateContent"),
                        headers={"x-goog-api-key": "sk-bad"}, json={"contents": [{"parts": [{"text": "hi"}]}]})
    assert gemini.status_code == 401 and gemini.json()["error"]["status"] == "UNAUTHENTICATED"
    assert httpx.post(llm_backend.url_for("/api/chat"), json={"model": "m", "messages": ASK}).status_code == 401
    assert _chat(llm_backend, "sk-good").choices


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # LiteLLM's own event loops
@pytest.mark.usefixtures("collect_garbage")
def test_a_gateway_rotates_to_its_second_key(llm_backend: LLMBackend) -> None:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    litellm = pytest.importorskip("litellm")
    llm_backend.configure(api_keys={"sk-first": {"rpm": 1}, "sk-second": {"rpm": 100}})
    router = litellm.Router(model_list=[
        {"model_name": "first", "litellm_params": {"model": "openai/m", "api_base": llm_backend.base_url,
                                                   "api_key": "sk-first", "max_retries": 0}},
        {"model_name": "second", "litellm_params": {"model": "openai/m", "api_base": llm_backend.base_url,
                                                    "api_key": "sk-second", "max_retries": 0}},
    ], fallbacks=[{"first": ["second"]}], num_retries=0)
    for _ in range(3):
        assert router.completion(model="first", messages=ASK, max_tokens=2).choices
    assert [r.status for r in llm_backend.requests] == [200, 429, 200, 429, 200]


@pytest.mark.parametrize("keys", [{"k": {"rpd": 3}}, {"k": {"rpm": 0}}, 42, "k:rpm=x"])
def test_bad_api_keys_are_refused(llm_backend: LLMBackend, keys: Any) -> None:
    with pytest.raises(ConfigError, match="api_keys"):
        llm_backend.configure(api_keys=keys)


def test_api_keys_from_text() -> None:
    from pytest_llmsim.sim.config import parse_setting

    assert parse_setting("api_keys", "sk-a:rpm=10:tpm=500,sk-b") == (("sk-a", 10, 500), ("sk-b", None, None))
