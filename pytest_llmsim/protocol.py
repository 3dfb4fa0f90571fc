"""The OpenAI wire format: request validation and response bodies.

Validation turns a JSON body into a :class:`ParsedRequest` or raises
:class:`APIError` shaped as OpenAI shapes errors (``error.message``, ``type``,
``param``, ``code``). Unknown fields are ignored, as vLLM ignores them.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .tokens import ChatMessage

__all__ = [
    "SYSTEM_FINGERPRINT",
    "APIError",
    "ParsedRequest",
    "chat_chunk",
    "chat_response",
    "completion_chunk",
    "completion_response",
    "parse_chat",
    "parse_completion",
    "usage_body",
]

SYSTEM_FINGERPRINT = "fp_llmsim"
CHAT_ROLES = ("system", "developer", "user", "assistant", "tool", "function")
MAX_N = 16
MAX_STOP_SEQUENCES = 4
# Prompts in one completions request (OpenAI caps embeddings inputs at 2048 too);
# each costs n sequences, so this bounds a request before its work is counted.
MAX_PROMPTS = 2048
# JSON nested deeper than this is refused before anything walks it recursively.
MAX_JSON_DEPTH = 128
# An omitted or null completions prompt: the document separator, as the API documents.
DEFAULT_PROMPT = "<|endoftext|>"
UNSUPPORTED_FIELDS = {
    "logprobs": "log probabilities are not simulated",
    "top_logprobs": "log probabilities are not simulated",
    "audio": "audio output is not simulated",
    "prediction": "predicted outputs are not simulated",
}


class APIError(Exception):
    """An error answered as OpenAI answers it."""

    def __init__(self, status: int, message: str, *, type: str = "invalid_request_error",
                 param: str | None = None, code: str | None = None,
                 headers: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.param = param
        self.code = code
        self.headers = dict(headers or {})

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type,
                          "param": self.param, "code": self.code}}


def invalid(message: str, param: str | None, code: str | None = None) -> APIError:
    return APIError(400, message, param=param, code=code)


@dataclass
class ParsedRequest:
    """A validated chat or completions request, reduced to what the simulation uses."""

    kind: str  # "chat" or "completion"
    model: str
    stream: bool
    include_usage: bool
    max_tokens: int | None
    n: int
    stops: list[str]
    seed: int | None
    messages: list[ChatMessage] = field(default_factory=list)
    tools_text: str = ""
    prompts: list[str | list[int]] = field(default_factory=list)
    echo: bool = False
    max_tokens_param: str = "max_tokens"  # the field the client set its limit with
    prompt_defaulted: bool = False  # a null prompt: the document separator token

    @property
    def prompt_param(self) -> str:
        return "messages" if self.kind == "chat" else "prompt"


_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
_NOT_BRACKETS = bytes(sorted(set(range(256)) - set(b"[]{}")))
_INNERMOST_PAIR = re.compile(rb"\[\]|\{\}")


def json_depth_exceeds(data: bytes, limit: int = MAX_JSON_DEPTH) -> bool:
    """True when the JSON text ``data`` (already known to parse) nests deeper than ``limit``.

    No recursion and no walk over the parsed objects: strings are cut out and
    everything but brackets dropped (C speed), then innermost pairs are
    removed one level per pass; brackets left after ``limit`` passes mean a
    deeper nest. A body with few brackets is not looked at.
    """
    if data.count(b"[") + data.count(b"{") <= limit:
        return False
    brackets = _JSON_STRING.sub(b"", data).translate(None, _NOT_BRACKETS)
    for _ in range(limit):
        brackets = _INNERMOST_PAIR.sub(b"", brackets)
        if not brackets:
            return False
    return True


def describe(value: Any) -> str:
    """A short, safe description of a JSON value for an error message (never recursive)."""
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "an array"
    text = json.dumps(value)
    return text if len(text) <= 80 else text[:77] + "..."


# --- field checks ---


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _expect_object(body: Any) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise invalid("The request body must be a JSON object.", None, "invalid_type")
    return body


def _optional(body: dict[str, Any], key: str, check: Any, expected: str) -> Any:
    value = body.get(key)
    if value is not None and not check(value):
        raise invalid(f"Invalid type for '{key}': expected {expected}, but got {describe(value)}.",
                      key, "invalid_type")
    return value


def _range(body: dict[str, Any], key: str, low: float, high: float) -> None:
    value = _optional(body, key, _is_number, "a number")
    if value is not None and not low <= value <= high:
        raise invalid(f"Invalid '{key}': {value} is not between {low:g} and {high:g}.",
                      key, "decimal_out_of_range" if isinstance(value, float) else "integer_out_of_range")


def _common(body: dict[str, Any], kind: str) -> dict[str, Any]:
    model = body.get("model")
    if model is None:
        raise invalid("You must provide a model parameter.", "model", "missing_required_parameter")
    if not isinstance(model, str):  # the spec allows any string, the empty one included
        raise invalid(f"Invalid type for 'model': expected a string, but got {describe(model)}.",
                      "model", "invalid_type")
    for key, reason in UNSUPPORTED_FIELDS.items():
        if body.get(key) not in (None, False, 0):
            raise invalid(f"'{key}' is not supported by pytest-llmsim: {reason}.", key, "unsupported_parameter")
    stream = bool(_optional(body, "stream", lambda v: isinstance(v, bool), "a boolean"))
    options = _optional(body, "stream_options", lambda v: isinstance(v, dict), "an object")
    if options is not None and not stream:
        raise invalid("The 'stream_options' parameter is only allowed when 'stream' is enabled.",
                      "stream_options", "invalid_value")
    include_usage = False
    if options:
        include_usage = bool(_optional(options, "include_usage", lambda v: isinstance(v, bool), "a boolean"))
    max_tokens = None
    max_tokens_param = "max_tokens"
    # The completions spec allows max_tokens 0 (score a prompt with echo); chat needs 1.
    minimum = 1 if kind == "chat" else 0
    for key in (("max_completion_tokens", "max_tokens") if kind == "chat" else ("max_tokens",)):
        value = _optional(body, key, _is_int, "an integer")
        if value is not None and value < minimum:
            raise invalid(f"Invalid '{key}': integer below minimum value. Expected a value >= {minimum}, "
                          f"but got {value} instead.", key, "integer_below_min_value")
        if value is not None and max_tokens is None:
            max_tokens, max_tokens_param = value, key
    n = _optional(body, "n", _is_int, "an integer")
    if n is not None and not 1 <= n <= MAX_N:
        raise invalid(f"Invalid 'n': {n} is not between 1 and {MAX_N}.", "n", "integer_out_of_range")
    _range(body, "temperature", 0.0, 2.0)
    _range(body, "top_p", 0.0, 1.0)
    _range(body, "presence_penalty", -2.0, 2.0)
    _range(body, "frequency_penalty", -2.0, 2.0)
    seed = _optional(body, "seed", _is_int, "an integer")
    _optional(body, "user", lambda v: isinstance(v, str), "a string")
    stop = body.get("stop")
    if stop is None:
        stops: list[str] = []
    elif isinstance(stop, str):
        stops = [stop]
    elif (isinstance(stop, list) and len(stop) <= MAX_STOP_SEQUENCES
          and all(isinstance(s, str) for s in stop)):
        stops = list(stop)
    else:
        raise invalid(f"Invalid 'stop': expected a string or an array of at most "
                      f"{MAX_STOP_SEQUENCES} strings.", "stop", "invalid_type")
    return {"model": model, "stream": stream, "include_usage": include_usage,
            "max_tokens": max_tokens, "max_tokens_param": max_tokens_param, "n": n or 1, "stops": stops,
            "seed": seed}


# --- chat ---


def _message_text(content: Any, param: str) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for j, part in enumerate(content):
            if not isinstance(part, dict) or not isinstance(part.get("type"), str):
                raise invalid(f"Invalid '{param}[{j}]': expected an object with a 'type'.",
                              f"{param}[{j}]", "invalid_type")
            if part["type"] not in ("text", "input_text"):
                raise invalid(f"Content part type '{part['type']}' is not supported by pytest-llmsim; "
                              "only text parts are simulated.", f"{param}[{j}].type", "unsupported_value")
            if not isinstance(part.get("text"), str):
                raise invalid(f"Invalid '{param}[{j}].text': expected a string.",
                              f"{param}[{j}].text", "invalid_type")
            texts.append(part["text"])
        return "".join(texts)
    raise invalid(f"Invalid type for '{param}': expected a string or an array of content parts.",
                  param, "invalid_type")


def _chat_message(i: int, message: Any) -> ChatMessage:
    param = f"messages[{i}]"
    if not isinstance(message, dict):
        raise invalid(f"Invalid type for '{param}': expected an object.", param, "invalid_type")
    role = message.get("role")
    if role not in CHAT_ROLES:
        raise invalid(f"Invalid value for '{param}.role': expected one of {', '.join(CHAT_ROLES)}.",
                      f"{param}.role", "invalid_value")
    content = message.get("content")
    extra = ""
    if content is None:
        if role == "assistant" and (message.get("tool_calls") or message.get("function_call")):
            extra = json.dumps(message.get("tool_calls") or message.get("function_call"))
        else:
            raise invalid(f"Missing required parameter: '{param}.content'.", f"{param}.content",
                          "missing_required_parameter")
    text = "" if content is None else _message_text(content, f"{param}.content")
    name = message.get("name")
    if name is not None and not isinstance(name, str):
        raise invalid(f"Invalid type for '{param}.name': expected a string.", f"{param}.name", "invalid_type")
    return ChatMessage(role, text + extra, name)


def parse_chat(body: Any) -> ParsedRequest:
    """Validate a ``POST /v1/chat/completions`` body."""
    body = _expect_object(body)
    if "messages" not in body:
        raise invalid("Missing required parameter: 'messages'.", "messages", "missing_required_parameter")
    messages = body["messages"]
    if not isinstance(messages, list):
        raise invalid("Invalid type for 'messages': expected an array.", "messages", "invalid_type")
    if not messages:
        raise invalid("Invalid 'messages': empty array. Expected an array with minimum length 1.",
                      "messages", "empty_array")
    parsed_messages = [_chat_message(i, m) for i, m in enumerate(messages)]
    tools = _optional(body, "tools", lambda v: isinstance(v, list), "an array")
    for i, tool in enumerate(tools or []):
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise invalid(f"Invalid 'tools[{i}]': expected {{'type': 'function', 'function': {{'name': ...}}}}.",
                          f"tools[{i}]", "invalid_value")
    tool_choice = body.get("tool_choice")
    if tool_choice not in (None, "none", "auto"):
        raise invalid("Only tool_choice 'none' and 'auto' are simulated; pytest-llmsim answers with text.",
                      "tool_choice", "unsupported_value")
    common = _common(body, "chat")
    return ParsedRequest(kind="chat", messages=parsed_messages,
                         tools_text=json.dumps(tools) if tools else "", **common)


# --- completions ---


def parse_completion(body: Any) -> ParsedRequest:
    """Validate a ``POST /v1/completions`` body."""
    body = _expect_object(body)
    if "prompt" not in body:
        raise invalid("Missing required parameter: 'prompt'.", "prompt", "missing_required_parameter")
    prompt = body["prompt"]
    prompts: list[str | list[int]]
    if prompt is None:  # nullable in the spec, defaulting to the document separator
        prompts = [DEFAULT_PROMPT]
    elif isinstance(prompt, str):
        prompts = [prompt]
    elif isinstance(prompt, list) and prompt and all(_is_int(t) for t in prompt):
        prompts = [list(prompt)]
    elif (isinstance(prompt, list) and prompt
          and all(isinstance(p, str) or (isinstance(p, list) and p and all(_is_int(t) for t in p))
                  for p in prompt)):
        prompts = list(prompt)
    else:
        raise invalid("Invalid 'prompt': expected a string, an array of strings, an array of token "
                      "ids, or an array of token-id arrays (none empty).", "prompt", "invalid_type")
    if len(prompts) > MAX_PROMPTS:
        raise invalid(f"Invalid 'prompt': {len(prompts)} prompts in one request; the limit is {MAX_PROMPTS}.",
                      "prompt", "array_above_max_length")
    echo = bool(_optional(body, "echo", lambda v: isinstance(v, bool), "a boolean"))
    common = _common(body, "completion")
    return ParsedRequest(kind="completion", prompts=prompts, echo=echo, prompt_defaulted=prompt is None,
                         **common)


# --- responses ---


def usage_body(prompt_tokens: int, completion_tokens: int, cached_tokens: int) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "prompt_tokens_details": {"cached_tokens": cached_tokens, "audio_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0,
                                      "accepted_prediction_tokens": 0,
                                      "rejected_prediction_tokens": 0},
    }


def _envelope(response_id: str, obj: str, model: str, created: int | None) -> dict[str, Any]:
    return {"id": response_id, "object": obj, "created": created or int(time.time()),
            "model": model, "system_fingerprint": SYSTEM_FINGERPRINT}


def chat_response(response_id: str, model: str, texts: Sequence[str], finish: Sequence[str],
                  usage: dict[str, Any]) -> dict[str, Any]:
    body = _envelope(response_id, "chat.completion", model, None)
    body["choices"] = [
        {"index": i, "message": {"role": "assistant", "content": text, "refusal": None,
                                 "annotations": []},
         "logprobs": None, "finish_reason": reason}
        for i, (text, reason) in enumerate(zip(texts, finish))
    ]
    body["usage"] = usage
    body["service_tier"] = "default"
    return body


def completion_response(response_id: str, model: str, texts: Sequence[str],
                        finish: Sequence[str], usage: dict[str, Any]) -> dict[str, Any]:
    body = _envelope(response_id, "text_completion", model, None)
    body["choices"] = [
        {"text": text, "index": i, "logprobs": None, "finish_reason": reason}
        for i, (text, reason) in enumerate(zip(texts, finish))
    ]
    body["usage"] = usage
    return body


def chat_chunk(response_id: str, model: str, created: int, choices: list[dict[str, Any]],
               include_usage: bool, usage: dict[str, Any] | None = None) -> dict[str, Any]:
    """One ``chat.completion.chunk``; choices are ``{"index", "delta", "finish_reason"}``."""
    body = _envelope(response_id, "chat.completion.chunk", model, created)
    body["choices"] = [{"logprobs": None, **choice} for choice in choices]
    if include_usage:
        body["usage"] = usage
    return body


def completion_chunk(response_id: str, model: str, created: int, choices: list[dict[str, Any]],
                     include_usage: bool, usage: dict[str, Any] | None = None) -> dict[str, Any]:
    """One streamed ``text_completion``; choices are ``{"index", "text", "finish_reason"}``."""
    body = _envelope(response_id, "text_completion", model, created)
    body["choices"] = [{"logprobs": None, **choice} for choice in choices]
    if include_usage:
        body["usage"] = usage
    return body
