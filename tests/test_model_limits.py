"""Each model's published limits: a client's default max_tokens is taken as the real API takes it, refused
past the model's largest answer in the API's own words, and a large ceiling ends naturally (natural_answer_cap)."""

from __future__ import annotations

from typing import Any

import anthropic
import httpx
import openai
import pytest

from pytest_llmsim import ConfigError, LLMBackend
from pytest_llmsim.sim.model_limits import ModelLimits, limits_for

ASK: Any = [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize(("model", "expected"), [
    ("gpt-4o-mini", ModelLimits(128_000, 16_384)),
    ("openai/gpt-4o-2024-08-06", ModelLimits(128_000, 16_384)),
    ("gpt-4", ModelLimits(8_192, 8_192)),
    ("o3-mini", ModelLimits(200_000, 100_000)),
    ("claude-sonnet-4-5-20250929", ModelLimits(200_000, 64_000)),
    ("claude-sonnet-4-6", ModelLimits(1_000_000, 128_000)),  # Anthropic's models pages, 2026-12
    ("claude-opus-5-5", ModelLimits(1_000_000, 128_000)),
    ("anthropic.claude-sonnet-5-5-v1:0", ModelLimits(1_000_000, 128_000)),
    ("claude-opus-4-1", ModelLimits(200_000, 32_000)),
    ("us.anthropic.claude-3-5-haiku-20241022-v1:0", ModelLimits(200_000, 8_192)),
    ("anthropic.claude-3-haiku-20240307-v1:0", ModelLimits(200_000, 4_096)),
    ("gemini-2.5-flash", ModelLimits(1_048_576, 65_536)),
    ("llmsim", ModelLimits(32_768, None)),  # outside the catalog: max_model_len, any max_tokens in it
])
def test_the_catalog_knows_the_published_families(model: str, expected: ModelLimits) -> None:
    assert limits_for(model, (), 32_768) == expected


def test_model_limits_override_the_catalog_and_parse_from_text() -> None:
    from pytest_llmsim.sim.config import SimConfig, parse_setting

    overrides = parse_setting("model_limits", "gpt-4o=1000/100, my-model=4096/512")
    assert overrides == (("gpt-4o", 1000, 100), ("my-model", 4096, 512))
    assert limits_for("gpt-4o", overrides, 32_768) == ModelLimits(1000, 100)
    config = SimConfig().replace(model_limits={"x": {"context_window": 10, "max_output_tokens": 5}})
    assert config.model_limits == (("x", 10, 5),)
    for bad in ("gpt-4o=100", {"x": (5, 10)}, {"x": (0, 1)}, 7):
        with pytest.raises(ConfigError, match="model_limits"):
            SimConfig().replace(model_limits=bad)


def test_anthropic_takes_a_clients_64000_default_and_answers_naturally(llm_backend: LLMBackend) -> None:
    client = anthropic.Anthropic(base_url=llm_backend.root_url, api_key="test", max_retries=0)
    with client.messages.stream(model="claude-sonnet-4-5", max_tokens=64_000, messages=ASK) as stream:
        message = stream.get_final_message()
    assert message.stop_reason == "end_turn" and 512 <= message.usage.output_tokens <= 1024
    assert message.usage.input_tokens == llm_backend.requests[-1].prompt_tokens  # message_delta's usage is whole
    with pytest.raises(anthropic.BadRequestError) as refused:
        client.messages.create(model="claude-sonnet-4-5", max_tokens=64_001, messages=ASK, timeout=30)
    body: Any = refused.value.body
    assert body["error"]["message"] == (
        "max_tokens: 64001 > 64000, which is the maximum allowed number of output tokens for claude-sonnet-4-5")
    with pytest.raises(anthropic.BadRequestError, match="input length and `max_tokens` exceed context limit"):
        client.messages.create(model="claude-sonnet-4-5", max_tokens=60_000, timeout=30,
                               messages=[{"role": "user", "content": "word " * 150_000}])
    client.close()


def test_openai_refuses_max_tokens_past_the_models_largest_answer(llm_backend: LLMBackend) -> None:
    client = openai.OpenAI(base_url=llm_backend.base_url, api_key="sk", max_retries=0)
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model="gpt-4o", messages=ASK, max_completion_tokens=20_000)
    assert refused.value.param == "max_completion_tokens" and refused.value.code == "max_tokens_too_large"
    assert "supports at most 16384 completion tokens" in refused.value.message
    answer = client.chat.completions.create(model="gpt-4o", messages=ASK, max_completion_tokens=16_384)
    assert answer.choices[0].finish_reason == "stop" and answer.usage is not None
    assert answer.usage.completion_tokens <= 1024
    client.close()


def test_gemini_and_bedrock_word_the_limit_their_own_way(llm_backend: LLMBackend) -> None:
    gemini = httpx.post(llm_backend.url_for("/v1beta/models/gemini-2.0-flash:generateContent"),
                        json={"contents": [{"parts": [{"text": "hi"}]}], "generationConfig": {"maxOutputTokens": 9000}})
    error = gemini.json()["error"]
    assert gemini.status_code == 400 and error["status"] == "INVALID_ARGUMENT"
    assert "maxOutputTokens 9000 is out of range" in error["message"] and "8193 (exclusive)" in error["message"]
    bedrock = httpx.post(llm_backend.url_for("/model/anthropic.claude-3-haiku-20240307-v1:0/converse"),
                         json={"messages": [{"role": "user", "content": [{"text": "hi"}]}],
                               "inferenceConfig": {"maxTokens": 5000}})
    assert bedrock.status_code == 400 and bedrock.headers["x-amzn-ErrorType"].startswith("ValidationException")
    assert "exceeds the model limit of 4096" in bedrock.json()["message"]


def test_the_natural_answer_cap(llm_backend: LLMBackend) -> None:
    def ask(max_tokens: int) -> tuple[int, str]:
        body = httpx.post(llm_backend.url_for("/v1/chat/completions"),
                          json={"model": "m", "messages": ASK, "max_tokens": max_tokens}).json()
        return body["usage"]["completion_tokens"], body["choices"][0]["finish_reason"]

    assert ask(1024) == (1024, "length")  # at most the cap: runs to max_tokens, as before
    length, reason = ask(5000)
    assert 512 <= length <= 1024 and reason == "stop"
    assert ask(5000) == (length, reason)  # seeded: the same request, the same answer
    llm_backend.configure(natural_answer_cap=0)
    assert ask(5000) == (5000, "length")
    llm_backend.configure(natural_answer_cap=100, answer_length=300)  # an explicit length wins
    assert ask(5000) == (300, "stop")
