"""Every field of every API's request shape, given a value of each wrong JSON type: a 4xx in the API's shape
(or a 200 where the API takes that type too), never a 500.

Deterministic: each API has a full valid body (tools, tool choices, tool results, system prompts, formats);
every path in it, at every depth, is replaced in turn by each of the JSON types.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from pytest_llmsim import LLMBackend

WRONG_VALUES: tuple[Any, ...] = (None, True, -1, 1.5, "x", [], {}, [1], {"x": 1})
TOOL_SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}

BODIES: dict[str, dict[str, Any]] = {
    "/v1/chat/completions": {
        "model": "m", "max_tokens": 3, "n": 1, "stop": ["z"], "seed": 1, "stream": False,
        "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"},
                     {"role": "assistant", "content": None, "tool_calls": [
                         {"id": "c1", "type": "function", "function": {"name": "w", "arguments": "{}"}}]},
                     {"role": "tool", "tool_call_id": "c1", "content": "sunny"}],
        "tools": [{"type": "function", "function": {"name": "w", "parameters": TOOL_SCHEMA}}],
        "tool_choice": {"type": "function", "function": {"name": "w"}},
        "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": TOOL_SCHEMA}},
        "logprobs": True, "top_logprobs": 2},
    "/v1/completions": {"model": "m", "prompt": ["a", "b"], "max_tokens": 2, "echo": True, "logprobs": 1,
                        "best_of": 1},
    "/v1/responses": {
        "model": "m", "max_output_tokens": 16, "instructions": "be brief",
        "input": [{"role": "user", "content": [{"type": "input_text", "text": "hi"}]},
                  {"type": "function_call", "call_id": "c1", "name": "w", "arguments": "{}"},
                  {"type": "function_call_output", "call_id": "c1", "output": "sunny"}],
        "tools": [{"type": "function", "name": "w", "parameters": TOOL_SCHEMA}],
        "tool_choice": {"type": "function", "name": "w"},
        "text": {"format": {"type": "json_schema", "name": "x", "schema": TOOL_SCHEMA}},
        "reasoning": {"effort": "low"}},
    "/v1/embeddings": {"model": "m", "input": ["a", "b"], "dimensions": 8, "encoding_format": "float"},
    "/v1/messages": {
        "model": "claude-sonnet-4-6", "max_tokens": 2048, "system": [{"type": "text", "text": "be brief"}],
        "messages": [{"role": "user", "content": "hi"},
                     {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "w", "input": {}}]},
                     {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "sunny"}]}],
        "tools": [{"name": "w", "input_schema": TOOL_SCHEMA}], "tool_choice": {"type": "auto"},
        "stop_sequences": ["z"], "metadata": {"user_id": "u"}, "thinking": {"type": "enabled", "budget_tokens": 1024}},
    "/v1beta/models/m:generateContent": {
        "systemInstruction": {"parts": [{"text": "be brief"}]},
        "contents": [{"role": "user", "parts": [{"text": "hi"}]},
                     {"role": "model", "parts": [{"functionCall": {"name": "w", "args": {"city": "P"}}}]},
                     {"role": "user", "parts": [{"functionResponse": {"name": "w", "response": {"r": "sunny"}}}]}],
        "tools": [{"functionDeclarations": [{"name": "w", "parameters": TOOL_SCHEMA}]}],
        "toolConfig": {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["w"]}},
        "generationConfig": {"maxOutputTokens": 8, "stopSequences": ["z"], "candidateCount": 1,
                             "responseMimeType": "application/json", "responseSchema": TOOL_SCHEMA,
                             "thinkingConfig": {"thinkingBudget": 0}}},
    "/model/m/converse": {
        "system": [{"text": "be brief"}],
        "messages": [{"role": "user", "content": [{"text": "hi"}]},
                     {"role": "assistant", "content": [{"toolUse": {"toolUseId": "t1", "name": "w", "input": {}}}]},
                     {"role": "user", "content": [{"toolResult": {"toolUseId": "t1", "content": [{"text": "ok"}],
                                                                  "status": "success"}}]}],
        "inferenceConfig": {"maxTokens": 8, "stopSequences": ["z"], "temperature": 0.5},
        "toolConfig": {"tools": [{"toolSpec": {"name": "w", "inputSchema": {"json": TOOL_SCHEMA}}}],
                       "toolChoice": {"tool": {"name": "w"}}}},
    "/model/m/invoke": {"anthropic_version": "bedrock-2023-05-31", "max_tokens": 8,
                        "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]},
    "/v2/chat": {
        "model": "command-r", "max_tokens": 8,
        "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"},
                     {"role": "assistant", "tool_plan": "call w", "tool_calls": [
                         {"id": "c1", "type": "function", "function": {"name": "w", "arguments": "{}"}}]},
                     {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "ok"}]}],
        "tools": [{"type": "function", "function": {"name": "w", "parameters": TOOL_SCHEMA}}],
        "stop_sequences": ["z"], "response_format": {"type": "json_object"}},
    "/v2/embed": {"model": "embed-v4.0", "texts": ["a"], "input_type": "search_query", "embedding_types": ["float"]},
    "/v2/rerank": {"model": "rerank-v3.5", "query": "q", "documents": ["a", "b"], "top_n": 1},
    "/api/chat": {"model": "m", "stream": False, "options": {"num_predict": 3, "stop": ["z"], "seed": 1},
                  "messages": [{"role": "user", "content": "hi"}],
                  "tools": [{"type": "function", "function": {"name": "w", "parameters": TOOL_SCHEMA}}],
                  "format": TOOL_SCHEMA, "keep_alive": "5m"},
    "/api/generate": {"model": "m", "stream": False, "prompt": "hi", "system": "s", "options": {"num_predict": 3}},
    "/api/embed": {"model": "m", "input": ["a"], "dimensions": 4},
    "/openai/deployments/d/chat/completions?api-version=2024-10-21": {
        "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3},
}


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every path into ``value``, parents before children."""
    if isinstance(value, dict):
        items: Iterator[tuple[Any, Any]] = iter(value.items())
    elif isinstance(value, list):
        items = iter(enumerate(value))
    else:
        return
    for key, child in items:
        yield (*prefix, key)
        yield from _paths(child, (*prefix, key))


def _replaced(body: dict[str, Any], path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    changed = copy.deepcopy(body)
    target: Any = changed
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return changed


@pytest.mark.parametrize("route", list(BODIES))
def test_no_field_of_any_type_is_a_500(llm_backend: LLMBackend, route: str) -> None:
    llm_backend.configure(speed=float("inf"), ttft=0.0, itl=0.0)
    body = BODIES[route]
    url = llm_backend.root_url + route
    with httpx.Client(timeout=30) as client:
        assert client.post(url, json=body).status_code == 200, client.post(url, json=body).text  # the base is valid
        failures = []
        for path in _paths(body):
            for value in WRONG_VALUES:
                answer = client.post(url, json=_replaced(body, path, value))
                if answer.status_code >= 500:
                    failures.append(f"{'.'.join(map(str, path))} = {value!r}: {answer.text[:160]}")
    assert not failures, "\n".join(failures)
