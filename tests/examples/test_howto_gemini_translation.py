"""How-to: test a gateway that translates OpenAI-format calls to Google's Gemini API.

LiteLLM's ``gemini/`` provider turns an OpenAI-style ``completion()`` into a
``POST {api_base}/models/{model}:generateContent`` (``:streamGenerateContent?alt=sse``
when streaming); point its ``api_base`` at ``root_url + "/v1beta"``. google-genai
does not retry by default, so the retry on a 429 is a gateway's job: here,
LiteLLM's ``num_retries``. The last test falls back from a throttled Gemini
backend to an OpenAI-format one.
"""

from __future__ import annotations

import os

import pytest

from pytest_llmsim import ToolCall

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
litellm = pytest.importorskip("litellm")

# LiteLLM leaves asyncio event loops (and their socket pairs) of its own unclosed.
pytestmark = [pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
              pytest.mark.usefixtures("loopback_only")]
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]


def gemini(llm_backend, **kwargs):
    return litellm.completion(model="gemini/gemini-2.5-flash", api_base=llm_backend.root_url + "/v1beta",
                              api_key="test-key", **kwargs)


def test_openai_call_is_translated_to_generate_content(llm_backend) -> None:
    response = gemini(llm_backend, messages=[{"role": "system", "content": "Be brief."},
                                             {"role": "user", "content": "Hi!"}], max_tokens=6, stop=["never"])
    assert response.usage.completion_tokens == 6
    (sent,) = llm_backend.assert_requests(1, status=200)
    assert (sent.api, sent.model) == ("gemini.generate_content", "gemini-2.5-flash")
    # the gateway's translation, as the backend received it
    assert sent.body["system_instruction"]["parts"][0]["text"] == "Be brief."
    assert sent.body["contents"][-1] == {"role": "user", "parts": [{"text": "Hi!"}]}
    assert sent.body["generationConfig"]["max_output_tokens"] == 6


def test_streams_and_tool_calls_come_back_in_openai_format(llm_backend) -> None:
    llm_backend.reply_with("one two three", ToolCall("get_weather", {"city": "Oslo"}))
    chunks = gemini(llm_backend, messages=[{"role": "user", "content": "Count"}], stream=True)
    assert "".join(chunk.choices[0].delta.content or "" for chunk in chunks) == "one two three"
    called = gemini(llm_backend, messages=[{"role": "user", "content": "Weather?"}], tools=TOOLS)
    call = called.choices[0].message.tool_calls[0]
    assert call.function.name == "get_weather" and call.function.arguments == '{"city": "Oslo"}'


def test_the_gateway_retries_a_throttled_gemini(llm_backend) -> None:
    llm_backend.add_fault("rate_limit", times=1, retry_after=0.1)
    response = gemini(llm_backend, messages=[{"role": "user", "content": "Hi"}], max_tokens=3, num_retries=2)
    assert response.usage.completion_tokens == 3
    assert [record.status for record in llm_backend.requests] == [429, 200]


def test_a_throttled_gemini_falls_back_to_openai(llm_backend_factory) -> None:
    google = llm_backend_factory(model="gemini-2.5-flash")
    openai_format = llm_backend_factory(model="gpt-sim")
    google.add_fault("rate_limit")
    router = litellm.Router(model_list=[
        {"model_name": "gemini", "litellm_params": {"model": "gemini/gemini-2.5-flash",
                                                    "api_base": google.root_url + "/v1beta", "api_key": "k"}},
        {"model_name": "openai", "litellm_params": {"model": "openai/gpt-sim", "api_base": openai_format.base_url,
                                                    "api_key": "sk-test"}},
    ], fallbacks=[{"gemini": ["openai"]}], num_retries=0)
    response = router.completion(model="gemini", messages=[{"role": "user", "content": "Hi"}], max_tokens=4)
    assert response.usage.completion_tokens == 4
    google.assert_requests(1, status=429)
    openai_format.assert_requests(1, status=200, model="gpt-sim")
