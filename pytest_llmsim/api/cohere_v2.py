"""Cohere's v2 API: ``POST /v2/chat`` (and its stream) and ``POST /v2/embed``.

Chat: ``model``, ``messages`` (``system``, ``user``, ``assistant`` with
``tool_calls`` and ``tool_plan``, ``tool`` with ``tool_call_id``; string or
text-part content), ``tools`` (OpenAI's nested function shape),
``tool_choice`` (``REQUIRED``, ``NONE``), ``response_format`` (``text``,
``json_object`` with an optional ``json_schema``), ``max_tokens``,
``stop_sequences``, ``stream``. Answers ``id``, ``finish_reason``
(``COMPLETE``, ``MAX_TOKENS``, ``TOOL_CALL``, ``STOP_SEQUENCE``),
``message`` (text content, or ``tool_plan`` and ``tool_calls``) and
``usage`` (``billed_units`` and ``tokens``). Streams are SSE events with a
``type``: ``message-start``, ``content-start``, ``content-delta``,
``content-end`` (a call: ``tool-plan-delta``, ``tool-call-start``,
``tool-call-delta``, ``tool-call-end``), ``message-end`` (the finish reason
and usage; a mid-stream error: ``finish_reason: "ERROR"`` with the error).
Embed: ``texts``, ``input_type``, ``embedding_types`` (``float``, ``int8``,
``uint8``, ``base64``), ``output_dimension``. Errors ``{"message"}``.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from ..content.embeddings import encode_base64
from ..sim import ChatMessage, GenerationRequest, SimError, fast_json, invalid
from .base import NO_TARGET, RequestTarget
from .rerank import CohereErrors
from .routing import ApiRoute
from .tool_fields import openai_output_format, openai_tool_use
from .tools_text import tools_text
from .validation import describe, expect_object, is_int, ranged

if TYPE_CHECKING:
    from ..sim.generation import Generation

__all__ = ["COHERE_CHAT", "COHERE_EMBED", "ROUTES"]

CHAT_FIELDS = ("model", "messages", "tools", "tool_choice", "response_format", "max_tokens", "stop_sequences",
               "stream", "temperature", "seed", "p", "k", "frequency_penalty", "presence_penalty", "safety_mode",
               "strict_tools", "documents", "citation_options", "logprobs")
REFUSED_CHAT = ("documents", "citation_options", "logprobs")
FINISH = {"length": "MAX_TOKENS"}
INPUT_TYPES = ("search_document", "search_query", "classification", "clustering")
EMBEDDING_TYPES = ("float", "int8", "uint8", "base64")
EMBED_FIELDS = ("model", "texts", "input_type", "embedding_types", "output_dimension", "truncate", "max_tokens")


def _content(value: Any, param: str) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(part, dict) for part in value):
        texts = []
        for i, part in enumerate(value):
            if part.get("type") not in ("text", "document") or not isinstance(part.get("text", ""), str):
                raise invalid(f"invalid request: {param}[{i}]: only text content is simulated by pytest-llmsim.",
                              f"{param}[{i}]", "unsupported_value")
            texts.append(part.get("text") or json.dumps(part.get("document", {})))
        return "".join(texts)
    raise invalid(f"invalid request: {param} must be a string or a list of text parts, not {describe(value)}.",
                  param, "invalid_type")


def _messages(body: dict[str, Any]) -> list[ChatMessage]:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise invalid("invalid request: messages must be a non-empty list.", "messages",
                      "missing_required_parameter" if messages is None else "invalid_value")
    parsed = []
    for i, message in enumerate(messages):
        role = message.get("role") if isinstance(message, dict) else None
        if role not in ("system", "user", "assistant", "tool"):
            raise invalid(f"invalid request: messages[{i}].role must be system, user, assistant or tool.",
                          f"messages[{i}].role", "invalid_value")
        text = _content(message.get("content", ""), f"messages[{i}].content")
        if role == "assistant" and message.get("tool_calls"):
            text += json.dumps(message["tool_calls"])
        plan = message.get("tool_plan")
        if plan is not None and not isinstance(plan, str):
            raise invalid(f"invalid request: messages[{i}].tool_plan must be a string, not {describe(plan)}.",
                          f"messages[{i}].tool_plan", "invalid_type")
        parsed.append(ChatMessage(role, text + (plan or "")))
    return parsed


def parse_cohere_chat(body: Any) -> GenerationRequest:
    """A ``/v2/chat`` body into the shared request model."""
    body = expect_object(body)
    unknown = sorted(set(body) - set(CHAT_FIELDS))
    if unknown:
        raise invalid(f"invalid request: unknown field {unknown[0]!r}.", unknown[0], "unknown_field")
    for key in REFUSED_CHAT:
        if body.get(key):
            raise invalid(f"invalid request: {key} is not simulated by pytest-llmsim.", key, "unsupported_value")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise invalid("invalid request: model is required.", "model", "missing_required_parameter")
    max_tokens = body.get("max_tokens")
    if max_tokens is not None and (not is_int(max_tokens) or max_tokens < 1):
        raise invalid("invalid request: max_tokens must be a positive integer.", "max_tokens", "invalid_value")
    stops = body.get("stop_sequences") or []
    if not isinstance(stops, list) or len(stops) > 5 or not all(isinstance(s, str) for s in stops):
        raise invalid("invalid request: stop_sequences must be at most 5 strings.", "stop_sequences",
                      "invalid_value")
    ranged(body, "temperature", 0.0, 1.0)
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise invalid("invalid request: stream must be a boolean.", "stream", "invalid_type")
    choice = body.get("tool_choice")
    if choice is not None and choice not in ("REQUIRED", "NONE"):
        raise invalid("invalid request: tool_choice must be REQUIRED or NONE.", "tool_choice", "invalid_value")
    tool_use = openai_tool_use({"tools": body.get("tools"), "tool_choice": choice.lower() if choice else None},
                               flat=False)
    output_format = None
    response_format = body.get("response_format")
    if response_format is not None:
        kind = response_format.get("type") if isinstance(response_format, dict) else None
        if kind not in ("text", "json_object"):
            raise invalid("invalid request: response_format.type must be text or json_object.",
                          "response_format.type", "invalid_value")
        schema = response_format.get("json_schema")
        output_format = openai_output_format({"response_format": {"type": "json_object"} if schema is None else {
            "type": "json_schema", "json_schema": {"name": "response", "schema": schema}}}) if kind != "text" else None
    seed = body.get("seed")
    tools = body.get("tools")
    return GenerationRequest(kind="chat", model=model, stream=stream, include_usage=True, max_tokens=max_tokens,
                             n=1, stops=list(stops), seed=seed if is_int(seed) else None, messages=_messages(body),
                             tools_text=tools_text(tools), tool_use=tool_use,
                             output_format=output_format)


def _finish(generation: Generation) -> str:
    output = generation.outputs[0]
    if output.finish_reason in FINISH:
        return FINISH[output.finish_reason]
    if output.calls:
        return "TOOL_CALL"
    return "STOP_SEQUENCE" if output.stop_sequence is not None else "COMPLETE"


def _usage(generation: Generation) -> dict[str, Any]:
    counts = {"input_tokens": generation.prompt_tokens, "output_tokens": generation.reported_completion_tokens}
    return {"billed_units": dict(counts), "tokens": counts, "cached_tokens": generation.cached_tokens}


def _call(call: Any, with_arguments: bool = True) -> dict[str, Any]:
    return {"id": "call_" + call.key, "type": "function",
            "function": {"name": call.name, "arguments": call.arguments if with_arguments else ""}}


TOOL_PLAN = "I will call the tool to answer."


class CohereChat(CohereErrors):
    """``POST /v2/chat``."""

    name = "cohere.chat"
    id_prefix = "co-"

    def parse(self, body: Any, target: RequestTarget = NO_TARGET) -> GenerationRequest:
        return parse_cohere_chat(body)

    def response_body(self, generation: Generation, response_id: str) -> dict[str, Any]:
        output = generation.outputs[0]
        message: dict[str, Any] = {"role": "assistant"}
        if output.calls:
            message["tool_plan"] = TOOL_PLAN
            message["tool_calls"] = [_call(call) for call in output.calls]
        else:
            message["content"] = [{"type": "text", "text": generation.texts()[0]}]
        return {"id": response_id, "finish_reason": _finish(generation), "message": message,
                "usage": _usage(generation)}

    def stream(self, generation: Generation, response_id: str) -> CohereStream:
        return CohereStream(generation, response_id)


def _event(body: dict[str, Any]) -> bytes:
    return b"event: %s\ndata: %s\n\n" % (body["type"].encode(), fast_json.dumps(body))


class CohereStream:
    """Cohere's v2 chat events, one ``content-delta`` (or ``tool-call-delta``) per token."""

    def __init__(self, generation: Generation, response_id: str) -> None:
        self._generation = generation
        self._id = response_id
        self._calls = bool(generation.outputs[0].calls)

    def opening(self, index: int) -> bytes:
        start = _event({"type": "message-start", "id": self._id, "delta": {"message": {
            "role": "assistant", "content": [], "tool_plan": "", "tool_calls": [], "citations": []}}})
        if self._calls:
            return start + _event({"type": "tool-plan-delta", "delta": {"message": {"tool_plan": TOOL_PLAN}}})
        return start + _event({"type": "content-start", "index": 0,
                               "delta": {"message": {"content": {"type": "text", "text": ""}}}})

    def token(self, index: int, position: int, piece: str) -> bytes:
        if not self._calls:
            return _event({"type": "content-delta", "index": 0, "delta": {"message": {"content": {"text": piece}}}})
        number, call = self._generation.outputs[0].call_at(position)
        start = b""
        if position == call.start:
            if number:
                start = _event({"type": "tool-call-end", "index": number - 1})
            start += _event({"type": "tool-call-start", "index": number,
                             "delta": {"message": {"tool_calls": _call(call, with_arguments=False)}}})
        return start + _event({"type": "tool-call-delta", "index": number,
                               "delta": {"message": {"tool_calls": {"function": {"arguments": piece}}}}})

    def finish(self, index: int) -> bytes:
        if self._calls:
            return _event({"type": "tool-call-end", "index": len(self._generation.outputs[0].calls) - 1})
        return _event({"type": "content-end", "index": 0})

    def closing(self) -> bytes:
        return _event({"type": "message-end", "delta": {"finish_reason": _finish(self._generation),
                                                        "usage": _usage(self._generation)}})

    def error(self, error: SimError) -> bytes:
        return _event({"type": "message-end", "delta": {"finish_reason": "ERROR", "error": error.message}})

    def aborted(self, error: SimError) -> bytes:
        return self.error(error)

    def truncated(self) -> bytes:
        return b""  # its end is message-end, which carries the finish reason and usage

    def malformed(self) -> bytes:
        return _event({"type": "content-delta", "index": 0, "delta": {"message": {"content": {"text": ""}}}})[:-12] \
            + b"\n\n"


