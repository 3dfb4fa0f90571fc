"""How-to: test a gateway that translates OpenAI-format calls to Anthropic's Messages API.

LiteLLM's ``anthropic/`` provider turns an OpenAI-style ``completion()`` into a
``POST /v1/messages``; pointing its ``api_base`` at a backend's ``root_url``
shows exactly what the gateway sent. A second test falls back from an
overloaded (529) Anthropic backend to an OpenAI-format one.
"""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
litellm = pytest.importorskip("litellm")

# LiteLLM leaves asyncio event loops (and their socket pairs) of its own unclosed.
pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")


def test_openai_call_is_translated_to_messages(llm_backend) -> None:
    response = litellm.completion(
        model="anthropic/claude-sim", api_base=llm_backend.root_url, api_key="sk-ant-test",
        messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi!"}],
        max_tokens=6, stop=["never-seen"])

    assert response.choices[0].message.content
    assert response.usage.completion_tokens == 6
    (sent,) = llm_backend.assert_requests(1, path="/v1/messages", status=200)
    assert sent.api == "anthropic.messages"
    # the gateway's translation, as the backend received it
    assert sent.body["system"] in ("Be brief.", [{"type": "text", "text": "Be brief."}])
    assert sent.body["messages"][-1]["role"] == "user"
    assert sent.body["max_tokens"] == 6 and sent.body["stop_sequences"] == ["never-seen"]
    assert sent.headers.get("Anthropic-Version")


def test_overloaded_anthropic_falls_back_to_openai(llm_backend_factory) -> None:
    claude = llm_backend_factory(model="claude-sim")
    gpt = llm_backend_factory(model="gpt-sim")
    claude.add_fault("overloaded", retry_after=0)  # Anthropic's answer to overload: 529

    router = litellm.Router(
        model_list=[
            {"model_name": "claude", "litellm_params": {"model": "anthropic/claude-sim", "api_base": claude.root_url,
                                                        "api_key": "sk-ant-test", "max_retries": 0}},
            {"model_name": "gpt", "litellm_params": {"model": "openai/gpt-sim", "api_base": gpt.base_url,
                                                     "api_key": "sk-test", "max_retries": 0}},
        ],
        fallbacks=[{"claude": ["gpt"]}],
        num_retries=0,
    )
    response = router.completion(model="claude", messages=[{"role": "user", "content": "Hi!"}], max_tokens=4)

    assert response.choices[0].message.content and response.usage.completion_tokens == 4
    claude.assert_requests(1, path="/v1/messages", status=529)
    assert claude.metrics.faults == {"overloaded": 1}
    gpt.assert_requests(1, path="/v1/chat/completions", status=200)
