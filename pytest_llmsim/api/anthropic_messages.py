"""Anthropic Messages answers, ``POST /v1/messages`` (and ``/v1/messages/count_tokens``).

The request side (fields, content blocks, ``thinking``, ``output_config``) is
:mod:`.anthropic_fields`. Answers: a ``thinking`` block first when thinking
was asked (with its ``signature``), then one ``text`` block or one
``tool_use`` block per call; streams send ``thinking_delta`` and
``signature_delta``, ``text_delta``, ``input_json_delta``; a user turn made only of
``tool_result`` blocks counts as a tool's result (``auto`` then answers
with text, so an agent loop ends). Any credentials and any ``anthropic-version`` are
accepted.

Usage follows Anthropic's arithmetic: ``input_tokens`` excludes cache reads
and writes, and cache accounting covers only the prefix up to the request's
last ``cache_control`` breakpoint (an unmarked request reports 0 for both;
the engine's prefix cache still shapes its timing). Token counts use the
backend's tiktoken encoding: Anthropic publishes no tokenizer, so they are an
approximation, consistent between ``count_tokens``, ``usage`` and the metrics.
"""

from __future__ import annotations

import json
import time
from datetime import datetime, timezone
from json.encoder import encode_basestring_ascii
from typing import TYPE_CHECKING, Any

from ..sim import GenerationRequest, RateLimitStatus, SimError, fast_json
from ..sim.request import ToolSpec
from ..sim.tokens import PlannedCall, PlannedOutput
from .anthropic_context import applied_edits_body, original_tokens_body
from .anthropic_fields import parse_messages, thinking_signature
from .anthropic_server_tools import result_block, server_tool_usage, server_use_block
from .base import NO_TARGET, PIECE_MARK, RequestTarget, WireAPI, random_hex
from .routing import ApiRoute, counting_route

if TYPE_CHECKING:
    from ..sim.generation import Generation

__all__ = ["ANTHROPIC_COUNTER", "ANTHROPIC_MESSAGES", "ROUTES", "AnthropicMessages", "parse_messages"]

# Anthropic's error types by status; 503 (overloaded, a full queue) is answered 529 as Anthropic does.
ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
               404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error", 500: "api_error",
               504: "timeout_error", 529: "overloaded_error"}
OVERLOADED = 529


def _worded(error: SimError) -> str:
    """A model limit as Anthropic words it (the simulator words it as OpenAI does); other errors as they are."""
    facts = error.details
    if error.code == "unknown_parameter" and "field" in facts:
        return f"{facts['field']}: Extra inputs are not permitted"
    if error.code == "max_tokens_too_large":
        return (f"max_tokens: {facts['requested']} > {facts['maximum']}, which is the maximum allowed number of "
                f"output tokens for {facts['model']}")
    if error.code == "context_length_exceeded" and "prompt_tokens" in facts:
        if facts["prompt_tokens"] >= facts["maximum"]:
            return f"prompt is too long: {facts['prompt_tokens']} tokens > {facts['maximum']} maximum"
        return (f"input length and `max_tokens` exceed context limit: {facts['prompt_tokens']} + "
                f"{facts['requested']} > {facts['maximum']}, decrease input length or `max_tokens` and try again")
    return error.message


def anthropic_request_id() -> str:
    """``req_011C`` and 20 random letters and digits, as Anthropic's ``request-id`` header and error bodies
    carry it (hex digits: a subset of Anthropic's alphabet, and cheap to make)."""
    return "req_011C" + random_hex(20)


def _stop_reason(generation: Generation) -> tuple[str, str | None]:
    output = generation.outputs[0]
    if output.finish_reason == "length":
        return "max_tokens", None
    if output.finish_reason in ("content_filter", "prompt_filter"):
        return "refusal", None  # Claude's safety stop
    if output.calls:
        return "tool_use", None
    if output.stop_sequence is not None:
        return "stop_sequence", output.stop_sequence
    return "end_turn", None


