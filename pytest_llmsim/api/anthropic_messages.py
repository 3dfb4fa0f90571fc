"""Anthropic Messages, ``POST /v1/messages`` (and ``/v1/messages/count_tokens``).

Parse: ``model`` and ``max_tokens`` are required, as Anthropic requires them;
``system`` is a string or text blocks; ``messages`` alternate ``user`` and
``assistant`` with string or block content (``text``; ``tool_use`` and
``tool_result`` are counted as their text); ``stop_sequences``, ``stream``,
sampling fields are checked when present; ``tools`` are counted as their
JSON text and answered by the shared tool rules (``tool_choice`` ``auto``,
``any``, ``tool``, ``none``, ``disable_parallel_tool_use``) as ``tool_use``
blocks, streamed with ``input_json_delta``; a user turn made only of
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
import os
import time
from datetime import datetime, timezone
from json.encoder import encode_basestring_ascii
from typing import TYPE_CHECKING, Any

from ..sim import ChatMessage, GenerationRequest, RateLimitStatus, SimError, invalid, wire_json
from ..sim.request import OutputFormat
from ..sim.tokens import PlannedCall
from .base import NO_TARGET, PIECE_MARK, RequestTarget
from .field_policy import FieldPolicy
from .tool_fields import anthropic_output_format, anthropic_tool_use
from .validation import describe, expect_object, is_int, optional, ranged

if TYPE_CHECKING:
    from ..sim.generation import Generation

__all__ = ["ANTHROPIC_COUNTER", "ANTHROPIC_MESSAGES", "AnthropicMessages", "parse_messages"]

# Anthropic's error types by status; 503 (overloaded, a full queue) is answered 529 as Anthropic does.
ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
               404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error", 500: "api_error",
               504: "timeout_error", 529: "overloaded_error"}
OVERLOADED = 529
MAX_STOP_SEQUENCES = 8191 // 8  # Anthropic documents no small cap; bound the list anyway
_ID_ALPHABET = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


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
    carry it."""
    return "req_011C" + "".join(_ID_ALPHABET[byte % 62] for byte in os.urandom(20))


def _block_text(block: Any, param: str) -> tuple[str, bool]:
    """A content block's text as the prompt counts it, and whether it carries ``cache_control``."""
    if not isinstance(block, dict) or not isinstance(block.get("type"), str):
        raise invalid(f"{param}: expected an object with a 'type'.", param, "invalid_type")
    kind = block["type"]
    if kind == "text":
        if not isinstance(block.get("text"), str):
            raise invalid(f"{param}.text: Field required (a string).", f"{param}.text", "invalid_type")
        text = block["text"]
    elif kind == "tool_use":
        text = json.dumps({"name": block.get("name"), "input": block.get("input")})
    elif kind == "tool_result":
        content = block.get("content", "")
        text = content if isinstance(content, str) else _content_text(content, f"{param}.content")[0]
    else:
        raise invalid(f"{param}.type: content blocks of type '{kind}' are not supported by pytest-llmsim; "
                      "text, tool_use and tool_result are simulated.", f"{param}.type", "unsupported_value")
    return text, block.get("cache_control") is not None


def _content_text(content: Any, param: str) -> tuple[str, bool]:
    if isinstance(content, str):
        return content, False
    if isinstance(content, list):
        parts = [_block_text(block, f"{param}.{i}") for i, block in enumerate(content)]
        return "".join(text for text, _ in parts), any(marked for _, marked in parts)
    raise invalid(f"{param}: Input should be a valid string or a list of content blocks, not "
                  f"{describe(content)}.", param, "invalid_type")


# Every field of anthropic's MessageCreateParams (tests/test_field_policy.py walks it).
MESSAGE_FIELDS = FieldPolicy.of(
    honoured=("model", "max_tokens", "messages", "system", "stop_sequences", "stream", "tools", "tool_choice",
              "output_config", "cache_control"),
    no_effect=("temperature", "top_p", "top_k", "metadata", "service_tier", "inference_geo", "speed",
               "user_profile_id", "workspace_id", "diagnostics"),
    refused={"thinking": "extended thinking is not simulated yet",
             "container": "code execution containers are not simulated",
             "mcp_servers": "MCP servers are not simulated",
             "context_management": "context management is not simulated"})


