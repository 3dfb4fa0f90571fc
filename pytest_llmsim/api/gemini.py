"""Google's Gemini API: ``generateContent``, ``streamGenerateContent``, ``countTokens``, embeddings, models.

Routes (``/v1beta/`` and ``/v1/``; google-genai calls ``/v1/`` by default)::

    POST models/{model}:generateContent         GEMINI_GENERATE ("gemini.generate_content")
    POST models/{model}:streamGenerateContent   the same, streamed: SSE with ?alt=sse, else a JSON array
    POST models/{model}:embedContent            GEMINI_EMBED ("gemini.embed_content")
    POST models/{model}:batchEmbedContents      GEMINI_EMBED
    POST models/{model}:countTokens             GEMINI_COUNTER ("gemini.count_tokens")
    GET  models, models/{model}                 model cards (``{"models": [...]}``)

The model is the URL's, the stream flag the action's. Answers carry
``candidates`` (one per ``candidateCount``), ``finishReason`` (``STOP``,
``MAX_TOKENS``), ``usageMetadata`` with the prefix cache's hits as
``cachedContentTokenCount`` (Gemini's implicit caching), ``modelVersion``
and ``responseId``. A tool call is a ``functionCall`` part, streamed whole
once its arguments are generated (Gemini streams no partial arguments).
Errors are ``{"error": google.rpc.Status}``: ``code``, ``message``,
``status`` (``INVALID_ARGUMENT``, ``RESOURCE_EXHAUSTED``, ...) and
``details``: a ``BadRequest`` naming the field, a ``RetryInfo`` with the
``retryDelay`` of a 429. Gemini sends no rate-limit headers; neither does
this. Any API key is accepted (``x-goog-api-key`` or ``?key=``).
"""

from __future__ import annotations

import json
from json.encoder import encode_basestring_ascii
from typing import TYPE_CHECKING, Any

from ..sim import GenerationRequest, RateLimitStatus, SimError, fast_json, invalid
from .base import NO_TARGET, PIECE_MARK, RequestTarget, WireAPI
from .gemini_fields import camel_keys, gemini_messages, gemini_tool_use, generation_config, unknown_fields
from .tools_text import tools_text
from .validation import describe, expect_object, is_int

if TYPE_CHECKING:
    from ..sim.generation import Generation
    from ..sim.planned import PlannedOutput

__all__ = ["GEMINI_COUNTER", "GEMINI_EMBED", "GEMINI_GENERATE", "cached_content_resource", "gemini_key",
           "gemini_model_card", "gemini_model_list", "parse_cached_content"]

# google.rpc.Code names by HTTP status (https://cloud.google.com/apis/design/errors)
STATUS_NAMES = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 404: "NOT_FOUND",
                408: "DEADLINE_EXCEEDED", 409: "ABORTED", 413: "INVALID_ARGUMENT", 429: "RESOURCE_EXHAUSTED",
                499: "CANCELLED", 500: "INTERNAL", 501: "UNIMPLEMENTED", 502: "UNAVAILABLE", 503: "UNAVAILABLE",
                504: "DEADLINE_EXCEEDED"}
RETRY_HEADERS = ("retry-after", "retry-after-ms")
GENERATE_FIELDS = ("contents", "systemInstruction", "tools", "toolConfig", "generationConfig", "safetySettings",
                   "cachedContent", "labels", "model", "serviceTier", "store", "modelArmorConfig")
REFUSED_FIELDS = {"modelArmorConfig": "Model Armor screening is not simulated"}
GENERATE_ACTIONS = ("generateContent", "streamGenerateContent")
MAX_BATCH_EMBEDDINGS = 250
FINISH_REASONS = {"length": "MAX_TOKENS", "content_filter": "SAFETY"}
BLOCKED = "prompt_filter"  # a blocked prompt: no candidates, promptFeedback.blockReason


def gemini_key(environ: dict[str, Any]) -> bool:
    """Whether a request carries a Google API key (``x-goog-api-key`` or ``?key=``): Gemini's, on a path
    it shares with OpenAI (``GET /v1/models``)."""
    query = environ.get("QUERY_STRING") or ""
    return "HTTP_X_GOOG_API_KEY" in environ or query.startswith("key=") or "&key=" in query


