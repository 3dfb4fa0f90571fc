"""OpenAI Responses, ``POST /v1/responses`` (stored ones: ``GET``/``DELETE /v1/responses/{id}``).

Parse: ``input`` as a string or a list of items (messages with
``input_text``/``output_text`` parts; earlier ``function_call`` and
``function_call_output`` items, counted as their text); ``instructions``
(this request's only: not carried along a chain, as OpenAI does);
``max_output_tokens``; ``stream``; ``store`` (default true) and
``previous_response_id``, whose stored conversation goes in front of the
input (so it counts in ``input_tokens`` and in the prefix cache); an unknown
id answers 400 with ``param: "previous_response_id"``. ``text.format``
``json_object``/``json_schema`` asks for JSON; function ``tools`` are
counted as their JSON text and answered by the shared tool rules as
``function_call`` output items (streamed as ``output_item.added``,
``function_call_arguments.delta``/``.done``, ``output_item.done``).

Render: the response object the ``openai`` SDK's types require; streams as
the event sequence its ``responses.stream()`` reads, each event with a rising
``sequence_number``.
"""

from __future__ import annotations

import base64
import json
import time
from json.encoder import encode_basestring_ascii
from typing import TYPE_CHECKING, Any

from ..sim import ChatMessage, GenerationRequest, SimError, invalid, wire_json
from ..sim.request import ReasoningAsk
from ..sim.tokens import PlannedCall
from .base import NO_TARGET, PIECE_MARK, RequestTarget
from .field_policy import FieldPolicy
from .openai_common import OpenAIContentFilter, OpenAIErrors, model_field
from .tool_fields import openai_tool_use, responses_output_format
from .validation import describe, expect_object, is_int, optional, ranged

if TYPE_CHECKING:
    from ..sim.generation import Generation

__all__ = ["OPENAI_RESPONSES", "OpenAIResponses", "parse_responses"]

