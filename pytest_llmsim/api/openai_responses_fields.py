"""Responses API requests: the body's fields, its input items, ``reasoning``, ``include`` and ``background``."""

from __future__ import annotations

import json
import time
from typing import Any

from ..sim import ChatMessage, GenerationRequest, invalid
from ..sim.request import ReasoningAsk
from .field_policy import FieldPolicy
from .openai_common import model_field
from .tool_fields import openai_tool_use, responses_output_format
from .tools_text import tools_text
from .validation import describe, expect_object, is_int, optional, ranged

__all__ = ["RESPONSE_FIELDS", "parse_responses"]

ROLES = ("user", "assistant", "system", "developer")
TEXT_PARTS = ("input_text", "output_text", "text")
TEXT_FORMATS = ("text", "json_object", "json_schema")

def _content_text(content: Any, param: str) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise invalid(f"Invalid type for '{param}': expected a string or an array of content parts, but got "
                      f"{describe(content)}.", param, "invalid_type")
    texts = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind not in TEXT_PARTS:
            raise invalid(f"Content part type {kind!r} is not supported by pytest-llmsim; only text parts "
                          "are simulated.", f"{param}[{j}].type", "unsupported_value")
        if not isinstance(part.get("text"), str):
            raise invalid(f"Invalid '{param}[{j}].text': expected a string.", f"{param}[{j}].text", "invalid_type")
        texts.append(part["text"])
    return "".join(texts)


def _input_messages(value: Any) -> list[ChatMessage]:
    if isinstance(value, str):
        return [ChatMessage("user", value)]
    if not isinstance(value, list):
        raise invalid(f"Invalid type for 'input': expected a string or an array of input items, but got "
                      f"{describe(value)}.", "input", "invalid_type")
    messages = []
    for i, item in enumerate(value):
        param = f"input[{i}]"
        if not isinstance(item, dict):
            raise invalid(f"Invalid type for '{param}': expected an object.", param, "invalid_type")
        kind = item.get("type", "message")
        if kind == "message":
            if item.get("role") not in ROLES:
                raise invalid(f"Invalid value for '{param}.role': expected one of {', '.join(ROLES)}.",
                              f"{param}.role", "invalid_value")
            messages.append(ChatMessage(item["role"], _content_text(item.get("content"), f"{param}.content")))
        elif kind == "function_call":
            messages.append(ChatMessage("assistant", json.dumps({"name": item.get("name"),
                                                                 "arguments": item.get("arguments")})))
        elif kind == "function_call_output":
            output = item.get("output")
            messages.append(ChatMessage("tool", output if isinstance(output, str) else json.dumps(output)))
        elif kind == "reasoning":  # an earlier answer's reasoning, sent back: not counted, as OpenAI drops it
            continue
        else:
            raise invalid(f"Input items of type {kind!r} are not supported by pytest-llmsim; messages, "
                          "function_call, function_call_output and reasoning are.", f"{param}.type",
                          "unsupported_value")
    if not messages:
        raise invalid("Invalid 'input': empty array. Expected an array with minimum length 1.", "input",
                      "empty_array")
    return messages


# Every field of openai's ResponseCreateParams (tests/test_field_policy.py walks it).
RESPONSE_FIELDS = FieldPolicy.of(
    honoured=("model", "input", "instructions", "max_output_tokens", "stream", "store", "previous_response_id",
              "tools", "tool_choice", "parallel_tool_calls", "text", "reasoning", "include", "background"),
    no_effect=("temperature", "top_p", "metadata", "user", "service_tier", "safety_identifier", "prompt_cache_key",
               "prompt_cache_retention", "prompt_cache_options", "stream_options", "truncation", "max_tool_calls",
               "access_programs", "image"),
    refused={"background_options": "completion windows for background responses are not simulated",
             "conversation": "the Conversations API is not simulated; use previous_response_id",
             "prompt": "stored prompt templates are not simulated",
             "context_management": "context management (compaction) is not simulated",
             "top_logprobs": "logprobs are not simulated on responses",
             "moderation": "moderation of the input and output is not simulated"})