def usage(generation: Generation) -> dict[str, Any]:
    """Anthropic's usage: cache reads and writes only within the marked prefix, excluded from input_tokens."""
    total, marked = generation.prompt_tokens, generation.marked_prompt_tokens
    read = written = 0
    if marked is not None:
        read = min(generation.cached_tokens, marked)
        written = marked - read
    body: dict[str, Any] = {"input_tokens": total - read - written, "cache_creation_input_tokens": written,
                            "cache_read_input_tokens": read, "output_tokens": generation.reported_completion_tokens}
    served = generation.outputs[0].served if generation.outputs else ()
    if served:
        body["server_tool_use"] = server_tool_usage(served, _tools(generation))
    return body


def _tools(generation: Generation) -> tuple[ToolSpec, ...]:
    use = generation.request.tool_use
    return use.tools if use is not None else ()


def _served_complete(output: PlannedOutput, call: PlannedCall) -> bool:
    """Whether ``call``'s input was written whole (max_tokens can cut it): only then is there a result."""
    return call.end < output.length or output.finish_reason != "length"


def _tool_use_block(call: PlannedCall, with_input: bool = True) -> dict[str, Any]:
    """A ``tool_use`` content block (``input`` empty as a stream opens it; ``{}`` if cut mid-JSON)."""
    arguments: Any = {}
    if with_input:
        try:
            arguments = json.loads(call.arguments)
        except ValueError:
            arguments = {}  # max_tokens cut the arguments: Anthropic's SDK needs an object here
    return {"type": "tool_use", "id": "toolu_" + call.key, "name": call.name, "input": arguments}


def _thinking_block(thinking: str) -> dict[str, Any]:
    return {"type": "thinking", "thinking": thinking, "signature": thinking_signature(thinking)}


def _content(generation: Generation) -> list[dict[str, Any]]:
    output = generation.outputs[0]
    blocks = [_thinking_block(output.reasoning_text)] if output.reasoning else []
    for call in output.served:  # server tools: the call, its result, then the answer
        blocks.append(server_use_block(call, _tools(generation)))
        if _served_complete(output, call):
            blocks.append(result_block(call, _tools(generation)))
    if output.calls:
        return blocks + [_tool_use_block(call) for call in output.calls]
    if (output.reasoning or output.served) and output.length == output.answer_start:  # no tokens left to answer
        return blocks
    return [*blocks, {"type": "text", "text": generation.texts()[0]}]


def _event(name: str, body: dict[str, Any]) -> bytes:
    return b"event: %s\ndata: %s\n\n" % (name.encode(), fast_json.dumps(body))


