"""Reasoning through OpenAI's APIs and Ollama's: the Responses API's reasoning items and summaries, chat's
``reasoning_effort``, Ollama's ``think``; the thinking takes decode time and counts as output, and an SDK that
sends reasoning items back (store=False agents) is answered."""

from __future__ import annotations

from typing import Any

import httpx
import ollama
import openai
import pytest

from pytest_llmsim import LLMBackend

TOOLS: Any = [{"type": "function", "name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}]


@pytest.fixture
def client(llm_backend: LLMBackend) -> Any:
    made = openai.OpenAI(base_url=llm_backend.base_url, api_key="sk-test", max_retries=0)
    yield made
    made.close()


def test_a_reasoning_item_comes_first_and_its_tokens_are_counted(llm_backend: LLMBackend, client: Any) -> None:
    answer = client.responses.create(model="o4-mini", input="hi", reasoning={"effort": "low"}, max_output_tokens=2000)
    reasoning, message = answer.output
    assert (reasoning.type, message.type, answer.status) == ("reasoning", "message", "completed")
    assert reasoning.summary == [] and answer.output_text  # no summary asked: none shown
    details = answer.usage.output_tokens_details
    assert 32 <= details.reasoning_tokens <= 64 < answer.usage.output_tokens  # low effort: 32 to 64
    assert answer.usage.output_tokens == llm_backend.requests[-1].completion_tokens
    assert answer.reasoning.effort == "low"


def test_more_effort_thinks_longer(llm_backend: LLMBackend, client: Any) -> None:
    tokens = [client.responses.create(model="o3", input="hi", reasoning={"effort": effort},
                                      max_output_tokens=4000).usage.output_tokens_details.reasoning_tokens
              for effort in ("minimal", "low", "medium", "high")]
    assert tokens == sorted(tokens) and tokens[0] < tokens[-1]


def test_a_streamed_summary_and_encrypted_content(llm_backend: LLMBackend, client: Any) -> None:
    with client.responses.stream(model="o4-mini", input="hi", reasoning={"effort": "low", "summary": "auto"},
                                 include=["reasoning.encrypted_content"], max_output_tokens=2000) as stream:
        deltas = [event.delta for event in stream if event.type == "response.reasoning_summary_text.delta"]
        final = stream.get_final_response()
    reasoning = final.output[0]
    assert reasoning.summary[0].text == "".join(deltas) and deltas
    assert reasoning.encrypted_content
    sent_back = client.responses.create(model="o4-mini", store=False, reasoning={"effort": "low"}, input=[
        {"role": "user", "content": "hi"}, *[item.model_dump(exclude_none=True) for item in final.output],
        {"role": "user", "content": "and then?"}], max_output_tokens=2000)
    assert sent_back.status == "completed"


def test_reasoning_then_a_tool_call_streams_in_order(llm_backend: LLMBackend, client: Any) -> None:
    with client.responses.stream(model="o4-mini", input="Weather in Paris?", tools=TOOLS,
                                 reasoning={"effort": "low"}) as stream:
        added = [(event.output_index, event.item.type) for event in stream
                 if event.type == "response.output_item.added"]
        final = stream.get_final_response()
    assert added == [(0, "reasoning"), (1, "function_call")]
    assert [item.type for item in final.output] == ["reasoning", "function_call"]


def test_thinking_that_takes_all_of_max_output_tokens_is_incomplete(llm_backend: LLMBackend, client: Any) -> None:
    answer = client.responses.create(model="o3", input="hi", reasoning={"effort": "high"}, max_output_tokens=20)
    assert answer.status == "incomplete" and answer.incomplete_details.reason == "max_output_tokens"
    assert [item.type for item in answer.output] == ["reasoning"]
    assert answer.usage.output_tokens_details.reasoning_tokens == 20


def test_chat_reasoning_effort_is_hidden_thinking(llm_backend: LLMBackend, client: Any) -> None:
    llm_backend.configure(itl=0.01, speed=float("inf"))
    plain = client.chat.completions.create(model="o4-mini", messages=[{"role": "user", "content": "hi"}],
                                           max_completion_tokens=900)
    thinking = client.chat.completions.create(model="o4-mini", messages=[{"role": "user", "content": "hi"}],
                                              max_completion_tokens=900, reasoning_effort="medium")
    details = thinking.usage.completion_tokens_details
    assert plain.usage.completion_tokens_details.reasoning_tokens == 0
    assert 96 <= details.reasoning_tokens <= 192 and thinking.usage.completion_tokens == 900
    assert len(thinking.choices[0].message.content) < len(plain.choices[0].message.content)
    stream = client.chat.completions.create(model="o4-mini", messages=[{"role": "user", "content": "hi"}],
                                            max_completion_tokens=900, reasoning_effort="medium", stream=True,
                                            stream_options={"include_usage": True})
    chunks = list(stream)
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert streamed == thinking.choices[0].message.content  # the thinking is never shown, only timed
    assert chunks[-1].usage.completion_tokens_details.reasoning_tokens == details.reasoning_tokens
    record = llm_backend.requests[-1]
    assert record.ttft is not None and record.ttft == pytest.approx(0.0)  # the first token (of thinking) is at once
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model="o4-mini", messages=[{"role": "user", "content": "hi"}],
                                       reasoning_effort="extreme")
    assert refused.value.param == "reasoning_effort"


@pytest.mark.parametrize(("reasoning", "param"), [({"effort": "extreme"}, "reasoning.effort"),
                                                  ({"summary": "long"}, "reasoning.summary"),
                                                  ({"budget": 3}, "reasoning.budget")])
def test_bad_reasoning_is_a_400_naming_the_field(llm_backend: LLMBackend, reasoning: Any, param: str) -> None:
    answer = httpx.post(llm_backend.url_for("/v1/responses"), json={"model": "o3", "input": "hi",
                                                                    "reasoning": reasoning})
    assert answer.status_code == 400 and answer.json()["error"]["param"] == param


def test_ollama_think_shows_the_thinking(llm_backend: LLMBackend) -> None:
    client = ollama.Client(host=llm_backend.root_url)
    answer = client.chat(model="qwen3", messages=[{"role": "user", "content": "hi"}], think=True, stream=False,
                         options={"num_predict": 500})
    assert answer.message.thinking and answer.message.content and answer.eval_count == 500
    parts = list(client.chat(model="qwen3", messages=[{"role": "user", "content": "hi"}], think="low", stream=True,
                             options={"num_predict": 200}))
    thinking = [part for part in parts if part.message.thinking]
    assert 32 <= len(thinking) <= 64 and parts.index(thinking[-1]) < parts.index(
        next(part for part in parts if part.message.content))  # the thinking comes first
    generated = client.generate(model="qwen3", prompt="hi", think=True, stream=False)
    assert generated.thinking
    follow_up = client.chat(model="qwen3", stream=False, messages=[
        {"role": "user", "content": "hi"}, {"role": "assistant", "content": "x", "thinking": "y"},
        {"role": "user", "content": "more"}])
    assert follow_up.message.content
    client._client.close()
