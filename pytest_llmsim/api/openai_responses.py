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

The request side (fields, input items, ``reasoning``, ``include``,
``background``) is :mod:`.openai_responses_fields`.

Render: the response object the ``openai`` SDK's types require; streams as
the event sequence its ``responses.stream()`` reads, each event with a rising
``sequence_number``; a ``reasoning`` item first for a reasoning request; the
queued and in-progress objects of a background response (``pending_body``);
the ``input_tokens`` counter and the ``input_items`` list.
"""

from __future__ import annotations

import base64
from json.encoder import encode_basestring_ascii
from typing import TYPE_CHECKING, Any

from ..sim import GenerationRequest, SimError, fast_json, invalid
from ..sim.tokens import PlannedCall
from .base import NO_TARGET, PIECE_MARK, RequestTarget
from .openai_common import OpenAIContentFilter, OpenAIErrors
from .openai_responses_fields import parse_responses
from .routing import ApiRoute, Reply, RouteCall, counting_route

if TYPE_CHECKING:
    from ..sim.generation import Generation

__all__ = [
    "OPENAI_RESPONSES",
    "RESPONSES_COUNTER",
    "ROUTES",
    "OpenAIResponses",
    "ResponsesCounter",
    "input_items",
    "parse_responses",
]

INCOMPLETE_REASONS = {"length": "max_output_tokens", "content_filter": "content_filter"}


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
    prompt, output = generation.prompt_tokens, generation.reported_completion_tokens
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
        "metadata": wire["metadata"], "background": wire["background"],
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
        return b"event: %s\ndata: %s\n\n" % (body["type"].encode(), fast_json.dumps(body))

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
            text = b"event: response.output_text.delta\ndata: %s\n\n" % fast_json.dumps(body)
            head, rest = text.split(fast_json.dumps(self._PIECE))
            middle, tail = rest.split(fast_json.dumps(self._NUMBER))
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

    def truncated(self) -> bytes:
        return b""  # its end is response.completed, which carries the status and usage

    def malformed(self) -> bytes:
        return self._event(self._located("response.output_text.delta", delta="", logprobs=[]))[:-12] + b"\n\n"


class OpenAIResponses(OpenAIContentFilter, OpenAIErrors):
    """The Responses API."""

    name = "openai.responses"
    id_prefix = "resp_"
    answers_in_background = True

    def parse(self, body: Any, target: RequestTarget = NO_TARGET) -> GenerationRequest:
        return parse_responses(body)

    def response_body(self, generation: Generation, response_id: str) -> dict[str, Any]:
        return response_object(generation, response_id)

    def stream(self, generation: Generation, response_id: str) -> _ResponsesStream:
        return _ResponsesStream(generation, response_id)

    def pending_body(self, generation: Generation, response_id: str, status: str) -> dict[str, Any]:
        """A background response before it is done (``queued``, ``in_progress``, ``cancelled``)."""
        body = response_object(generation, response_id, done=False)
        body["status"] = status
        return body


class ResponsesCounter:
    """``POST /v1/responses/input_tokens``: a Responses body's input, counted (``instructions``, a previous
    response's conversation and the tools included)."""

    name = "openai.responses.input_tokens"

    def parse_count(self, body: Any, target: RequestTarget) -> GenerationRequest:
        if isinstance(body, dict):
            body = {key: value for key, value in body.items() if key not in ("stream", "background")}
        return parse_responses(body)

    def count_body(self, count: int, request: GenerationRequest) -> dict[str, Any]:
        return {"object": "response.input_tokens", "input_tokens": count}


def input_items(stored_messages: Any, response_id: str) -> list[dict[str, Any]]:
    """The input items of a stored response (its conversation before the answer), oldest first."""
    items = []
    for i, message in enumerate(stored_messages[:-1]):
        part = "output_text" if message.role == "assistant" else "input_text"
        items.append({"id": f"msg_{response_id.removeprefix('resp_')}_{i}", "type": "message", "role": message.role,
                      "status": "completed", "content": [{"type": part, "text": message.content}]})
    return items


OPENAI_RESPONSES = OpenAIResponses()
RESPONSES_COUNTER = ResponsesCounter()


def response_not_found(response_id: str) -> SimError:
    """The 404 of ``GET``/``DELETE /v1/responses/{id}`` for an id not stored (or already deleted)."""
    return SimError(404, f"Response with id '{response_id}' not found.", code="response_not_found")


def deleted_response(response_id: str) -> dict[str, Any]:
    """The answer of ``DELETE /v1/responses/{id}``."""
    return {"id": response_id, "object": "response", "deleted": True}


def list_input_items(call: RouteCall) -> Reply:
    """``GET /v1/responses/{id}/input_items``: a stored response's input items (``order``, ``limit``,
    ``after``; newest first by default, as OpenAI lists them)."""
    response_id = call.params["id"]
    stored = call.simulator.conversations.get(response_id, call.credential)
    if stored is None:
        raise response_not_found(response_id)
    items = input_items(stored.messages, response_id)
    order = call.query.get("order", "desc")
    limit_text = call.query.get("limit", "20")
    if order not in ("asc", "desc") or not limit_text.isdigit() or not 1 <= int(limit_text) <= 100:
        param = "order" if order not in ("asc", "desc") else "limit"
        raise invalid(f"Invalid '{param}'.", param, "invalid_value")
    if order == "desc":
        items.reverse()
    after = call.query.get("after")
    if after is not None:
        ids = [item["id"] for item in items]
        items = items[ids.index(after) + 1:] if after in ids else []
    page = items[:int(limit_text)]
    return Reply({"object": "list", "data": page, "first_id": page[0]["id"] if page else None,
                  "last_id": page[-1]["id"] if page else None, "has_more": len(items) > len(page)})


# GET, DELETE and cancel of a stored response read the background jobs too: pytest_llmsim.jobs serves them
ROUTES = (
    ApiRoute("/v1/responses", OPENAI_RESPONSES),
    counting_route("/v1/responses/input_tokens", OPENAI_RESPONSES, RESPONSES_COUNTER),
    ApiRoute("/v1/responses/{id}/input_items", OPENAI_RESPONSES, ("GET",), list_input_items, stored=True),
)