class GeminiErrors(WireAPI):
    """``{"error": google.rpc.Status}``, the same status as HTTP; no rate-limit headers."""

    def rate_limit_headers(self, status: RateLimitStatus) -> dict[str, str]:
        return {}

    def render_error(self, error: SimError) -> tuple[int, dict[str, Any], dict[str, str]]:
        headers = {name: value for name, value in error.headers.items() if name.lower() not in RETRY_HEADERS}
        return error.status, {"error": status_body(error)}, headers


def status_body(error: SimError) -> dict[str, Any]:
    """``error`` as a ``google.rpc.Status``: a field violation for a bad field, a retry delay for a 429."""
    details: list[dict[str, Any]] = []
    if error.code == "max_tokens_too_large":  # as Gemini words it
        most = error.details["maximum"]
        error = SimError(400, f"The requested maxOutputTokens {error.details['requested']} is out of range: the "
                              f"supported range is from 1 (inclusive) to {most + 1} (exclusive).", param=error.param,
                         code=error.code)
    if error.param is not None:
        details.append({"@type": "type.googleapis.com/google.rpc.BadRequest",
                        "fieldViolations": [{"field": error.param, "description": error.message}]})
    delay = _retry_delay(error)
    if delay is not None:
        details.append({"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": f"{delay:g}s"})
    body: dict[str, Any] = {"code": error.status, "message": error.message,
                            "status": STATUS_NAMES.get(error.status, "UNKNOWN" if error.status < 500 else "INTERNAL")}
    if details:
        body["details"] = details
    return body


def _retry_delay(error: SimError) -> float | None:
    if error.status != 429:
        return None
    millis = next((value for name, value in error.headers.items() if name.lower() == "retry-after-ms"), None)
    if millis is not None:
        return round(int(millis) / 1000, 3)
    return round(error.rate_limit.reset, 3) if error.rate_limit is not None else None


def _model_in(target: RequestTarget) -> str:
    return target.params.get("model", "")


def parse_generate(body: Any, model: str, stream: bool) -> GenerationRequest:
    """A ``GenerateContentRequest`` into the shared request model."""
    body = camel_keys(expect_object(body))
    unknown_fields(body, GENERATE_FIELDS, "")
    for key, why in REFUSED_FIELDS.items():
        if body.get(key) is not None:
            raise invalid(f"'{key}' is not supported by pytest-llmsim: {why}.", key, "unsupported_parameter")
    cached = body.get("cachedContent")
    if cached is not None:
        if not isinstance(cached, str) or not cached.startswith("cachedContents/"):
            raise invalid("Invalid value at 'cachedContent': expected a name 'cachedContents/ID'.", "cachedContent",
                          "invalid_value")
        given = [key for key in ("systemInstruction", "tools", "toolConfig") if body.get(key) is not None]
        if given:
            raise invalid(f"CachedContent can not be used with GenerateContent request setting {given[0]}; move "
                          "it to the cached content.", given[0], "invalid_value")
    messages = gemini_messages(body)
    config = generation_config(body)
    tools = body.get("tools")
    parsed = GenerationRequest(kind="chat", model=model, stream=stream, include_usage=True,
                               max_tokens=config["max_tokens"], max_tokens_param="generationConfig.maxOutputTokens",
                               n=config["n"], stops=config["stops"], seed=config["seed"], messages=messages,
                               prompt_param="contents", tools_text=tools_text(tools),
                               tool_use=gemini_tool_use(body), output_format=config["output_format"])
    if cached is not None:  # the cached content's messages go first, reported as cached tokens
        parsed.previous_id, parsed.previous_param, parsed.cache_continued = cached, "cachedContent", True
    return parsed


CACHED_CONTENT_FIELDS = ("model", "contents", "systemInstruction", "tools", "toolConfig", "ttl", "expireTime",
                         "displayName")


def parse_cached_content(body: Any) -> tuple[GenerationRequest, dict[str, Any]]:
    """A ``CachedContent`` to create: its prompt (``model``, ``contents``, ``systemInstruction``, ``tools``),
    and the fields its resource echoes (``displayName``, ``ttl``)."""
    body = camel_keys(expect_object(body))
    unknown_fields(body, CACHED_CONTENT_FIELDS, "")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise invalid("model is required (e.g. 'models/gemini-2.5-flash').", "model", "missing_required_parameter")
    ttl = body.get("ttl", "3600s")
    if not isinstance(ttl, str) or not ttl.endswith("s"):
        raise invalid("Invalid value at 'ttl': a duration such as '300s'.", "ttl", "invalid_value")
    prompt = {key: body[key] for key in ("contents", "systemInstruction", "tools", "toolConfig") if key in body}
    return parse_generate(prompt, model.removeprefix("models/"), False), {
        "model": model if model.startswith("models/") else f"models/{model}", "ttl": ttl,
        "displayName": body.get("displayName", "")}


