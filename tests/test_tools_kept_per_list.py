"""An agent sends the same tools with every request: each API keeps them per list (issue 29). Through each
API's official SDK, the same tools twice answer alike (a call that follows the schema, the same prompt
count), and a list with a bad tool is refused every time, in the API's own error shape, naming the field."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import botocore.config
import botocore.exceptions
import jsonschema
import openai
import pytest
from google import genai
from google.genai import errors, types

from pytest_llmsim import LLMBackend

# How pydantic writes an optional field: a null in the schema (the case that was written anew every request)
PARAMS: dict[str, Any] = {"type": "object", "properties": {
    "query": {"type": "string"}, "since": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None}},
    "required": ["query"]}
PROMPT = "Look something up for the load test."


def _twice(send: Any) -> list[tuple[dict[str, Any], int]]:
    """``send()`` twice: each time the call's arguments and the prompt's token count."""
    answers = [send(), send()]
    for arguments, _ in answers:
        jsonschema.validate(arguments, PARAMS)
    assert answers[0][1] == answers[1][1] > 0  # the kept tools' text counts the same
    return answers


def test_openai_chat_and_responses(llm_backend: LLMBackend) -> None:
    client = openai.OpenAI(base_url=llm_backend.base_url, api_key="sk-test", max_retries=0)
    tools: list[Any] = [{"type": "function", "function": {"name": "lookup", "parameters": PARAMS}}]

    def chat() -> tuple[dict[str, Any], int]:
        answer = client.chat.completions.create(model="llmsim", messages=[{"role": "user", "content": PROMPT}],
                                                tools=tools, tool_choice="required", max_tokens=200)
        call = answer.choices[0].message.tool_calls[0]  # type: ignore[index]
        return json.loads(call.function.arguments), answer.usage.prompt_tokens  # type: ignore[union-attr]

    def responses() -> tuple[dict[str, Any], int]:
        answer = client.responses.create(model="llmsim", input=PROMPT, tool_choice="required", tools=[
            {"type": "function", "name": "lookup", "parameters": PARAMS, "strict": False}], store=False)
        call = next(item for item in answer.output if item.type == "function_call")
        return json.loads(call.arguments), answer.usage.input_tokens  # type: ignore[union-attr]

    _twice(chat)
    _twice(responses)
    bad = [*tools, {"type": "function", "function": {"name": "not a name!", "parameters": PARAMS}}]
    for _ in range(2):
        with pytest.raises(openai.BadRequestError) as refused:
            client.chat.completions.create(model="llmsim", messages=[{"role": "user", "content": PROMPT}], tools=bad)
        assert refused.value.body["param"] == "tools[1].function.name"  # type: ignore[index]


def test_anthropic_messages(llm_backend: LLMBackend) -> None:
    claude = anthropic.Anthropic(base_url=llm_backend.root_url, api_key="sk-ant-test", max_retries=0)
    tools: list[Any] = [{"name": "lookup", "input_schema": PARAMS}]

    def send() -> tuple[dict[str, Any], int]:
        answer = claude.messages.create(model="claude-sonnet-5-5", max_tokens=200, tools=tools,
                                        tool_choice={"type": "any"}, messages=[{"role": "user", "content": PROMPT}])
        call = next(block for block in answer.content if block.type == "tool_use")
        return call.input, answer.usage.input_tokens  # type: ignore[return-value]

    _twice(send)
    for _ in range(2):
        with pytest.raises(anthropic.BadRequestError) as refused:
            claude.messages.create(model="claude-sonnet-5-5", max_tokens=16, tools=[*tools, {"name": "no_schema"}],
                                   messages=[{"role": "user", "content": PROMPT}])
        assert refused.value.body["error"]["type"] == "invalid_request_error"  # type: ignore[index]
        assert "tools.1.input_schema" in refused.value.body["error"]["message"]  # type: ignore[index]


def test_gemini(llm_backend: LLMBackend) -> None:
    client = genai.Client(api_key="test-key", http_options=types.HttpOptions(base_url=llm_backend.root_url))
    lookup = types.FunctionDeclaration(name="lookup", parameters_json_schema=PARAMS)
    forced = types.ToolConfig(function_calling_config=types.FunctionCallingConfig(
        mode=types.FunctionCallingConfigMode.ANY))

    def send() -> tuple[dict[str, Any], int]:
        answer = client.models.generate_content(model="gemini-2.5-flash", contents=PROMPT, config=types.
                                                GenerateContentConfig(tools=[types.Tool(
                                                    function_declarations=[lookup])], tool_config=forced))
        assert answer.function_calls is not None and answer.usage_metadata is not None
        return answer.function_calls[0].args, answer.usage_metadata.prompt_token_count  # type: ignore[return-value]

    try:
        _twice(send)
        bad = types.Tool(function_declarations=[lookup, types.FunctionDeclaration(name="not a name!")])
        for _ in range(2):
            with pytest.raises(errors.ClientError) as refused:
                client.models.generate_content(model="gemini-2.5-flash", contents=PROMPT,
                                               config=types.GenerateContentConfig(tools=[bad]))
            assert refused.value.code == 400 and refused.value.status == "INVALID_ARGUMENT"
            assert "tools[0].functionDeclarations[1].name" in str(refused.value.message)
    finally:
        client.close()


def test_bedrock_converse(bedrock: Any) -> None:
    tools: list[Any] = [{"toolSpec": {"name": "lookup", "inputSchema": {"json": PARAMS}}}]

    def send() -> tuple[dict[str, Any], int]:
        answer = bedrock.converse(modelId="llmsim", messages=[{"role": "user", "content": [{"text": PROMPT}]}],
                                  toolConfig={"tools": tools, "toolChoice": {"any": {}}},
                                  inferenceConfig={"maxTokens": 200})
        call = next(block["toolUse"] for block in answer["output"]["message"]["content"] if "toolUse" in block)
        return call["input"], answer["usage"]["inputTokens"]

    _twice(send)
    bad = [*tools, {"toolSpec": {"name": "other", "inputSchema": {"json": "not an object"}}}]
    for _ in range(2):
        with pytest.raises(botocore.exceptions.ClientError) as refused:
            bedrock.converse(modelId="llmsim", messages=[{"role": "user", "content": [{"text": PROMPT}]}],
                             toolConfig={"tools": bad})
        assert refused.value.response["Error"]["Code"] == "ValidationException"
        assert "toolConfig.tools.1.toolSpec" in refused.value.response["Error"]["Message"]