class CohereEmbed(CohereErrors):
    """``POST /v2/embed``: the same vectors as ``/v1/embeddings``, as each asked type."""

    name = "cohere.embed"
    id_prefix = "emb-"

    def parse(self, body: Any, target: RequestTarget = NO_TARGET) -> GenerationRequest:
        body = expect_object(body)
        unknown = sorted(set(body) - set(EMBED_FIELDS))
        if unknown:
            raise invalid(f"invalid request: unknown field {unknown[0]!r} (images and inputs are not simulated).",
                          unknown[0], "unknown_field")
        texts = body.get("texts")
        if not isinstance(texts, list) or not texts or not all(isinstance(t, str) and t for t in texts):
            raise invalid("invalid request: texts must be a non-empty list of non-empty strings.", "texts",
                          "invalid_value")
        if body.get("input_type") not in INPUT_TYPES:
            raise invalid(f"invalid request: input_type must be one of {', '.join(INPUT_TYPES)}.", "input_type",
                          "invalid_value")
        kinds = body.get("embedding_types") or ["float"]
        if not isinstance(kinds, list) or not kinds or any(kind not in EMBEDDING_TYPES for kind in kinds):
            raise invalid(f"invalid request: embedding_types must be among {', '.join(EMBEDDING_TYPES)} (binary "
                          "types are not simulated).", "embedding_types", "invalid_value")
        dimensions = body.get("output_dimension")
        if dimensions is not None and (not is_int(dimensions) or dimensions < 1):
            raise invalid("invalid request: output_dimension must be a positive integer.", "output_dimension",
                          "invalid_value")
        prompts: list[str | list[int]] = list(texts)
        return GenerationRequest(kind="embedding", model=str(body.get("model") or ""), stream=False,
                                 include_usage=False, max_tokens=0, n=1, stops=[], seed=None, prompts=prompts,
                                 prompt_param="texts", dimensions=dimensions, wire={"types": kinds})

    def response_body(self, generation: Generation, response_id: str) -> dict[str, Any]:
        vectors = generation.embeddings()
        embeddings: dict[str, Any] = {}
        for kind in generation.request.wire["types"]:
            if kind == "float":
                embeddings["float"] = vectors
            elif kind == "int8":
                embeddings["int8"] = [[max(-128, min(127, round(x * 127))) for x in v] for v in vectors]
            elif kind == "uint8":
                embeddings["uint8"] = [[max(0, min(255, round(x * 127) + 128)) for x in v] for v in vectors]
            else:
                embeddings["base64"] = [encode_base64(v) for v in vectors]
        return {"id": response_id, "embeddings": embeddings, "texts": list(generation.request.prompts),
                "response_type": "embeddings_by_type",
                "meta": {"api_version": {"version": "2"}, "billed_units": {"input_tokens": generation.prompt_tokens}}}

    def stream(self, generation: Generation, response_id: str) -> Any:
        raise TypeError("embeddings are never streamed")


COHERE_CHAT = CohereChat()
COHERE_EMBED = CohereEmbed()

ROUTES = (ApiRoute("/v2/chat", COHERE_CHAT), ApiRoute("/v2/embed", COHERE_EMBED))