def cached_content_resource(name: str, fields: dict[str, Any], tokens: int) -> dict[str, Any]:
    """The ``CachedContent`` resource the API answers with (its contents are not echoed, as Gemini's)."""
    return {"name": name, "model": fields["model"], "displayName": fields["displayName"],
            "usageMetadata": {"totalTokenCount": tokens}, "createTime": "2026-01-01T00:00:00Z",
            "updateTime": "2026-01-01T00:00:00Z", "expireTime": "2099-01-01T00:00:00Z", "ttl": fields["ttl"]}


class GeminiGenerate(GeminiErrors):
    """``models/{model}:generateContent`` and ``:streamGenerateContent``."""

    def __init__(self, name: str = "gemini.generate_content", id_prefix: str = "gem") -> None:
        self.name = name  # Vertex AI serves the same bodies under its own name
        self.id_prefix = id_prefix

    def parse(self, body: Any, target: RequestTarget = NO_TARGET) -> GenerationRequest:
        action = target.params.get("action", "")
        if action not in GENERATE_ACTIONS:
            raise SimError(404, f"Method not found: models/{_model_in(target)}:{action} (pytest-llmsim serves "
                                f"{', '.join(GENERATE_ACTIONS)}, embedContent, batchEmbedContents and countTokens).",
                           param="action", code="unknown_action")
        parsed = parse_generate(body, _model_in(target), action == "streamGenerateContent")
        parsed.wire["sse"] = target.query.get("alt") == "sse"
        return parsed

    def content_filter(self, message: str, prompt: bool) -> SimError | None:
        """A blocked prompt: no candidates, ``promptFeedback.blockReason: SAFETY``; a filtered answer:
        ``finishReason: SAFETY``."""
        return None

    def response_body(self, generation: Generation, response_id: str) -> dict[str, Any]:
        if generation.outputs[0].finish_reason == BLOCKED:
            return _blocked(generation, response_id)
        candidates = [{"content": {"role": "model", "parts": _parts(generation, i)},
                       "finishReason": _finish_reason(output), "index": i}
                      for i, output in enumerate(generation.outputs)]
        return _envelope(generation, response_id, candidates, usage(generation))

    def stream(self, generation: Generation, response_id: str) -> GeminiStream:
        return GeminiStream(generation, response_id, sse=bool(generation.request.wire.get("sse")))


def _blocked(generation: Generation, response_id: str) -> dict[str, Any]:
    return {"promptFeedback": {"blockReason": "SAFETY"}, "usageMetadata": usage(generation),
            "modelVersion": generation.request.model, "responseId": response_id}


def _finish_reason(output: PlannedOutput) -> str:
    return FINISH_REASONS.get(output.finish_reason, "STOP")


def _call_part(name: str, arguments: str) -> dict[str, Any]:
    try:
        args = json.loads(arguments)
    except ValueError:
        args = {}  # maxOutputTokens cut the arguments: Gemini's args is always an object
    return {"functionCall": {"name": name, "args": args if isinstance(args, dict) else {}}}


def _parts(generation: Generation, index: int) -> list[dict[str, Any]]:
    output = generation.outputs[index]
    if output.calls:
        return [_call_part(call.name, call.arguments) for call in output.calls]
    return [{"text": generation.texts()[index]}]


def usage(generation: Generation, final: bool = True) -> dict[str, Any]:
    """``usageMetadata``: the prefix cache's hits as ``cachedContentTokenCount`` (counted in the prompt)."""
    # the prefix cache's hits (implicit caching), or a cachedContent's whole prompt (explicit caching)
    prompt, cached = generation.prompt_tokens, max(generation.cached_tokens, generation.marked_prompt_tokens or 0)
    body: dict[str, Any] = {"promptTokenCount": prompt}
    if final:
        body["candidatesTokenCount"] = generation.reported_completion_tokens
    body["totalTokenCount"] = prompt + (generation.reported_completion_tokens if final else 0)
    if cached:
        body["cachedContentTokenCount"] = cached
        body["cacheTokensDetails"] = [{"modality": "TEXT", "tokenCount": cached}]
    body["promptTokensDetails"] = [{"modality": "TEXT", "tokenCount": prompt}]
    return body