def parse_responses(body: Any) -> GenerationRequest:
    """Validate a ``POST /v1/responses`` body."""
    body = expect_object(body)
    model = model_field(body)
    if "input" not in body:
        raise invalid("Missing required parameter: 'input'.", "input", "missing_required_parameter")
    messages = _input_messages(body["input"])
    instructions = optional(body, "instructions", lambda v: isinstance(v, str), "a string")
    preamble = [ChatMessage("system", instructions)] if instructions else []
    max_tokens = optional(body, "max_output_tokens", is_int, "an integer")
    if max_tokens is not None and max_tokens < 1:
        raise invalid(f"Invalid 'max_output_tokens': integer below minimum value. Expected a value >= 1, "
                      f"but got {max_tokens} instead.", "max_output_tokens", "integer_below_min_value")
    stream = bool(optional(body, "stream", lambda v: isinstance(v, bool), "a boolean"))
    store = optional(body, "store", lambda v: isinstance(v, bool), "a boolean")
    previous = optional(body, "previous_response_id", lambda v: isinstance(v, str), "a string")
    temperature = ranged(body, "temperature", 0.0, 2.0)
    top_p = ranged(body, "top_p", 0.0, 1.0)
    tool_use = openai_tool_use(body, flat=True)
    tools = body.get("tools") or []
    tool_choice = body.get("tool_choice", "auto")
    text = optional(body, "text", lambda v: isinstance(v, dict), "an object") or {}
    text_format = text.get("format") or {"type": "text"}
    if not isinstance(text_format, dict) or text_format.get("type") not in TEXT_FORMATS:
        raise invalid(f"Invalid 'text.format': expected a type among {', '.join(TEXT_FORMATS)}.", "text.format",
                      "invalid_value")
    parallel = body.get("parallel_tool_calls")
    output_format = responses_output_format(text_format)
    reasoning, wire_reasoning = _reasoning(body)
    include = optional(body, "include", lambda v: isinstance(v, list) and all(isinstance(i, str) for i in v),
                       "an array of strings") or []
    for name in include:
        if name != "reasoning.encrypted_content":
            raise invalid(f"'include' value {name!r} is not supported by pytest-llmsim; "
                          "'reasoning.encrypted_content' is.", "include", "unsupported_value")
    background = bool(optional(body, "background", lambda v: isinstance(v, bool), "a boolean"))
    if background and store is False:
        raise invalid("Invalid 'background': a background response must be stored; 'store' cannot be false.",
                      "background", "invalid_value")
    wire = {"background": background, "reasoning": wire_reasoning, "encrypted": bool(include),
            "created_at": int(time.time()),
            "instructions": instructions, "max_output_tokens": max_tokens,
            "previous_response_id": previous, "store": store is not False, "temperature": temperature,
            "top_p": top_p, "tools": tools, "tool_choice": tool_choice, "text": {"format": text_format},
            "parallel_tool_calls": parallel is not False, "metadata": body.get("metadata") or {},
            "user": body.get("user")}
    return GenerationRequest(kind="chat", model=model, stream=stream, include_usage=True, max_tokens=max_tokens,
                             n=1, stops=[], seed=None, messages=[*preamble, *messages],
                             tools_text=tools_text(tools), max_tokens_param="max_output_tokens",
                             previous_id=previous, store=store is not False, preamble=len(preamble),
                             prompt_param="input", tool_use=tool_use, output_format=output_format, wire=wire,
                             ignored_fields=RESPONSE_FIELDS.check(body), reasoning=reasoning, background=background)


EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh")
SUMMARIES = ("auto", "concise", "detailed")


def _reasoning(body: dict[str, Any]) -> tuple[ReasoningAsk | None, dict[str, Any]]:
    """``reasoning``: ``effort`` (default medium) and ``summary`` (``auto``, ``concise``, ``detailed``: the
    thinking is shown as a summary); what the answer echoes."""
    value = optional(body, "reasoning", lambda v: isinstance(v, dict), "an object")
    if value is None:
        return None, {"effort": None, "summary": None}
    unknown = sorted(set(value) - {"effort", "summary", "generate_summary"})
    if unknown:
        raise invalid(f"Unknown parameter: 'reasoning.{unknown[0]}'.", f"reasoning.{unknown[0]}", "unknown_parameter")
    effort = value.get("effort") or "medium"
    if effort not in EFFORTS:
        raise invalid(f"Invalid value: {effort!r}. Supported values are: {', '.join(map(repr, EFFORTS))}.",
                      "reasoning.effort", "invalid_value")
    summary = value.get("summary") or value.get("generate_summary")
    if summary is not None and summary not in SUMMARIES:
        raise invalid(f"Invalid value: {summary!r}. Supported values are: {', '.join(map(repr, SUMMARIES))}.",
                      "reasoning.summary", "invalid_value")
    return ReasoningAsk(effort=effort, param="reasoning"), {"effort": effort, "summary": summary}
