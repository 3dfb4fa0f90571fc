"""How-to: test tool-call pass-through and an agent loop through a gateway.

The backend answers a request that offers tools with a tool call whose
arguments are valid against the tool's JSON Schema (seeded); once the
conversation ends with the tool's result, it answers with text, so an agent
loop always ends. A test can also script the exact call it wants
(``reply_with(ToolCall(...))``) or a rule (``on(prompt=...).reply(...)``).
LiteLLM stays offline with LITELLM_LOCAL_MODEL_COST_MAP=True.
"""

from __future__ import annotations

import json
import os
from typing import Any

import jsonschema
import pytest

from pytest_llmsim import LLMBackend, ToolCall

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
litellm = pytest.importorskip("litellm")

# LiteLLM leaves asyncio event loops (and their socket pairs) of its own unclosed.
pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")

WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "unit": {"enum": ["celsius", "fahrenheit"]}},
    "required": ["city", "unit"],
    "additionalProperties": False,
}
TOOLS: list[dict[str, Any]] = [{"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city", "parameters": WEATHER}}]


def run_tool(name: str, arguments: dict[str, Any]) -> str:
    assert name == "get_weather"
    return json.dumps({"city": arguments["city"], "temperature": 21, "unit": arguments["unit"]})


def test_agent_loop_through_litellm(llm_backend: LLMBackend) -> None:
    messages: list[Any] = [{"role": "user", "content": "What's the weather in Paris?"}]
    for _ in range(5):  # an agent loop: call the model, run the tools it asks for, repeat
        response = litellm.completion(model="openai/agent-model", api_base=llm_backend.base_url, api_key="sk-test",
                                      messages=messages, tools=TOOLS)
        message = response.choices[0].message
        if not message.tool_calls:
            break
        messages.append(message.model_dump())
        for call in message.tool_calls:
            arguments = json.loads(call.function.arguments)
            jsonschema.validate(arguments, WEATHER)  # the gateway passed the call through intact
            messages.append({"role": "tool", "tool_call_id": call.id, "content": run_tool(call.function.name,
                                                                                          arguments)})
    assert message.content and not message.tool_calls  # the loop ended with text
    first, second = llm_backend.requests
    assert first.finish_reasons == ["tool_calls"] and second.finish_reasons == ["stop"]
    assert second.prompt_tokens > first.prompt_tokens  # the call and its result went back to the model


def test_scripted_call_streams_through_litellm(llm_backend: LLMBackend) -> None:
    llm_backend.reply_with(ToolCall("get_weather", {"city": "Oslo", "unit": "celsius"}))
    stream = litellm.completion(model="openai/agent-model", api_base=llm_backend.base_url, api_key="sk-test",
                                messages=[{"role": "user", "content": "Weather in Oslo?"}], tools=TOOLS, stream=True)
    chunks = list(stream)
    rebuilt = litellm.stream_chunk_builder(chunks)
    (call,) = rebuilt.choices[0].message.tool_calls
    assert (call.function.name, json.loads(call.function.arguments)) == ("get_weather",
                                                                          {"city": "Oslo", "unit": "celsius"})


def test_langchain_bind_tools_loop_ends(llm_backend: LLMBackend) -> None:
    langchain_openai = pytest.importorskip("langchain_openai")
    from langchain_core.messages import HumanMessage, ToolMessage

    model = langchain_openai.ChatOpenAI(model="agent-model", base_url=llm_backend.base_url, api_key="sk-test",
                                        max_retries=0).bind_tools(TOOLS)
    history: list[Any] = [HumanMessage("What's the weather in Paris?")]
    for _ in range(5):
        reply = model.invoke(history)
        history.append(reply)
        if not reply.tool_calls:
            break
        for call in reply.tool_calls:
            history.append(ToolMessage(run_tool(call["name"], call["args"]), tool_call_id=call["id"]))
    assert isinstance(reply.content, str) and reply.content and not reply.tool_calls
    assert len(llm_backend.requests) == 2
