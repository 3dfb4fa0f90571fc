"""OpenAI chat completions, ``POST /v1/chat/completions``: parse a body, render answers.

Messages are reduced to role, text and name (text parts only; an assistant
message with ``tool_calls`` and no content counts its calls as text);
``tools`` are counted as their JSON text, and answered by the tool rules of
:mod:`pytest_llmsim.content.tools` (``message.tool_calls``; streamed, the
first delta of a call carries its id, type and name, later ones only
argument fragments); ``response_format`` asks for JSON.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from ..sim import ChatMessage, GenerationRequest, invalid
from ..sim.request import ReasoningAsk
from ..sim.tokens import PlannedCall, PlannedOutput
from .base import NO_TARGET, RequestTarget
from .field_policy import FieldPolicy
from .openai_common import (
    OpenAIContentFilter,
    OpenAIErrors,
    OpenAIStream,
    chat_logprobs,
    common_fields,
    envelope,
    generation_usage,
)
from .tool_fields import openai_output_format, openai_tool_use
from .tools_text import tools_text
from .validation import expect_object

if TYPE_CHECKING:
    from ..sim.generation import Generation

__all__ = ["CHAT_FIELDS", "OPENAI_CHAT", "ChatStream", "OpenAIChat", "call_id", "parse_chat", "tool_calls"]

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


def chat_message(i: int, message: Any) -> ChatMessage:
    """One chat message checked and reduced to role, text and name (``i`` is its place, for errors)."""
    if type(message) is dict:  # the usual message: a system or user text (its field path only for errors)
        content, name = message.get("content"), message.get("name")
        if type(content) is str and name is None and message.get("role") in CHAT_ROLES:
            return ChatMessage(message["role"], content, None)
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


# Every field of openai's CompletionCreateParams (tests/test_field_policy.py walks it), plus vLLM's ignore_eos.
CHAT_FIELDS = FieldPolicy.of(
    honoured=("model", "messages", "max_tokens", "max_completion_tokens", "n", "stop", "seed", "stream",
              "stream_options", "tools", "tool_choice", "parallel_tool_calls", "response_format", "logprobs",
              "top_logprobs", "ignore_eos", "reasoning_effort"),
    no_effect=("temperature", "top_p", "presence_penalty", "frequency_penalty", "user", "logit_bias", "metadata",
               "store", "service_tier", "safety_identifier", "prompt_cache_key", "prompt_cache_retention",
               "prompt_cache_options", "verbosity", "modalities"),
    refused={"audio": "audio output is not simulated", "prediction": "predicted outputs are not simulated",
             "functions": "the deprecated functions are not simulated; use tools",
             "function_call": "the deprecated function_call is not simulated; use tool_choice",
             "web_search_options": "web search is not simulated",
             "moderation": "moderation of the input and output is not simulated"})


def parse_chat(body: Any, fields: FieldPolicy = CHAT_FIELDS) -> GenerationRequest:
    """Validate a ``POST /v1/chat/completions`` body (``fields``: what the serving provider does with each field;
    an OpenAI-compatible provider's own, :mod:`.compatible_chat`)."""
    body = expect_object(body)
    if "messages" not in body:
        raise invalid("Missing required parameter: 'messages'.", "messages", "missing_required_parameter")
    messages = body["messages"]
    if not isinstance(messages, list):
        raise invalid("Invalid type for 'messages': expected an array.", "messages", "invalid_type")
    if not messages:
        raise invalid("Invalid 'messages': empty array. Expected an array with minimum length 1.",
                      "messages", "empty_array")
    parsed_messages = [chat_message(i, m) for i, m in enumerate(messages)]
    tool_use = openai_tool_use(body, flat=False)
    output_format = openai_output_format(body)
    common = common_fields(body, "chat")
    tools = body.get("tools")
    return GenerationRequest(kind="chat", messages=parsed_messages, tools_text=tools_text(tools),
                             tool_use=tool_use, output_format=output_format, ignored_fields=fields.check(body),
                             run_to_limit=body.get("ignore_eos") is True, reasoning=_reasoning_effort(body), **common)


REASONING_EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh")


def _reasoning_effort(body: dict[str, Any]) -> ReasoningAsk | None:
    """``reasoning_effort``: the answer starts with hidden thinking of that effort's length."""
    effort = body.get("reasoning_effort")
    if effort is None:
        return None
    if effort not in REASONING_EFFORTS:
        raise invalid(f"Invalid value: {effort!r}. Supported values are: {', '.join(map(repr, REASONING_EFFORTS))}.",
                      "reasoning_effort", "invalid_value")
    return ReasoningAsk(effort=effort, param="reasoning_effort")



def _choice(index: int, text: str, finish: str | None) -> dict[str, Any]:
    return {"index": index, "delta": {"content": text} if finish is None else {}, "finish_reason": finish}


def call_id(call: PlannedCall) -> str:
    return "call_" + call.key


def tool_calls(output: PlannedOutput) -> list[dict[str, Any]]:
    """``message.tool_calls`` of a complete answer."""
    return [{"id": call_id(call), "type": "function", "function": {"name": call.name, "arguments": call.arguments}}
            for call in output.calls]


class ChatStream(OpenAIStream):
    def opening(self, index: int) -> bytes:
        """The role event every choice starts with (no content yet when the answer calls tools)."""
        content = None if self._generation.outputs[index].calls else ""
        return self.event({"index": index, "delta": {"role": "assistant", "content": content},
                           "finish_reason": None})

    def token_choice(self, index: int, position: int, piece: str) -> dict[str, Any]:
        """A call's first token carries its index, id, type and name; later ones only index and arguments:
        the SDK concatenates every string it sees, so repeating the id or name would corrupt the call."""
        generation = self._generation
        output = generation.outputs[index]
        if output.calls:
            number, call = output.call_at(position)
            delta: dict[str, Any] = {"index": number, "function": {"arguments": piece}}
            if position == call.start:
                delta = {"index": number, "id": call_id(call), "type": "function",
                         "function": {"name": call.name, "arguments": piece}}
            choice: dict[str, Any] = {"index": index, "delta": {"tool_calls": [delta]}, "finish_reason": None}
        else:
            choice = _choice(index, piece, None)
        if generation.request.logprobs is not None:
            choice["logprobs"] = chat_logprobs(generation.logprobs(index, position, position + 1))
        return choice


class OpenAIChat(OpenAIContentFilter, OpenAIErrors):
    """The chat completions API."""

    name = "openai.chat"
    id_prefix = "chatcmpl-"

    def parse(self, body: Any, target: RequestTarget = NO_TARGET) -> GenerationRequest:
        return parse_chat(body)

    def response_body(self, generation: Generation, response_id: str) -> dict[str, Any]:
        body = envelope(response_id, "chat.completion", generation.request.model, None)
        want_logprobs = generation.request.logprobs is not None
        choices = []
        for i, (text, output) in enumerate(zip(generation.texts(), generation.outputs)):
            message: dict[str, Any] = {"role": "assistant", "content": None if output.calls else text,
                                       "refusal": None, "annotations": []}
            if output.calls:
                message["tool_calls"] = tool_calls(output)
            logprobs = chat_logprobs(generation.logprobs(i, 0, output.length)) if want_logprobs else None
            choices.append({"index": i, "message": message, "logprobs": logprobs,
                            "finish_reason": output.finish_reason})
        body["choices"] = choices
        body["usage"] = generation_usage(generation)
        body["service_tier"] = "default"
        return body

    def stream(self, generation: Generation, response_id: str) -> ChatStream:
        return ChatStream(generation, response_id, "chat.completion.chunk", _choice)


OPENAI_CHAT = OpenAIChat()

# Its route, /v1/chat/completions, is shared with the OpenAI-compatible providers: see .chat_providers.