class MessagesStream:
    """``message_start``, ``content_block_start``, ``ping``, a ``content_block_delta`` per token,
    ``content_block_stop``, ``message_delta``, ``message_stop``: the sequence the SDK's
    ``messages.stream()`` reads. With thinking, block 0 is the ``thinking`` block (``thinking_delta``
    per token, then its ``signature_delta``) and the answer's blocks follow it. A server tool's call
    comes before the answer: its ``server_tool_use`` block (``input_json_delta`` per token), then its
    result block whole (a start and a stop, as the API sends it)."""

    _MARK = PIECE_MARK

    def __init__(self, generation: Generation, response_id: str) -> None:
        self._generation = generation
        self._id = response_id
        self._templates: dict[str, tuple[bytes, bytes]] = {}
        output = generation.outputs[0]
        self._calls = bool(output.calls)  # tool_use blocks instead of text
        self._reasoning = output.reasoning
        self._served = output.served  # server tools' calls, each a use block and a result block
        self._answer_start = output.answer_start
        self._first = (1 if output.reasoning else 0) + 2 * len(output.served)  # the answer's first block index

    def _delta(self, kind: str, index: int, piece: str) -> bytes:
        """A text or thinking delta event, from a template cached per kind (the hot path)."""
        template = self._templates.get(kind)
        if template is None:
            field = "text" if kind == "text_delta" else "thinking"
            event = _event("content_block_delta", {"type": "content_block_delta", "index": index,
                                                   "delta": {"type": kind, field: self._MARK}})
            head, tail = event.split(fast_json.dumps(self._MARK))
            template = self._templates[kind] = (head, tail)
        return template[0] + encode_basestring_ascii(piece).encode() + template[1]

    def _end_thinking(self) -> bytes:
        output = self._generation.outputs[0]
        return (_event("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": {
                    "type": "signature_delta", "signature": thinking_signature(output.reasoning_text)}})
                + _event("content_block_stop", {"type": "content_block_stop", "index": 0}))

    def _text_start(self) -> bytes:
        return _event("content_block_start", {"type": "content_block_start", "index": self._first,
                                              "content_block": {"type": "text", "text": ""}})

    def _served_token(self, position: int, piece: str) -> bytes:
        """A token of a server tool's input; its block opens (the one before it closing) at its first."""
        number = next(n for n, call in enumerate(self._served) if call.start <= position < call.end)
        call = self._served[number]
        block = (1 if self._reasoning else 0) + 2 * number
        start = b""
        if position == call.start:
            if number:
                start = self._end_served(number - 1)
            elif self._reasoning:
                start = self._end_thinking()
            start += _event("content_block_start", {"type": "content_block_start", "index": block, "content_block":
                                                    server_use_block(call, _tools(self._generation), False)})
        return start + _event("content_block_delta", {"type": "content_block_delta", "index": block,
                                                      "delta": {"type": "input_json_delta", "partial_json": piece}})

    def _end_served(self, number: int, with_result: bool = True) -> bytes:
        """Close server call ``number``'s use block, then send its result block whole."""
        block = (1 if self._reasoning else 0) + 2 * number
        events = _event("content_block_stop", {"type": "content_block_stop", "index": block})
        if with_result:
            result = result_block(self._served[number], _tools(self._generation))
            events += (_event("content_block_start", {"type": "content_block_start", "index": block + 1,
                                                      "content_block": result})
                       + _event("content_block_stop", {"type": "content_block_stop", "index": block + 1}))
        return events

    def opening(self, index: int) -> bytes:
        generation = self._generation
        start_usage = {**usage(generation), "output_tokens": 0}
        message: dict[str, Any] = {"id": self._id, "type": "message", "role": "assistant", "content": [],
                   "model": generation.request.model, "stop_reason": None, "stop_sequence": None,
                   "usage": start_usage}
        if self._reasoning:
            first_block = _event("content_block_start", {"type": "content_block_start", "index": 0, "content_block": {
                "type": "thinking", "thinking": "", "signature": ""}})
        else:
            first_block = b"" if self._calls or self._served else self._text_start()
        return (_event("message_start", {"type": "message_start", "message": message}) + first_block
                + _event("ping", {"type": "ping"}))

    def token(self, index: int, position: int, piece: str) -> bytes:
        if position < self._reasoning:
            return self._delta("thinking_delta", 0, piece)
        if position < self._answer_start:
            return self._served_token(position, piece)
        start = b""
        if position == self._answer_start and (self._reasoning or self._served):  # the answer begins
            start = self._end_served(len(self._served) - 1) if self._served else self._end_thinking()
            start += b"" if self._calls else self._text_start()
        if self._calls:
            output = self._generation.outputs[0]
            number, call = output.call_at(position)
            block = self._first + number
            if position == call.start:  # the previous block ends, this call's block opens
                if number:
                    start += _event("content_block_stop", {"type": "content_block_stop", "index": block - 1})
                start += _event("content_block_start", {"type": "content_block_start", "index": block,
                                                        "content_block": _tool_use_block(call, with_input=False)})
            return start + _event("content_block_delta", {
                "type": "content_block_delta", "index": block,
                "delta": {"type": "input_json_delta", "partial_json": piece}})
        return start + self._delta("text_delta", self._first, piece)

    def finish(self, index: int) -> bytes:
        generation = self._generation
        output = generation.outputs[0]
        reason, sequence = _stop_reason(generation)
        sent = generation.completion_tokens
        if self._reasoning and sent <= self._reasoning:  # it never got past thinking
            blocks = self._end_thinking()
        elif self._served and sent <= self._answer_start:  # it never got past the server tool's call
            blocks = self._end_served(len(self._served) - 1, _served_complete(output, self._served[-1]))
        else:
            last_block = self._first + max(len(output.calls) - 1, 0)
            blocks = _event("content_block_stop", {"type": "content_block_stop", "index": last_block})
        delta: dict[str, Any] = {"type": "message_delta", "delta": {"stop_reason": reason, "stop_sequence": sequence},
                                 "usage": usage(generation)}  # the whole usage, as sent now
        edited = applied_edits_body(generation.request)
        if edited is not None:
            delta["context_management"] = edited
        return blocks + _event("message_delta", delta)

    def closing(self) -> bytes:
        return _event("message_stop", {"type": "message_stop"})

    def error(self, error: SimError) -> bytes:
        _, body, _ = ANTHROPIC_MESSAGES.render_error(error)
        return _event("error", {"type": "error", "error": body["error"]})

    def aborted(self, error: SimError) -> bytes:
        return self.error(error)  # event: error and no message_stop

    def truncated(self) -> bytes:
        return self.closing()  # message_stop, no message_delta (stop reason, usage)

    def malformed(self) -> bytes:
        return _event("content_block_delta", {"type": "content_block_delta", "index": 0,
                                               "delta": {"type": "text_delta", "text": ""}})[:-12] + b"\n\n"


