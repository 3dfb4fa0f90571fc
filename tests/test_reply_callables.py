"""Answers from Python: ``llm_backend.on(...).reply(callable)`` answers each matching request with what the callable
returns for it, through every API."""

from __future__ import annotations

import json

import anthropic
import openai
import pytest

from pytest_llmsim import ErrorReply, GenerationRequest, LLMBackend, RemoteBackend, ToolCall

WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "The weather in a city",
                                            "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                           "required": ["city"]}}}


def test_a_callable_answers_each_request_from_what_it_asked(llm_backend: LLMBackend) -> None:
    seen: list[tuple[str, str, str]] = []

    def answer(request: GenerationRequest) -> str:
        seen.append((request.api, request.model, request.messages[-1].content))
        return f"you said {request.messages[-1].content!r} to {request.model}"

    rule = llm_backend.on(prompt="^echo").reply(answer)
    client = openai.OpenAI(base_url=llm_backend.base_url, api_key="test")
    first = client.chat.completions.create(model="llmsim", messages=[{"role": "user", "content": "echo one"}])
    second = client.chat.completions.create(model="other", messages=[{"role": "user", "content": "echo two"}])
    unmatched = client.chat.completions.create(model="llmsim", max_tokens=4,
                                               messages=[{"role": "user", "content": "no rule"}])

    assert first.choices[0].message.content == "you said 'echo one' to llmsim"
    assert second.choices[0].message.content == "you said 'echo two' to other"
    assert unmatched.choices[0].message.content != "" and "you said" not in unmatched.choices[0].message.content
    assert seen == [("openai.chat", "llmsim", "echo one"), ("openai.chat", "other", "echo two")]
    assert rule.hits == 2
    assert [record.rule for record in llm_backend.requests] == [rule.name, rule.name, None]
    assert llm_backend.rules[0].to_json()["callable"].endswith("answer")


def test_an_agent_loop_scripted_by_a_callable_over_anthropic(llm_backend: LLMBackend) -> None:
    """A tool call first, then an answer that reads the tool's result: the callable sees the turn."""

    def agent(request: GenerationRequest) -> str | ToolCall:
        if request.after_tool_result:
            return f"It is {request.messages[-1].content} there."
        return ToolCall("get_weather", {"city": "Paris"})

    llm_backend.on(api="messages").reply(agent)
    client = anthropic.Anthropic(base_url=llm_backend.root_url, api_key="test")
    tools = [{"name": "get_weather", "description": "The weather in a city",
              "input_schema": WEATHER["function"]["parameters"]}]  # type: ignore[index]
    messages: list[dict[str, object]] = [{"role": "user", "content": "Weather in Paris?"}]
    call = client.messages.create(model="claude-sonnet-4-5", max_tokens=64, tools=tools, messages=messages)
    assert call.stop_reason == "tool_use"
    use = next(block for block in call.content if block.type == "tool_use")
    assert (use.name, use.input) == ("get_weather", {"city": "Paris"})
    messages += [{"role": "assistant", "content": [block.model_dump() for block in call.content]},
                 {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "sunny"}]}]
    final = client.messages.create(model="claude-sonnet-4-5", max_tokens=64, tools=tools, messages=messages)
    assert final.stop_reason == "end_turn"
    assert final.content[0].text == "It is sunny there."  # type: ignore[union-attr]


def test_none_is_the_backends_own_answer_and_times_counts_calls(llm_backend: LLMBackend) -> None:
    answers = iter([None, ErrorReply(429, "slow down"), {"ok": True}])
    llm_backend.on(model="llmsim").reply(lambda request: next(answers), times=3)
    client = openai.OpenAI(base_url=llm_backend.base_url, api_key="test", max_retries=0)
    ask = {"model": "llmsim", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}
    own = client.chat.completions.create(**ask)  # type: ignore[call-overload]
    assert own.usage.completion_tokens == 5 and llm_backend.requests[0].rule is not None
    with pytest.raises(openai.RateLimitError, match="slow down"):
        client.chat.completions.create(**ask)  # type: ignore[call-overload]
    assert json.loads(client.chat.completions.create(**ask).choices[0].message.content or "") == {"ok": True}
    after = client.chat.completions.create(**ask)  # type: ignore[call-overload]  # times=3: spent
    assert after.usage.completion_tokens == 5 and llm_backend.requests[-1].rule is None
    assert llm_backend.rules[0].hits == 3


def test_a_callable_that_fails_or_returns_no_reply_fails_the_test(llm_backend: LLMBackend) -> None:
    llm_backend.on(prompt="divide").reply(lambda request: 1 / 0)
    llm_backend.on(prompt="number").reply(lambda request: 42)
    client = openai.OpenAI(base_url=llm_backend.base_url, api_key="test", max_retries=0)
    for prompt, why in (("divide", "ZeroDivisionError"), ("number", "its callable returned no reply")):
        with pytest.raises(openai.InternalServerError, match=why):
            client.chat.completions.create(model="llmsim", messages=[{"role": "user", "content": prompt}])
    with pytest.raises(ZeroDivisionError):
        llm_backend.check()  # what the fixture's teardown does: the test fails with the callable's error
    llm_backend.reset()  # (forget them, so this test's own teardown passes)


def test_a_callable_cannot_cross_to_a_backend_in_another_process(llm_backend: LLMBackend) -> None:
    remote = RemoteBackend(llm_backend.root_url)
    with pytest.raises(TypeError, match="runs it in the backend's own process"):
        remote.on(prompt="x").reply(lambda request: "no")
    assert llm_backend.rules == []

    def shout(request: GenerationRequest) -> str:
        return request.prompt_text().upper()

    llm_backend.on(prompt="x").reply(shout)  # in process: listed over the control API by its name
    listed = remote.rules[0]
    assert (listed.to_json()["callable"], listed.prompt) == (shout.__qualname__, "x")