def parse_messages(body: Any, *, require_max_tokens: bool = True) -> GenerationRequest:
    """Validate a ``POST /v1/messages`` body (``count_tokens`` bodies need no ``max_tokens``)."""
    body = expect_object(body)
    model = body.get("model")
    if not isinstance(model, str):
        raise invalid("model: Field required (a string)." if model is None else
                      f"model: Input should be a valid string, not {describe(model)}.", "model",
                      "missing_required_parameter" if model is None else "invalid_type")
    max_tokens = optional(body, "max_tokens", is_int, "an integer")
    if max_tokens is None and require_max_tokens:
        raise invalid("max_tokens: Field required.", "max_tokens", "missing_required_parameter")
    if max_tokens is not None and max_tokens < 1:
        raise invalid(f"max_tokens: Input should be greater than or equal to 1, not {max_tokens}.",
                      "max_tokens", "integer_below_min_value")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise invalid("messages: Field required (a non-empty list of messages).", "messages",
                      "missing_required_parameter" if messages is None else "invalid_value")
    parsed: list[ChatMessage] = []
    breakpoint_at: int | None = None
    system = body.get("system")
    if system is not None:
        text, marked = _content_text(system, "system")
        parsed.append(ChatMessage("system", text))
        breakpoint_at = 1 if marked else None
    for i, message in enumerate(messages):
        param = f"messages.{i}"
        if not isinstance(message, dict) or message.get("role") not in ("user", "assistant"):
            raise invalid(f"{param}.role: Input should be 'user' or 'assistant'.", f"{param}.role", "invalid_value")
        if "content" not in message:
            raise invalid(f"{param}.content: Field required.", f"{param}.content", "missing_required_parameter")
        text, marked = _content_text(message["content"], f"{param}.content")
        content = message["content"]
        results_only = (isinstance(content, list) and content
                        and all(isinstance(b, dict) and b.get("type") == "tool_result" for b in content))
        parsed.append(ChatMessage("tool" if results_only else message["role"], text))
        if marked:
            breakpoint_at = len(parsed)
    stops = optional(body, "stop_sequences", lambda v: isinstance(v, list) and all(isinstance(s, str) for s in v),
                     "a list of strings") or []
    if len(stops) > MAX_STOP_SEQUENCES:
        raise invalid(f"stop_sequences: at most {MAX_STOP_SEQUENCES} are accepted.", "stop_sequences",
                      "invalid_value")
    stream = bool(optional(body, "stream", lambda v: isinstance(v, bool), "a boolean"))
    ranged(body, "temperature", 0.0, 1.0)
    ranged(body, "top_p", 0.0, 1.0)
    top_k = optional(body, "top_k", is_int, "an integer")
    if top_k is not None and top_k < 0:
        raise invalid("top_k: Input should be greater than or equal to 0.", "top_k", "integer_below_min_value")
    tool_use = anthropic_tool_use(body)
    tools = body.get("tools")
    if body.get("cache_control") is not None:  # automatic caching: the whole prompt is the cached prefix
        breakpoint_at = len(parsed)
    return GenerationRequest(kind="chat", model=model, stream=stream, include_usage=True, max_tokens=max_tokens,
                             n=1, stops=list(stops), seed=None, messages=parsed,
                             tools_text=json.dumps(tools) if tools else "", cache_breakpoint=breakpoint_at,
                             tool_use=tool_use, output_format=_output_format(body),
                             ignored_fields=MESSAGE_FIELDS.check(body))


def _output_format(body: dict[str, Any]) -> OutputFormat | None:
    """``output_config.format``: ``{"type": "json_schema", "schema": {...}}`` (structured output); ``effort``
    is accepted with no effect. The beta's top-level ``output_format`` is read the same way."""
    config = optional(body, "output_config", lambda v: isinstance(v, dict), "an object") or {}
    unknown = sorted(set(config) - {"format", "effort"})
    if unknown:
        raise invalid(f"output_config.{unknown[0]}: Extra inputs are not permitted", f"output_config.{unknown[0]}",
                      "unknown_parameter")
    fmt = config.get("format") if config.get("format") is not None else body.get("output_format")
    if fmt is None:
        return None
    if not isinstance(fmt, dict) or fmt.get("type") != "json_schema" or not isinstance(fmt.get("schema"), dict):
        raise invalid("output_config.format: expected {\"type\": \"json_schema\", \"schema\": {...}}",
                      "output_config.format", "invalid_value")
    return anthropic_output_format(fmt, "output_config.format")


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
    return {"input_tokens": total - read - written, "cache_creation_input_tokens": written,
            "cache_read_input_tokens": read, "output_tokens": generation.completion_tokens}


