"""Bedrock InvokeModel for the model families besides Anthropic's: each family's own body, answer and stream chunks.

The model id in the URL says the family (a cross-region prefix such as ``us.`` is skipped)::

    amazon.titan-text-*       {"inputText", "textGenerationConfig"} -> {"inputTextTokenCount", "results"}
    amazon.titan-embed-text-* {"inputText", "dimensions", "normalize"} -> {"embedding", "inputTextTokenCount"}
    meta.llama*               {"prompt", "max_gen_len"} -> {"generation", "prompt_token_count", ...}
    mistral.*                 {"prompt", "max_tokens"} -> {"outputs": [{"text", "stop_reason"}]}; or the chat
                              form {"messages"} -> {"choices": [{"message", "stop_reason"}]}
    cohere.command-r*         {"message", "chat_history", "preamble"} -> {"text", "finish_reason", ...}
    cohere.embed-*            {"texts", "input_type"} -> {"embeddings", "texts", "response_type"}

Anything else (``anthropic.*`` and unknown ids) is Anthropic's Messages body (:mod:`.bedrock`). A stream's chunks
are the family's own JSON, and the last carries ``amazon-bedrock-invocationMetrics`` (token counts, latency), as
Bedrock adds to every family's stream. Errors are Bedrock's (``x-amzn-ErrorType`` and ``{"message"}``).
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..sim import ChatMessage, GenerationRequest, SimError, invalid
from . import aws_eventstream
from .base import NO_TARGET, RequestTarget, WireAPI
from .field_policy import FieldPolicy
from .validation import expect_object

if TYPE_CHECKING:
    from ..sim.generation import Generation

__all__ = ["INVOKE_FAMILIES", "FamilyInvoke", "InvokeFamily", "family_of", "latency_ms"]


def latency_ms(generation: Generation) -> int:
    """Simulated milliseconds from arrival to the last token (Converse's ``metrics.latencyMs``)."""
    seq = generation.sequences[0]
    end = seq.finished_at if seq.finished_at is not None else seq.last_token_at
    return 0 if end is None or math.isnan(seq.arrival) else max(0, round((end - seq.arrival) * 1000))


def invocation_metrics(generation: Generation) -> dict[str, int]:
    """``amazon-bedrock-invocationMetrics``: what Bedrock appends to a stream's last chunk."""
    seq = generation.sequences[0]
    first = seq.ttft if seq.ttft is not None else 0.0
    return {"inputTokenCount": generation.prompt_tokens, "outputTokenCount": generation.reported_completion_tokens,
            "invocationLatency": latency_ms(generation), "firstByteLatency": round(first * 1000)}


def _text(body: dict[str, Any], name: str) -> str:
    value = body.get(name)
    if not isinstance(value, str) or not value:
        raise invalid(f"Malformed input request: #: required key [{name}] not found or not a non-empty string, "
                      "please reformat your input and try again.", name, "missing_required_parameter")
    return value


def _integer(body: dict[str, Any], name: str, low: int, high: int | None = None) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < low or (high is not None and value > high):
        bound = f"between {low} and {high}" if high is not None else f"at least {low}"
        raise invalid(f"Malformed input request: #/{name}: expected an integer {bound}, please reformat your input "
                      "and try again.", name, "invalid_value")
    return value


def _stops(value: Any, name: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(s, str) for s in value):
        raise invalid(f"Malformed input request: #/{name}: expected an array of strings, please reformat your input "
                      "and try again.", name, "invalid_type")
    return list(value)


def _known(body: dict[str, Any], fields: FieldPolicy, where: str = "#") -> None:
    """Refuse a refused key (naming why) or one the family does not define, in Bedrock's words."""
    unknown = fields.check(body)
    if unknown:
        raise invalid(f"Malformed input request: {where}: extraneous key [{unknown[0]}] is not permitted, please "
                      "reformat your input and try again.", unknown[0], "unknown_parameter")


def _completion(model: str, prompt: str, max_tokens: int | None, stops: list[str], seed: int | None = None,
                max_param: str = "max_tokens") -> GenerationRequest:
    return GenerationRequest(kind="completion", model=model, stream=False, include_usage=False, max_tokens=max_tokens,
                             n=1, stops=stops, seed=seed, prompts=[prompt], prompt_param="prompt",
                             max_tokens_param=max_param)


def _embedding(model: str, texts: list[str], dimensions: int | None, param: str) -> GenerationRequest:
    return GenerationRequest(kind="embedding", model=model, stream=False, include_usage=False, max_tokens=0, n=1,
                             stops=[], seed=None, prompts=list(texts), prompt_param=param, dimensions=dimensions)


class InvokeFamily:
    """One model family's InvokeModel: how its body reads, and its answer and stream chunks."""

    name: str  # the log's API name, e.g. "bedrock.invoke.titan"
    prefixes: tuple[str, ...]  # model ids (after any region prefix) that are this family's
    embeds = False
    #: The body's keys: honoured, accepted with no effect (sampling), refused (a feature not simulated); any
    #: other is refused as Bedrock refuses it ("extraneous key [x] is not permitted").
    fields = FieldPolicy.of(())

    def parse(self, body: dict[str, Any], model: str) -> GenerationRequest:
        raise NotImplementedError

    def answer(self, generation: Generation) -> dict[str, Any]:
        raise NotImplementedError

    def chunk(self, generation: Generation, piece: str, position: int) -> dict[str, Any]:
        """A stream chunk adding ``piece`` (token ``position``)."""
        raise NotImplementedError

    def last_chunk(self, generation: Generation) -> dict[str, Any]:
        """The chunk that ends a stream (its finish reason), before the invocation metrics are added."""
        raise NotImplementedError


def _finished(generation: Generation, length: str, stop: str, filtered: str | None = None) -> str:
    reason = generation.outputs[0].finish_reason
    if reason == "length":
        return length
    if reason in ("content_filter", "prompt_filter") and filtered is not None:
        return filtered
    return stop


TITAN_CONFIG = FieldPolicy.of(("maxTokenCount", "stopSequences"), ("temperature", "topP"))


class TitanText(InvokeFamily):
    name = "bedrock.invoke.titan"
    prefixes = ("amazon.titan-text", "amazon.titan-tg1")
    fields = FieldPolicy.of(("inputText", "textGenerationConfig"))

    def parse(self, body: dict[str, Any], model: str) -> GenerationRequest:
        config = body.get("textGenerationConfig") or {}
        if not isinstance(config, dict):
            raise invalid("Malformed input request: #/textGenerationConfig: expected type: JSONObject, please "
                          "reformat your input and try again.", "textGenerationConfig", "invalid_type")
        _known(config, TITAN_CONFIG, "#/textGenerationConfig")
        return _completion(model, _text(body, "inputText"), _integer(config, "maxTokenCount", 0, 8192),
                           _stops(config.get("stopSequences"), "stopSequences"), max_param="maxTokenCount")

    def _reason(self, generation: Generation) -> str:
        if generation.outputs[0].stop_sequence is not None:
            return "STOP_CRITERIA_MET"
        return _finished(generation, "LENGTH", "FINISH", "CONTENT_FILTERED")

    def answer(self, generation: Generation) -> dict[str, Any]:
        return {"inputTextTokenCount": generation.prompt_tokens,
                "results": [{"tokenCount": generation.reported_completion_tokens,
                             "outputText": generation.texts()[0], "completionReason": self._reason(generation)}]}

    def chunk(self, generation: Generation, piece: str, position: int) -> dict[str, Any]:
        chunk: dict[str, Any] = {"outputText": piece, "index": 0, "totalOutputTextTokenCount": position + 1,
                                 "completionReason": None}
        if position == 0:
            chunk["inputTextTokenCount"] = generation.prompt_tokens
        return chunk

    def last_chunk(self, generation: Generation) -> dict[str, Any]:
        return {"outputText": "", "index": 0, "totalOutputTextTokenCount": generation.reported_completion_tokens,
                "completionReason": self._reason(generation)}


class TitanEmbed(InvokeFamily):
    name = "bedrock.invoke.titan_embed"
    prefixes = ("amazon.titan-embed-text", "amazon.titan-embed-g1-text")
    embeds = True
    fields = FieldPolicy.of(("inputText", "dimensions", "embeddingTypes"), ("normalize",))

    def parse(self, body: dict[str, Any], model: str) -> GenerationRequest:
        dimensions = body.get("dimensions")
        if dimensions is not None and dimensions not in (256, 512, 1024):
            raise invalid("Malformed input request: #/dimensions: 256, 512 or 1024 is required, please reformat your "
                          "input and try again.", "dimensions", "invalid_value")
        if body.get("embeddingTypes") not in (None, ["float"]):
            raise invalid("embeddingTypes other than ['float'] are not simulated.", "embeddingTypes",
                          "unsupported_value")
        return _embedding(model, [_text(body, "inputText")], dimensions or 1024, "inputText")

    def answer(self, generation: Generation) -> dict[str, Any]:
        vector = generation.embeddings()[0]
        return {"embedding": vector, "inputTextTokenCount": generation.prompt_tokens,
                "embeddingsByType": {"float": vector}}


class Llama(InvokeFamily):
    name = "bedrock.invoke.llama"
    prefixes = ("meta.llama",)
    fields = FieldPolicy.of(("prompt", "max_gen_len"), ("temperature", "top_p"),
                            {"images": "images are not simulated"})

    def parse(self, body: dict[str, Any], model: str) -> GenerationRequest:
        return _completion(model, _text(body, "prompt"), _integer(body, "max_gen_len", 1, 8192), [],
                           max_param="max_gen_len")

    def answer(self, generation: Generation) -> dict[str, Any]:
        return {"generation": generation.texts()[0], "prompt_token_count": generation.prompt_tokens,
                "generation_token_count": generation.reported_completion_tokens,
                "stop_reason": _finished(generation, "length", "stop")}

    def chunk(self, generation: Generation, piece: str, position: int) -> dict[str, Any]:
        return {"generation": piece, "prompt_token_count": generation.prompt_tokens if position == 0 else None,
                "generation_token_count": position + 1, "stop_reason": None}

    def last_chunk(self, generation: Generation) -> dict[str, Any]:
        return {"generation": "", "prompt_token_count": None,
                "generation_token_count": generation.reported_completion_tokens,
                "stop_reason": _finished(generation, "length", "stop")}


class MistralInvoke(InvokeFamily):
    """Mistral's text form (``prompt``, answered with ``outputs``) and its chat form (``messages``, ``choices``)."""

    name = "bedrock.invoke.mistral"
    prefixes = ("mistral.",)
    fields = FieldPolicy.of(("prompt", "messages", "max_tokens", "stop"), ("temperature", "top_p", "top_k"),
                            {"tools": "tool calls are not simulated for Mistral on InvokeModel (use Converse)",
                             "tool_choice": "tool calls are not simulated for Mistral on InvokeModel (use Converse)",
                             "response_format": "structured output is not simulated for Mistral on InvokeModel"})

    def parse(self, body: dict[str, Any], model: str) -> GenerationRequest:
        max_tokens = _integer(body, "max_tokens", 1)
        if "messages" in body:
            messages = body["messages"]
            if not isinstance(messages, list) or not messages or not all(
                    isinstance(m, dict) and isinstance(m.get("content"), str) and isinstance(m.get("role"), str)
                    for m in messages):
                raise invalid("Malformed input request: #/messages: expected a non-empty array of {role, content}, "
                              "please reformat your input and try again.", "messages", "invalid_type")
            request = GenerationRequest(kind="chat", model=model, stream=False, include_usage=False,
                                        max_tokens=max_tokens, n=1, stops=_stops(body.get("stop"), "stop"), seed=None,
                                        messages=[ChatMessage(m["role"], m["content"]) for m in messages])
            request.wire["chat_form"] = True
            return request
        return _completion(model, _text(body, "prompt"), max_tokens, _stops(body.get("stop"), "stop"))

    def answer(self, generation: Generation) -> dict[str, Any]:
        reason = _finished(generation, "length", "stop")
        text = generation.texts()[0]
        if generation.request.wire.get("chat_form"):
            return {"choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                 "stop_reason": reason}]}
        return {"outputs": [{"text": text, "stop_reason": reason}]}

    def chunk(self, generation: Generation, piece: str, position: int) -> dict[str, Any]:
        if generation.request.wire.get("chat_form"):
            return {"choices": [{"index": 0, "message": {"role": "assistant", "content": piece}, "stop_reason": None}]}
        return {"outputs": [{"text": piece, "stop_reason": None}]}

    def last_chunk(self, generation: Generation) -> dict[str, Any]:
        reason = _finished(generation, "length", "stop")
        if generation.request.wire.get("chat_form"):
            return {"choices": [{"index": 0, "message": {"role": "assistant", "content": ""}, "stop_reason": reason}]}
        return {"outputs": [{"text": "", "stop_reason": reason}]}


class CohereCommand(InvokeFamily):
    name = "bedrock.invoke.cohere"
    prefixes = ("cohere.command",)
    fields = FieldPolicy.of(("message", "chat_history", "preamble", "max_tokens", "stop_sequences", "seed"),
                            ("temperature", "p", "k", "prompt_truncation", "frequency_penalty", "presence_penalty",
                             "return_prompt", "raw_prompting"),
                            {"documents": "document grounding is not simulated", "tools": "tool calls are not "
                             "simulated for Cohere on InvokeModel (use Converse)", "tool_results": "tool calls are not "
                             "simulated for Cohere on InvokeModel (use Converse)", "search_queries_only": "search "
                             "queries are not simulated"})

    def parse(self, body: dict[str, Any], model: str) -> GenerationRequest:
        messages = []
        preamble = body.get("preamble")
        if isinstance(preamble, str):
            messages.append(ChatMessage("system", preamble))
        history = body.get("chat_history") or []
        if not isinstance(history, list):
            raise invalid("Malformed input request: #/chat_history: expected type: JSONArray, please reformat your "
                          "input and try again.", "chat_history", "invalid_type")
        for turn in history:
            if not isinstance(turn, dict) or turn.get("role") not in ("USER", "CHATBOT", "SYSTEM"):
                raise invalid("Malformed input request: #/chat_history: each turn needs a role of USER, CHATBOT or "
                              "SYSTEM, please reformat your input and try again.", "chat_history", "invalid_value")
            role = {"USER": "user", "CHATBOT": "assistant", "SYSTEM": "system"}[turn["role"]]
            messages.append(ChatMessage(role, str(turn.get("message", ""))))
        messages.append(ChatMessage("user", _text(body, "message")))
        seed = _integer(body, "seed", 0)
        return GenerationRequest(kind="chat", model=model, stream=False, include_usage=False,
                                 max_tokens=_integer(body, "max_tokens", 1, 4096), n=1,
                                 stops=_stops(body.get("stop_sequences"), "stop_sequences"), seed=seed,
                                 messages=messages)

    def answer(self, generation: Generation) -> dict[str, Any]:
        text = generation.texts()[0]
        history = [{"role": "USER" if m.role == "user" else "CHATBOT" if m.role == "assistant" else "SYSTEM",
                    "message": m.content} for m in generation.request.messages if m.role != "system"]
        return {"response_id": _uuid_of(generation, "r"), "text": text, "generation_id": _uuid_of(generation, "g"),
                "chat_history": [*history, {"role": "CHATBOT", "message": text}],
                "finish_reason": _finished(generation, "MAX_TOKENS", "COMPLETE", "ERROR_TOXIC")}

    def chunk(self, generation: Generation, piece: str, position: int) -> dict[str, Any]:
        return {"is_finished": False, "event_type": "text-generation", "text": piece}

    def last_chunk(self, generation: Generation) -> dict[str, Any]:
        answer = self.answer(generation)
        return {"is_finished": True, "event_type": "stream-end", "finish_reason": answer["finish_reason"],
                "response": answer}


def _uuid_of(generation: Generation, salt: str) -> str:
    digest = hashlib.sha256(f"{salt}{id(generation)}".encode()).hexdigest()
    return f"{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"


class CohereEmbed(InvokeFamily):
    name = "bedrock.invoke.cohere_embed"
    prefixes = ("cohere.embed",)
    embeds = True
    fields = FieldPolicy.of(("texts", "input_type", "embedding_types"), ("truncate",),
                            {"images": "image embeddings are not simulated"})
    INPUT_TYPES = ("search_document", "search_query", "classification", "clustering")

    def parse(self, body: dict[str, Any], model: str) -> GenerationRequest:
        texts = body.get("texts")
        if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts) or len(texts) > 96:
            raise invalid("Malformed input request: #/texts: expected 1 to 96 strings, please reformat your input and "
                          "try again.", "texts", "invalid_value")
        if body.get("input_type") not in self.INPUT_TYPES:
            raise invalid(f"Malformed input request: #/input_type: must be one of {', '.join(self.INPUT_TYPES)}, "
                          "please reformat your input and try again.", "input_type", "invalid_value")
        if body.get("embedding_types") not in (None, ["float"]):
            raise invalid("embedding_types other than ['float'] are not simulated.", "embedding_types",
                          "unsupported_value")
        request = _embedding(model, texts, None, "texts")
        request.wire["texts"] = texts
        return request

    def answer(self, generation: Generation) -> dict[str, Any]:
        return {"embeddings": generation.embeddings(), "id": _uuid_of(generation, "e"),
                "response_type": "embeddings_floats", "texts": generation.request.wire["texts"]}


INVOKE_FAMILIES: tuple[InvokeFamily, ...] = (TitanText(), TitanEmbed(), Llama(), MistralInvoke(), CohereCommand(),
                                              CohereEmbed())
_REGIONS = ("us.", "eu.", "apac.", "us-gov.", "global.", "jp.", "au.", "ca.")


def family_of(model_id: str) -> InvokeFamily | None:
    """The family of a Bedrock model id (``us.meta.llama3-3-70b-instruct-v1:0`` is Llama's); None: Anthropic's body."""
    bare = model_id.split("/")[-1].lower()  # an inference profile's ARN ends in the id
    for region in _REGIONS:
        if bare.startswith(region):
            bare = bare[len(region):]
            break
    for family in INVOKE_FAMILIES:
        if bare.startswith(family.prefixes):
            return family
    return None


class FamilyStream:
    """A family's stream: each chunk its JSON, base64-encoded in a ``chunk`` event; the last adds the metrics."""

    content_type = aws_eventstream.CONTENT_TYPE

    def __init__(self, family: InvokeFamily, generation: Generation, exception: Callable[[SimError], bytes]) -> None:
        self._family = family
        self._generation = generation
        self._exception = exception

    @staticmethod
    def _event(body: dict[str, Any]) -> bytes:
        return aws_eventstream.event("chunk", {"bytes": base64.b64encode(json.dumps(body).encode()).decode()})

    def opening(self, index: int) -> bytes:
        return b""

    def token(self, index: int, position: int, piece: str) -> bytes:
        return self._event(self._family.chunk(self._generation, piece, position))

    def finish(self, index: int) -> bytes:
        return b""

    def closing(self) -> bytes:
        last = self._family.last_chunk(self._generation)
        last["amazon-bedrock-invocationMetrics"] = invocation_metrics(self._generation)
        return self._event(last)

    def error(self, error: SimError) -> bytes:
        return self._exception(error)

    def aborted(self, error: SimError) -> bytes:
        return self._exception(error)

    def truncated(self) -> bytes:
        return b""  # the end is the last chunk, which carries the finish reason and the metrics

    def malformed(self) -> bytes:
        return aws_eventstream.message(((":event-type", "chunk"), (":content-type", "application/json"),
                                        (":message-type", "event")), b'{"bytes": "eyJ0eX')


class FamilyInvoke(WireAPI):
    """One family's InvokeModel as a wire API (the route's :class:`~.bedrock.BedrockInvoke` hands requests to it):
    Bedrock's errors and headers come from ``errors``."""

    def __init__(self, family: InvokeFamily, streamed: bool, errors: WireAPI,
                 exception: Callable[[SimError], bytes]) -> None:
        self.family = family
        self.name = family.name
        self.id_prefix = "bdrk-"
        self.streamed = streamed
        self._errors = errors
        self._exception = exception

    def parse(self, body: Any, target: RequestTarget = NO_TARGET) -> GenerationRequest:
        body = expect_object(body)
        _known(body, self.family.fields)
        request = self.family.parse(body, target.params.get("model", ""))
        if self.streamed and self.family.embeds:
            raise invalid("The model is unsupported for streaming.", None, "unsupported_operation")
        request.stream = self.streamed
        return request

    def response_body(self, generation: Generation, response_id: str) -> dict[str, Any]:
        return self.family.answer(generation)

    def stream(self, generation: Generation, response_id: str) -> FamilyStream:
        return FamilyStream(self.family, generation, self._exception)

    def rate_limit_headers(self, status: Any) -> dict[str, str]:
        return self._errors.rate_limit_headers(status)

    def render_error(self, error: SimError) -> tuple[int, dict[str, Any], dict[str, str]]:
        return self._errors.render_error(error)

    def answer_headers(self) -> dict[str, str]:
        return self._errors.answer_headers()

    def content_filter(self, message: str, prompt: bool) -> SimError | None:
        return self._errors.content_filter(message, prompt)
