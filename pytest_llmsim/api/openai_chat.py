"""OpenAI chat completions, ``POST /v1/chat/completions``: parse a body, render answers.

Messages are reduced to role, text and name (text parts only; an assistant
message with ``tool_calls`` and no content counts its calls as text);
``tools`` are counted as their JSON text; ``tool_choice`` other than ``none``
and ``auto`` is refused, since the simulated model answers with text.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from ..sim import ChatMessage, GenerationRequest, invalid
from .openai_common import OpenAIErrors, OpenAIStream, common_fields, envelope, generation_usage
from .validation import expect_object, optional

if TYPE_CHECKING:
    from ..simulator import Generation

__all__ = ["OPENAI_CHAT", "OpenAIChat", "parse_chat"]

CHAT_ROLES = ("system", "developer", "user", "assistant", "tool", "function")


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


def parse_chat(body: Any) -> GenerationRequest:
    """Validate a ``POST /v1/chat/completions`` body."""
    body = expect_object(body)
    if "messages" not in body:
        raise invalid("Missing required parameter: 'messages'.", "messages", "missing_required_parameter")
    messages = body["messages"]
    if not isinstance(messages, list):
        raise invalid("Invalid type for 'messages': expected an array.", "messages", "invalid_type")
    if not messages:
        raise invalid("Invalid 'messages': empty array. Expected an array with minimum length 1.",
                      "messages", "empty_array")
    parsed_messages = [_chat_message(i, m) for i, m in enumerate(messages)]
    tools = optional(body, "tools", lambda v: isinstance(v, list), "an array")
    for i, tool in enumerate(tools or []):
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise invalid(f"Invalid 'tools[{i}]': expected {{'type': 'function', 'function': {{'name': ...}}}}.",
                          f"tools[{i}]", "invalid_value")
    tool_choice = body.get("tool_choice")
    if tool_choice not in (None, "none", "auto"):
        raise invalid("Only tool_choice 'none' and 'auto' are simulated; pytest-llmsim answers with text.",
                      "tool_choice", "unsupported_value")
    common = common_fields(body, "chat")
    return GenerationRequest(kind="chat", messages=parsed_messages,
                         tools_text=json.dumps(tools) if tools else "", **common)



def _choice(index: int, text: str, finish: str | None) -> dict[str, Any]:
    return {"index": index, "delta": {"content": text} if finish is None else {}, "finish_reason": finish}


class _ChatStream(OpenAIStream):
    def opening(self, index: int) -> bytes:
        """The role event every choice starts with."""
        return self.event({"index": index, "delta": {"role": "assistant", "content": ""}, "finish_reason": None})


class OpenAIChat(OpenAIErrors):
    """The chat completions API."""

    name = "openai.chat"
    id_prefix = "chatcmpl-"

    def parse(self, body: Any) -> GenerationRequest:
        return parse_chat(body)

    def response_body(self, generation: Generation, response_id: str) -> dict[str, Any]:
        body = envelope(response_id, "chat.completion", generation.request.model, None)
        body["choices"] = [
            {"index": i, "message": {"role": "assistant", "content": text, "refusal": None, "annotations": []},
             "logprobs": None, "finish_reason": output.finish_reason}
            for i, (text, output) in enumerate(zip(generation.texts(), generation.outputs))
        ]
        body["usage"] = generation_usage(generation)
        body["service_tier"] = "default"
        return body

    def stream(self, generation: Generation, response_id: str) -> _ChatStream:
        return _ChatStream(generation, response_id, "chat.completion.chunk", _choice)


OPENAI_CHAT = OpenAIChat()