class AnthropicMessages(WireAPI):
    """The Messages API."""

    name = "anthropic.messages"
    id_prefix = "msg_"
    request_id_header = "request-id"

    def new_request_id(self) -> str:
        return anthropic_request_id()

    def content_filter(self, message: str, prompt: bool) -> SimError | None:
        """A filter stops the answer with ``stop_reason: "refusal"`` (a blocked prompt: at once)."""
        return None

    def parse(self, body: Any, target: RequestTarget = NO_TARGET) -> GenerationRequest:
        return parse_messages(body)

    def response_body(self, generation: Generation, response_id: str) -> dict[str, Any]:
        reason, sequence = _stop_reason(generation)
        body = {"id": response_id, "type": "message", "role": "assistant", "model": generation.request.model,
                "content": _content(generation), "stop_reason": reason,
                "stop_sequence": sequence, "usage": usage(generation)}
        edited = applied_edits_body(generation.request)
        if edited is not None:
            body["context_management"] = edited
        return body

    def stream(self, generation: Generation, response_id: str) -> MessagesStream:
        return MessagesStream(generation, response_id)

    def rate_limit_headers(self, status: RateLimitStatus) -> dict[str, str]:
        """``anthropic-ratelimit-{requests,tokens}-{limit,remaining,reset}``, resets as RFC 3339 times."""
        reset = datetime.fromtimestamp(time.time() + status.reset, tz=timezone.utc).isoformat(timespec="seconds")
        headers: dict[str, str] = {}
        for kind, limit, remaining in (("requests", status.rpm, status.requests_remaining),
                                       ("tokens", status.tpm, status.tokens_remaining)):
            if limit is not None:
                headers[f"anthropic-ratelimit-{kind}-limit"] = str(limit)
                headers[f"anthropic-ratelimit-{kind}-remaining"] = str(remaining)
                headers[f"anthropic-ratelimit-{kind}-reset"] = reset.replace("+00:00", "Z")
        return headers

    def render_error(self, error: SimError) -> tuple[int, dict[str, Any], dict[str, str]]:
        status = OVERLOADED if error.status == 503 else error.status
        kind = ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
        request_id = anthropic_request_id()
        body = {"type": "error", "error": {"type": kind, "message": _worded(error)}, "request_id": request_id}
        headers = {**error.headers, "request-id": request_id}
        if error.rate_limit is not None:
            headers.update(self.rate_limit_headers(error.rate_limit))
        return status, body, headers


ANTHROPIC_MESSAGES = AnthropicMessages()


class AnthropicCounter:
    """``POST /v1/messages/count_tokens``: a Messages request without ``max_tokens``, counted."""

    name = "anthropic.count_tokens"
    request_id_header = "request-id"

    def new_request_id(self) -> str:
        return anthropic_request_id()

    def parse_count(self, body: Any, target: RequestTarget) -> GenerationRequest:
        return parse_messages(body, require_max_tokens=False)

    def count_body(self, count: int, request: GenerationRequest) -> dict[str, Any]:
        edited = original_tokens_body(request)
        return {"input_tokens": count} if edited is None else {"input_tokens": count, "context_management": edited}


ANTHROPIC_COUNTER = AnthropicCounter()

ROUTES = (ApiRoute("/v1/messages", ANTHROPIC_MESSAGES),
          counting_route("/v1/messages/count_tokens", ANTHROPIC_MESSAGES, ANTHROPIC_COUNTER))