def _envelope(generation: Generation, response_id: str, candidates: list[dict[str, Any]],
              usage_metadata: dict[str, Any]) -> dict[str, Any]:
    return {"candidates": candidates, "usageMetadata": usage_metadata, "modelVersion": generation.request.model,
            "responseId": response_id}


class GeminiStream:
    """A ``GenerateContentResponse`` per token (``data:`` events with ``alt=sse``, else the elements of one
    JSON array), the last one of each candidate with its ``finishReason`` and the whole usage."""

    _MARK = PIECE_MARK

    def __init__(self, generation: Generation, response_id: str, sse: bool) -> None:
        self._generation = generation
        self._id = response_id
        self._sse = sse
        self.content_type = "text/event-stream" if sse else "application/json; charset=utf-8"
        self._count = 0  # elements written (a JSON array separates them with commas)
        self._templates: dict[int, tuple[bytes, bytes]] = {}

    def _frame(self, body: bytes) -> bytes:
        self._count += 1
        if self._sse:
            return b"data: " + body + b"\r\n\r\n"
        return (b"[" if self._count == 1 else b",\r\n") + body + b"\n"  # Google's framing: "\n,\r\n" between

    def opening(self, index: int) -> bytes:
        return b""

    def token(self, index: int, position: int, piece: str) -> bytes:
        output = self._generation.outputs[index]
        if output.calls:  # a call goes out whole, with its last token
            _, call = output.call_at(position)
            if position != call.end - 1:
                return b""
            return self._frame(fast_json.dumps(self._chunk(index, [_call_part(call.name, call.arguments)])))
        template = self._templates.get(index)
        if template is None:
            body = fast_json.dumps(self._chunk(index, [{"text": self._MARK}]))
            head, tail = body.split(fast_json.dumps(self._MARK))
            template = self._templates[index] = (head, tail)
        return self._frame(template[0] + encode_basestring_ascii(piece).encode() + template[1])

    def _chunk(self, index: int, parts: list[dict[str, Any]], reason: str | None = None) -> dict[str, Any]:
        candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": index}
        if reason is not None:
            candidate["finishReason"] = reason
        return _envelope(self._generation, self._id, [candidate], usage(self._generation, final=reason is not None))

    def finish(self, index: int) -> bytes:
        output = self._generation.outputs[index]
        if output.finish_reason == BLOCKED:
            return b"" if index else self._frame(fast_json.dumps(_blocked(self._generation, self._id)))
        return self._frame(fast_json.dumps(self._chunk(index, [{"text": ""}], _finish_reason(output))))

    def closing(self) -> bytes:
        return b"" if self._sse else (b"[]" if self._count == 0 else b"]")

    def error(self, error: SimError) -> bytes:
        framed = self._frame(fast_json.dumps({"error": status_body(error)}))
        return framed if self._sse else framed + b"]"

    def aborted(self, error: SimError) -> bytes:
        return self.error(error)

    def truncated(self) -> bytes:
        return self.closing()  # the JSON array closed (SSE: nothing); no finishReason chunk

    def malformed(self) -> bytes:
        body = fast_json.dumps(self._chunk(0, [{"text": ""}]))
        return self._frame(body[:len(body) // 2])


def _embed_request(request: Any, param: str) -> tuple[str, int | None]:
    request = camel_keys(expect_object(request) if not param else _expect(request, param))
    where = param.rstrip(".")
    unknown_fields(request, ("model", "content", "taskType", "title", "outputDimensionality", "embedContentConfig"),
                   where)
    config = request.get("embedContentConfig")  # Vertex AI nests the options
    if config is not None:
        config = camel_keys(_expect(config, f"{param}embedContentConfig."))
        unknown_fields(config, ("taskType", "title", "outputDimensionality", "autoTruncate"),
                       f"{param}embedContentConfig")
        request = {**request, **config}
    content = request.get("content")
    parts = content.get("parts") if isinstance(content, dict) else None
    if not isinstance(parts, list) or not parts or not all(isinstance(p, dict) and isinstance(p.get("text"), str)
                                                           for p in parts):
        raise invalid(f"Invalid value at '{param}content': a content of text parts is required.", f"{param}content",
                      "invalid_value")
    dimensions = request.get("outputDimensionality")
    if dimensions is not None and (not is_int(dimensions) or dimensions < 1):
        raise invalid(f"Invalid value at '{param}outputDimensionality': expected a positive integer, got "
                      f"{describe(dimensions)}.", f"{param}outputDimensionality", "invalid_value")
    return "".join(part["text"] for part in parts), dimensions


def _expect(value: Any, param: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise invalid(f"Invalid value at '{param.rstrip('.')}': expected an object.", param.rstrip("."), "invalid_type")
    return value


class GeminiEmbed(GeminiErrors):
    """``models/{model}:embedContent`` (one ``embedding``) and ``:batchEmbedContents`` (``embeddings``)."""

    def __init__(self, name: str = "gemini.embed_content", id_prefix: str = "gemb") -> None:
        self.name = name  # Vertex AI serves the same bodies under its own name
        self.id_prefix = id_prefix

    def parse(self, body: Any, target: RequestTarget = NO_TARGET) -> GenerationRequest:
        body = camel_keys(expect_object(body))
        batch = "requests" in body or target.params.get("action") == "batchEmbedContents"
        if batch:
            unknown_fields(body, ("requests",), "")
            requests = body.get("requests")
            if not isinstance(requests, list) or not requests or len(requests) > MAX_BATCH_EMBEDDINGS:
                raise invalid(f"Invalid value at 'requests': 1 to {MAX_BATCH_EMBEDDINGS} requests are required.",
                              "requests", "invalid_value")
            read = [_embed_request(item, f"requests[{i}].") for i, item in enumerate(requests)]
        else:
            read = [_embed_request(body, "")]
        dimensions = {d for _, d in read}
        if len(dimensions) > 1:
            raise invalid("Every request of a batch must ask for the same outputDimensionality.",
                          "requests", "invalid_value")
        texts: list[str | list[int]] = [text for text, _ in read]
        if any(text == "" for text in texts):
            raise invalid("Invalid value at 'content': the text must not be empty.", "content", "invalid_value")
        return GenerationRequest(kind="embedding", model=_model_in(target), stream=False, include_usage=False,
                                 max_tokens=0, n=1, stops=[], seed=None, prompts=texts,
                                 prompt_param="requests" if batch else "content", dimensions=dimensions.pop(),
                                 wire={"batch": batch})

    def response_body(self, generation: Generation, response_id: str) -> dict[str, Any]:
        vectors = [{"values": vector} for vector in generation.embeddings()]
        if generation.request.wire["batch"]:
            return {"embeddings": vectors}
        return {"embedding": vectors[0]}

    def stream(self, generation: Generation, response_id: str) -> GeminiStream:
        raise TypeError("embeddings are never streamed")  # parse() never asks for a stream


class GeminiCounter:
    """``models/{model}:countTokens``: ``contents`` (or a whole ``generateContentRequest``) counted."""

    def __init__(self, name: str = "gemini.count_tokens") -> None:
        self.name = name

    def parse_count(self, body: Any, target: RequestTarget) -> GenerationRequest:
        body = camel_keys(expect_object(body))
        unknown_fields(body, ("contents", "generateContentRequest"), "")
        inner = body.get("generateContentRequest")
        return parse_generate(inner if isinstance(inner, dict) else body, _model_in(target), False)

    def count_body(self, count: int, request: GenerationRequest) -> dict[str, Any]:
        return {"totalTokens": count, "promptTokensDetails": [{"modality": "TEXT", "tokenCount": count}]}


def gemini_model_card(name: str, max_model_len: int, prefix: str = "models/") -> dict[str, Any]:
    """A ``Model`` as the Gemini API lists it (Vertex AI names it ``publishers/google/models/NAME``)."""
    return {"name": f"{prefix}{name}", "version": "001", "displayName": name,
            "description": "A model simulated by pytest-llmsim.", "inputTokenLimit": max_model_len,
            "outputTokenLimit": max_model_len,
            "supportedGenerationMethods": ["generateContent", "countTokens", "embedContent", "batchEmbedContents"]}


def gemini_model_list(cards: list[dict[str, Any]]) -> dict[str, Any]:
    """The answer of ``GET models`` (one page: every served model)."""
    return {"models": cards}


GEMINI_GENERATE = GeminiGenerate()
GEMINI_EMBED = GeminiEmbed()
GEMINI_COUNTER = GeminiCounter()