ROLES = ("user", "assistant", "system", "developer")
TEXT_PARTS = ("input_text", "output_text", "text")
TEXT_FORMATS = ("text", "json_object", "json_schema")
INCOMPLETE_REASONS = {"length": "max_output_tokens", "content_filter": "content_filter"}


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
              "tools", "tool_choice", "parallel_tool_calls", "text", "reasoning", "include"),
    no_effect=("temperature", "top_p", "metadata", "user", "service_tier", "safety_identifier", "prompt_cache_key",
               "prompt_cache_retention", "prompt_cache_options", "stream_options", "truncation", "max_tool_calls",
               "access_programs", "image"),
    refused={"background": "background responses are not simulated yet",
             "background_options": "background responses are not simulated yet",
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
    wire = {"reasoning": wire_reasoning, "encrypted": bool(include), "created_at": int(time.time()),
            "instructions": instructions, "max_output_tokens": max_tokens,
            "previous_response_id": previous, "store": store is not False, "temperature": temperature,
            "top_p": top_p, "tools": tools, "tool_choice": tool_choice, "text": {"format": text_format},
            "parallel_tool_calls": parallel is not False, "metadata": body.get("metadata") or {},
            "user": body.get("user")}
    return GenerationRequest(kind="chat", model=model, stream=stream, include_usage=True, max_tokens=max_tokens,
                             n=1, stops=[], seed=None, messages=[*preamble, *messages],
                             tools_text=json.dumps(tools) if tools else "", max_tokens_param="max_output_tokens",
                             previous_id=previous, store=store is not False, preamble=len(preamble),
                             prompt_param="input", tool_use=tool_use, output_format=output_format, wire=wire,
                             ignored_fields=RESPONSE_FIELDS.check(body), reasoning=reasoning)


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


def _reasoning_item(generation: Generation, response_id: str, done: bool) -> dict[str, Any]:
    """The ``reasoning`` output item: its summary when one was asked, its encrypted content when included."""
    wire, output = generation.request.wire, generation.outputs[0]
    summary = ([{"type": "summary_text", "text": output.reasoning_text}]
               if done and wire["reasoning"]["summary"] else [])
    item: dict[str, Any] = {"id": "rs_" + response_id.removeprefix("resp_"), "type": "reasoning", "summary": summary}
    if wire["encrypted"]:
        item["encrypted_content"] = base64.b64encode(output.reasoning_text.encode()).decode()
    return item


def _item_id(response_id: str) -> str:
    return "msg_" + response_id.removeprefix("resp_")


def _usage(generation: Generation) -> dict[str, Any]:
    prompt, output = generation.prompt_tokens, generation.completion_tokens
    return {"input_tokens": prompt,
            "input_tokens_details": {"cached_tokens": generation.cached_tokens, "cache_write_tokens": 0},
            "output_tokens": output,
            "output_tokens_details": {"reasoning_tokens": min(generation.outputs[0].reasoning, output)},
            "total_tokens": prompt + output}


def _function_call(call: PlannedCall, status: str, arguments: str | None = None) -> dict[str, Any]:
    """A ``function_call`` output item (``fc_…`` id; ``call_id`` is what the tool's output refers to)."""
    return {"id": "fc_" + call.key, "type": "function_call", "call_id": "call_" + call.key, "name": call.name,
            "arguments": call.arguments if arguments is None else arguments, "status": status}


def _text_part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def response_object(generation: Generation, response_id: str, done: bool = True) -> dict[str, Any]:
    """The response object; ``done=False`` gives the in-progress one a stream starts with."""
    wire = generation.request.wire
    reason = generation.outputs[0].finish_reason
    incomplete = done and reason in INCOMPLETE_REASONS
    status = "in_progress" if not done else ("incomplete" if incomplete else "completed")
    output: list[dict[str, Any]] = []
    planned = generation.outputs[0]
    calls = planned.calls
    if done and planned.reasoning:
        output.append(_reasoning_item(generation, response_id, done))
    if done and calls:
        output += [_function_call(call, "incomplete" if incomplete else "completed") for call in calls]
    elif done and planned.length > planned.reasoning:  # not when the thinking took all of max_output_tokens
        output.append({"id": _item_id(response_id), "type": "message", "role": "assistant",
                       "status": "incomplete" if incomplete else "completed",
                       "content": [_text_part(generation.texts()[0])]})
    return {
        "id": response_id, "object": "response", "created_at": wire["created_at"], "status": status,
        "error": None, "incomplete_details": {"reason": INCOMPLETE_REASONS[reason]} if incomplete else None,
        "instructions": wire["instructions"], "max_output_tokens": wire["max_output_tokens"],
        "model": generation.request.model, "output": output, "parallel_tool_calls": wire["parallel_tool_calls"],
        "previous_response_id": wire["previous_response_id"], "reasoning": wire["reasoning"],
        "store": wire["store"], "temperature": wire["temperature"], "text": wire["text"],
        "tool_choice": wire["tool_choice"], "tools": wire["tools"], "top_p": wire["top_p"],
        "truncation": "disabled", "usage": _usage(generation) if done else None, "user": wire["user"],
        "metadata": wire["metadata"],
    }


class _ResponsesStream:
    """``response.created``, ``response.in_progress``, ``output_item.added``, ``content_part.added``,
    an ``output_text.delta`` per token, ``output_text.done``, ``content_part.done``,
    ``output_item.done``, then ``response.completed`` (or ``response.incomplete``). A reasoning
    model's ``reasoning`` item comes first (output index 0): its summary streamed as
    ``reasoning_summary_text.delta`` events when one was asked, else nothing while it thinks."""

    _PIECE = PIECE_MARK
    _NUMBER = PIECE_MARK.replace("piece", "number")

    def __init__(self, generation: Generation, response_id: str) -> None:
        self._generation = generation
        self._id = response_id
        self._item = _item_id(response_id)
        self._sequence = 0
        self._template: tuple[bytes, bytes, bytes] | None = None
        output = generation.outputs[0]
        self._calls = bool(output.calls)  # function_call items instead of a message
        self._reasoning = output.reasoning
        self._summary = bool(generation.request.wire["reasoning"]["summary"])
        self._first = 1 if output.reasoning else 0  # the answer's first output index
        self._reasoning_id = "rs_" + response_id.removeprefix("resp_")

    def _event(self, body: dict[str, Any]) -> bytes:
        body["sequence_number"] = self._sequence
        self._sequence += 1
        return b"event: %s\ndata: %s\n\n" % (body["type"].encode(), wire_json.dumps(body))

    def _located(self, kind: str, **fields: Any) -> dict[str, Any]:
        return {"type": kind, "item_id": self._item, "output_index": self._first, "content_index": 0, **fields}

    def _summary_event(self, kind: str, **fields: Any) -> bytes:
        return self._event({"type": kind, "item_id": self._reasoning_id, "output_index": 0, "summary_index": 0,
                            **fields})

    def _message_opens(self) -> bytes:
        item = {"id": self._item, "type": "message", "status": "in_progress", "role": "assistant", "content": []}
        return (self._event({"type": "response.output_item.added", "output_index": self._first, "item": item})
                + self._event(self._located("response.content_part.added", part=_text_part(""))))

    def _reasoning_ends(self) -> bytes:
        out = b""
        if self._summary:
            text = self._generation.outputs[0].reasoning_text
            out = (self._summary_event("response.reasoning_summary_text.done", text=text)
                   + self._summary_event("response.reasoning_summary_part.done",
                                         part={"type": "summary_text", "text": text}))
        item = _reasoning_item(self._generation, self._id, done=True)
        return out + self._event({"type": "response.output_item.done", "output_index": 0, "item": item})

    def opening(self, index: int) -> bytes:
        started = response_object(self._generation, self._id, done=False)
        head = (self._event({"type": "response.created", "response": started})
                + self._event({"type": "response.in_progress", "response": started}))
        if self._reasoning:
            item = _reasoning_item(self._generation, self._id, done=False)
            head += self._event({"type": "response.output_item.added", "output_index": 0, "item": item})
            if self._summary:
                head += self._summary_event("response.reasoning_summary_part.added",
                                            part={"type": "summary_text", "text": ""})
            return head  # the answer's item opens after the thinking
        if self._calls:
            return head  # each call's item opens with its first token
        return head + self._message_opens()

    def _call_done(self, number: int, call: PlannedCall, status: str) -> bytes:
        index = self._first + number
        return (self._event({"type": "response.function_call_arguments.done", "item_id": "fc_" + call.key,
                             "output_index": index, "name": call.name, "arguments": call.arguments})
                + self._event({"type": "response.output_item.done", "output_index": index,
                               "item": _function_call(call, status)}))

    def _call_token(self, position: int, piece: str) -> bytes:
        calls = self._generation.outputs[0].calls
        number, call = self._generation.outputs[0].call_at(position)
        start = b""
        if position == call.start:  # the previous call is done; this one's item opens
            if number:
                start = self._call_done(number - 1, calls[number - 1], "completed")
            start += self._event({"type": "response.output_item.added", "output_index": self._first + number,
                                  "item": _function_call(call, "in_progress", arguments="")})
        return start + self._event({"type": "response.function_call_arguments.delta", "item_id": "fc_" + call.key,
                                    "output_index": self._first + number, "delta": piece})

    def token(self, index: int, position: int, piece: str) -> bytes:
        if position < self._reasoning:
            return self._summary_event("response.reasoning_summary_text.delta", delta=piece) if self._summary else b""
        start = b""
        if self._reasoning and position == self._reasoning:
            start = self._reasoning_ends() + (b"" if self._calls else self._message_opens())
        if self._calls:
            return start + self._call_token(position, piece)
        template = self._template
        if template is None:
            body = self._located("response.output_text.delta", delta=self._PIECE, logprobs=[])
            body["sequence_number"] = self._NUMBER
            text = b"event: response.output_text.delta\ndata: %s\n\n" % wire_json.dumps(body)
            head, rest = text.split(wire_json.dumps(self._PIECE))
            middle, tail = rest.split(wire_json.dumps(self._NUMBER))
            template = self._template = (head, middle, tail)
        number = self._sequence
        self._sequence += 1
        return start + b"%s%s%s%d%s" % (template[0], encode_basestring_ascii(piece).encode(), template[1], number,
                                        template[2])

    def finish(self, index: int) -> bytes:
        final = response_object(self._generation, self._id)
        if self._reasoning and self._generation.completion_tokens <= self._reasoning:  # it never got past thinking
            return self._reasoning_ends()
        calls = self._generation.outputs[0].calls
        if calls:
            return self._call_done(len(calls) - 1, calls[-1], final["output"][-1]["status"])
        text = self._generation.texts()[0]
        return (self._event(self._located("response.output_text.done", text=text, logprobs=[]))
                + self._event(self._located("response.content_part.done", part=_text_part(text)))
                + self._event({"type": "response.output_item.done", "output_index": self._first,
                               "item": final["output"][-1]}))

    def closing(self) -> bytes:
        final = response_object(self._generation, self._id)
        kind = "response.incomplete" if final["status"] == "incomplete" else "response.completed"
        return self._event({"type": kind, "response": final})

    def error(self, error: SimError) -> bytes:
        return self._event({"type": "error", "code": error.code or error.type, "message": error.message,
                            "param": error.param})

    def aborted(self, error: SimError) -> bytes:
        failed = response_object(self._generation, self._id, done=False)
        failed["status"] = "failed"
        failed["error"] = {"code": "server_error", "message": error.message}
        return self._event({"type": "response.failed", "response": failed})

    def malformed(self) -> bytes:
        return self._event(self._located("response.output_text.delta", delta="", logprobs=[]))[:-12] + b"\n\n"


class OpenAIResponses(OpenAIContentFilter, OpenAIErrors):
    """The Responses API."""

    name = "openai.responses"
    id_prefix = "resp_"

    def parse(self, body: Any, target: RequestTarget = NO_TARGET) -> GenerationRequest:
        return parse_responses(body)

    def response_body(self, generation: Generation, response_id: str) -> dict[str, Any]:
        return response_object(generation, response_id)

    def stream(self, generation: Generation, response_id: str) -> _ResponsesStream:
        return _ResponsesStream(generation, response_id)


OPENAI_RESPONSES = OpenAIResponses()


def response_not_found(response_id: str) -> SimError:
    """The 404 of ``GET``/``DELETE /v1/responses/{id}`` for an id not stored (or already deleted)."""
    return SimError(404, f"Response with id '{response_id}' not found.", code="response_not_found")


def deleted_response(response_id: str) -> dict[str, Any]:
    """The answer of ``DELETE /v1/responses/{id}``."""
    return {"id": response_id, "object": "response", "deleted": True}