def _tool_use_block(call: PlannedCall, with_input: bool = True) -> dict[str, Any]:
    """A ``tool_use`` content block (``input`` empty as a stream opens it; ``{}`` if cut mid-JSON)."""
    arguments: Any = {}
    if with_input:
        try:
            arguments = json.loads(call.arguments)
        except ValueError:
            arguments = {}  # max_tokens cut the arguments: Anthropic's SDK needs an object here
    return {"type": "tool_use", "id": "toolu_" + call.key, "name": call.name, "input": arguments}


def _content(generation: Generation) -> list[dict[str, Any]]:
    output = generation.outputs[0]
    if output.calls:
        return [_tool_use_block(call) for call in output.calls]
    return [{"type": "text", "text": generation.texts()[0]}]


def _event(name: str, body: dict[str, Any]) -> bytes:
    return b"event: %s\ndata: %s\n\n" % (name.encode(), wire_json.dumps(body))


class MessagesStream:
    """``message_start``, ``content_block_start``, ``ping``, a ``content_block_delta`` per token,
    ``content_block_stop``, ``message_delta``, ``message_stop``: the sequence the SDK's
    ``messages.stream()`` reads."""

    _MARK = PIECE_MARK

    def __init__(self, generation: Generation, response_id: str) -> None:
        self._generation = generation
        self._id = response_id
        self._template: tuple[bytes, bytes] | None = None
        self._calls = bool(generation.outputs[0].calls)  # tool_use blocks instead of text

    def opening(self, index: int) -> bytes:
        generation = self._generation
        start_usage = {**usage(generation), "output_tokens": 0}
        message: dict[str, Any] = {"id": self._id, "type": "message", "role": "assistant", "content": [],
                   "model": generation.request.model, "stop_reason": None, "stop_sequence": None,
                   "usage": start_usage}
        text_block = b"" if generation.outputs[0].calls else _event(
            "content_block_start", {"type": "content_block_start", "index": 0,
                                    "content_block": {"type": "text", "text": ""}})
        return (_event("message_start", {"type": "message_start", "message": message}) + text_block
                + _event("ping", {"type": "ping"}))

    def token(self, index: int, position: int, piece: str) -> bytes:
        if self._calls:
            output = self._generation.outputs[0]
            number, call = output.call_at(position)
            start = b""
            if position == call.start:  # the previous block ends, this call's block opens
                if number:
                    start = _event("content_block_stop", {"type": "content_block_stop", "index": number - 1})
                start += _event("content_block_start", {"type": "content_block_start", "index": number,
                                                        "content_block": _tool_use_block(call, with_input=False)})
            return start + _event("content_block_delta", {
                "type": "content_block_delta", "index": number,
                "delta": {"type": "input_json_delta", "partial_json": piece}})
        template = self._template
        if template is None:
            event = _event("content_block_delta", {"type": "content_block_delta", "index": 0,
                                                   "delta": {"type": "text_delta", "text": self._MARK}})
            head, tail = event.split(wire_json.dumps(self._MARK))
            template = self._template = (head, tail)
        return template[0] + encode_basestring_ascii(piece).encode() + template[1]

    def finish(self, index: int) -> bytes:
        reason, sequence = _stop_reason(self._generation)
        last_block = max(len(self._generation.outputs[0].calls) - 1, 0)
        return (_event("content_block_stop", {"type": "content_block_stop", "index": last_block})
                + _event("message_delta", {"type": "message_delta",
                                           "delta": {"stop_reason": reason, "stop_sequence": sequence},
                                           "usage": usage(self._generation)}))  # the whole usage, as sent now

    def closing(self) -> bytes:
        return _event("message_stop", {"type": "message_stop"})

    def error(self, error: SimError) -> bytes:
        _, body, _ = ANTHROPIC_MESSAGES.render_error(error)
        return _event("error", {"type": "error", "error": body["error"]})

    def aborted(self, error: SimError) -> bytes:
        return self.error(error)  # event: error and no message_stop

    def malformed(self) -> bytes:
        return _event("content_block_delta", {"type": "content_block_delta", "index": 0,
                                               "delta": {"type": "text_delta", "text": ""}})[:-12] + b"\n\n"


class AnthropicMessages:
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
        return {"id": response_id, "type": "message", "role": "assistant", "model": generation.request.model,
                "content": _content(generation), "stop_reason": reason,
                "stop_sequence": sequence, "usage": usage(generation)}

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

    def count_body(self, count: int) -> dict[str, Any]:
        return {"input_tokens": count}


ANTHROPIC_COUNTER = AnthropicCounter()
