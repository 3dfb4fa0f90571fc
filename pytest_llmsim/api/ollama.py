"""Ollama's native API: ``/api/chat``, ``/api/generate``, ``/api/embed``, ``/api/embeddings`` and the model routes.

Streams are newline-delimited JSON and on by default (``stream: false``
answers one object): an object per token with ``done: false``, then the
final one with ``done: true``, ``done_reason`` and the timings in
nanoseconds, derived from the simulated ones (``total_duration`` arrival to
the last token, ``prompt_eval_duration`` to the first, ``eval_duration``
the rest, ``load_duration`` the wait for the model to load: ``ollama_load_seconds``
on a model's first request and on the first after its ``keep_alive`` ran out,
default 5 minutes; ``/api/ps`` lists the models loaded). A tool call goes out whole in one object, as
Ollama streams calls. Errors are ``{"error": "..."}`` with the status (404
``model 'x' not found`` under ``strict_models``); a mid-stream error is an
``{"error"}`` line, which the ``ollama`` client raises.
"""

from __future__ import annotations

import json
import math
import re
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

from ..sim import ChatMessage, GenerationRequest, RateLimitStatus, SimError, fast_json, invalid
from ..sim.request import ReasoningAsk
from .base import NO_TARGET, RequestTarget, WireAPI
from .tool_fields import openai_output_format, openai_tool_use
from .tools_text import tools_text
from .validation import describe, expect_object, is_int

if TYPE_CHECKING:
    from ..sim.generation import Generation

__all__ = ["OLLAMA_CHAT", "OLLAMA_EMBED", "OLLAMA_EMBEDDINGS", "OLLAMA_GENERATE", "keep_alive_seconds",
           "model_not_found", "ollama_model", "ollama_ps", "ollama_show", "ollama_tags", "ollama_version"]

NDJSON = "application/x-ndjson"
OPTIONS = ("num_predict", "stop", "seed", "num_ctx", "temperature", "top_p", "top_k", "min_p", "repeat_penalty",
           "repeat_last_n", "presence_penalty", "frequency_penalty", "num_keep", "typical_p", "num_batch",
           "num_gpu", "num_thread", "mirostat", "mirostat_tau", "mirostat_eta", "penalize_newline", "numa",
           "use_mmap", "main_gpu", "low_vram")
CHAT_FIELDS = ("model", "messages", "tools", "format", "options", "stream", "keep_alive", "think")
GENERATE_FIELDS = ("model", "prompt", "suffix", "system", "template", "context", "raw", "format", "options",
                   "stream", "keep_alive", "images", "think")
VERSION = "0.12.0"
DEFAULT_KEEP_ALIVE = 300.0  # Ollama's default, 5m
MAX_DURATION_SECONDS = (2**63 - 1) / 1e9  # Go's time.Duration (about 292 years): longer ones do not parse
MESSAGE_FIELDS = frozenset({"role", "content", "images", "tool_calls", "tool_name", "thinking"})
# Simulated seconds each token takes at least in the reported durations: at zero latency a client that
# prints tokens per second (eval_count / eval_duration, as Ollama's CLI and Open WebUI do) still divides by more
# than 0. A real server never reports 0.
MIN_SECONDS_PER_TOKEN = 1e-4
_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_UNIT_SECONDS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def _now() -> str:
    return datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")


def _unknown(body: dict[str, Any], fields: tuple[str, ...] | frozenset[str], where: str = "") -> list[str]:
    """The fields of ``body`` Ollama does not define (``where`` prefixes their names). Ollama's JSON binding
    skips them; the backend lists them in the request's ``ignored_fields`` (``strict_fields`` refuses them)."""
    return [where + key for key in body if key not in fields]


def _model(body: dict[str, Any]) -> str:
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise invalid("model is required", "model", "missing_required_parameter")
    return model.removesuffix(":latest")  # Ollama's default tag names the same model


def _options(body: dict[str, Any]) -> tuple[int | None, list[str], int | None]:
    """``options``: ``num_predict`` (max tokens; -1 no limit), ``stop``, ``seed``; the rest accepted."""
    options = body.get("options") or {}
    if not isinstance(options, dict):
        raise invalid("options must be an object", "options", "invalid_type")
    for key in options:
        if key not in OPTIONS:
            raise invalid(f"invalid option provided: {key!r}", f"options.{key}", "unknown_field")
    predict = options.get("num_predict")
    if predict is not None and (not is_int(predict) or predict == 0 or predict < -2):
        raise invalid(f"options.num_predict must be a positive integer, -1 or -2, not {describe(predict)}",
                      "options.num_predict", "invalid_value")
    stop = options.get("stop") or []
    if isinstance(stop, str):
        stop = [stop]
    if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop):
        raise invalid("options.stop must be a list of strings", "options.stop", "invalid_value")
    seed = options.get("seed")
    limit = predict if isinstance(predict, int) and predict > 0 else None
    return limit, list(stop), (seed if is_int(seed) else None)


def _format(body: dict[str, Any]) -> Any:
    value = body.get("format")
    if value in (None, ""):
        return None
    if value == "json":
        return openai_output_format({"response_format": {"type": "json_object"}})
    if isinstance(value, dict):
        return openai_output_format({"response_format": {"type": "json_schema", "json_schema": {
            "name": "format", "schema": value}}})
    raise invalid(f"format must be 'json' or a JSON Schema, not {describe(value)}", "format", "invalid_value")


def keep_alive_seconds(body: dict[str, Any]) -> float:
    """``keep_alive``: seconds (a number) or a Go duration (``"5m"``, ``"1h30m"``); negative keeps the model
    loaded for ever, 0 unloads it when the request ends. Absent: 5 minutes."""
    value = body.get("keep_alive")
    if value is None:
        return DEFAULT_KEEP_ALIVE
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        seconds = float(value)
        if abs(seconds) > MAX_DURATION_SECONDS:
            raise invalid(f"keep_alive: {value!r} seconds is longer than a duration can be (at most "
                          f"{MAX_DURATION_SECONDS:.4g} s, about 292 years)", "keep_alive", "invalid_value")
    elif isinstance(value, str) and value:
        text = value.strip()
        sign = -1.0 if text.startswith("-") else 1.0
        text = text.lstrip("+-")
        parts = _DURATION_PART.findall(text)
        if text == "0":
            parts = [("0", "s")]
        if not parts or "".join(number + unit for number, unit in parts) != text:
            raise invalid(f"time: invalid duration {value!r}", "keep_alive", "invalid_value")
        seconds = sign * sum(float(number) * _UNIT_SECONDS[unit] for number, unit in parts)
        if abs(seconds) > MAX_DURATION_SECONDS:  # Go's ParseDuration: an overflow is an invalid duration
            raise invalid(f"time: invalid duration {value!r}", "keep_alive", "invalid_value")
    else:
        raise invalid(f"keep_alive must be a number of seconds or a duration such as '5m', not {describe(value)}",
                      "keep_alive", "invalid_type")
    return math.inf if seconds < 0 else seconds


def _think(body: dict[str, Any]) -> ReasoningAsk | None:
    """``think``: true (thinking of medium length), or ``"low"``, ``"medium"``, ``"high"`` (gpt-oss's levels)."""
    value = body.get("think")
    if value in (None, False):
        return None
    if value is True:
        return ReasoningAsk(effort="medium", param="think")
    if value in ("low", "medium", "high"):
        return ReasoningAsk(effort=value, param="think")
    raise invalid(f"invalid think value: {describe(value)} (true, false, 'low', 'medium' or 'high')", "think",
                  "invalid_value")


def parse_chat(body: Any) -> GenerationRequest:
    body = expect_object(body)
    ignored = _unknown(body, CHAT_FIELDS)
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise invalid("messages must be a list", "messages", "invalid_type")
    parsed = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") not in ("system", "user", "assistant", "tool"):
            raise invalid(f"messages[{i}].role must be system, user, assistant or tool", f"messages[{i}].role",
                          "invalid_value")
        ignored += _unknown(message, MESSAGE_FIELDS, f"messages[{i}].")  # LiteLLM's tool_call_id, say
        if not isinstance(message.get("thinking", ""), str):  # an earlier answer's thinking: not counted
            raise invalid(f"messages[{i}].thinking must be a string", f"messages[{i}].thinking", "invalid_type")
        if message.get("images"):
            raise invalid(f"messages[{i}].images: images are not simulated by pytest-llmsim",
                          f"messages[{i}].images", "unsupported_value")
        content = message.get("content", "")
        if not isinstance(content, str):
            raise invalid(f"messages[{i}].content must be a string", f"messages[{i}].content", "invalid_type")
        if message.get("tool_calls"):
            content += json.dumps(message["tool_calls"])
        parsed.append(ChatMessage(message["role"], content))
    if not parsed:
        parsed = [ChatMessage("user", "")]  # Ollama answers an empty chat (it loads the model)
    max_tokens, stops, seed = _options(body)
    tools = body.get("tools")
    return GenerationRequest(kind="chat", model=_model(body), stream=body.get("stream", True) is not False,
                             include_usage=True, max_tokens=max_tokens, max_tokens_param="options.num_predict",
                             n=1, stops=stops, seed=seed, messages=parsed,
                             tools_text=tools_text(tools),
                             tool_use=openai_tool_use({"tools": tools}, flat=False), output_format=_format(body),
                             keep_alive=keep_alive_seconds(body), reasoning=_think(body), ignored_fields=ignored)


def parse_generate(body: Any) -> GenerationRequest:
    body = expect_object(body)
    ignored = _unknown(body, GENERATE_FIELDS)
    if body.get("images"):
        raise invalid("images are not simulated by pytest-llmsim", "images", "unsupported_value")
    prompt = body.get("prompt", "")
    if not isinstance(prompt, str):
        raise invalid("prompt must be a string", "prompt", "invalid_type")
    max_tokens, stops, seed = _options(body)
    system = body.get("system")
    messages = ([ChatMessage("system", system)] if isinstance(system, str) and system else []) + [
        ChatMessage("user", prompt)]
    return GenerationRequest(kind="chat", model=_model(body), stream=body.get("stream", True) is not False,
                             include_usage=True, max_tokens=max_tokens, max_tokens_param="options.num_predict",
                             n=1, stops=stops, seed=seed, messages=messages, prompt_param="prompt",
                             output_format=_format(body), wire={"generate": True},
                             keep_alive=keep_alive_seconds(body), reasoning=_think(body), ignored_fields=ignored)


def _durations(generation: Generation) -> dict[str, int]:
    """Ollama's durations in nanoseconds of simulated time, each token taking at least
    ``MIN_SECONDS_PER_TOKEN`` (so a division by them is always defined)."""
    seq = generation.sequences[0]
    first = seq.first_token_at if seq.first_token_at is not None else seq.finished_at
    end = seq.finished_at if seq.finished_at is not None else first
    load = round(generation.load_time * 1e9)
    prompt_floor = max(1, generation.prompt_tokens) * MIN_SECONDS_PER_TOKEN
    eval_floor = max(1, generation.completion_tokens) * MIN_SECONDS_PER_TOKEN
    if first is None or end is None or seq.arrival != seq.arrival:  # NaN: never ran
        prompt_eval, evaluated = prompt_floor, eval_floor
    else:
        prompt_eval, evaluated = max(first - seq.arrival, prompt_floor), max(end - first, eval_floor)
    prompt_ns, eval_ns = round(prompt_eval * 1e9), round(evaluated * 1e9)
    return {"total_duration": load + prompt_ns + eval_ns, "load_duration": load, "prompt_eval_duration": prompt_ns,
            "eval_duration": eval_ns}


def _done(generation: Generation) -> dict[str, Any]:
    reason = "length" if generation.outputs[0].finish_reason == "length" else "stop"
    return {"done": True, "done_reason": reason, **_durations(generation),
            "prompt_eval_count": generation.prompt_tokens, "eval_count": generation.reported_completion_tokens}


def _tool_calls(generation: Generation, calls: Any) -> list[dict[str, Any]]:
    out = []
    for call in calls:
        try:
            arguments = json.loads(call.arguments)
        except ValueError:
            arguments = {}
        out.append({"function": {"name": call.name, "arguments": arguments if isinstance(arguments, dict) else {}}})
    return out


class OllamaErrors(WireAPI):
    """``{"error": "..."}`` with the status; Ollama sends no rate-limit headers."""

    def rate_limit_headers(self, status: RateLimitStatus) -> dict[str, str]:
        return {}

    def render_error(self, error: SimError) -> tuple[int, dict[str, Any], dict[str, str]]:
        message = error.message
        if error.code == "model_not_found":
            message = f"model '{error.message.split('`')[1] if '`' in error.message else ''}' not found"
        return error.status, {"error": message}, dict(error.headers)


class OllamaChat(OllamaErrors):
    """``POST /api/chat`` (``generate``: ``POST /api/generate``)."""

    def __init__(self, generate: bool) -> None:
        self.generate = generate
        self.name = "ollama.generate" if generate else "ollama.chat"
        self.id_prefix = "ol-"

    def parse(self, body: Any, target: RequestTarget = NO_TARGET) -> GenerationRequest:
        return parse_generate(body) if self.generate else parse_chat(body)

    def _piece(self, generation: Generation, text: str, calls: Any = (), thinking: str = "") -> dict[str, Any]:
        body: dict[str, Any] = {"model": generation.request.model, "created_at": _now()}
        if self.generate:
            body["response"] = text
            if thinking:
                body["thinking"] = thinking
        else:
            message: dict[str, Any] = {"role": "assistant", "content": text}
            if thinking:
                message["thinking"] = thinking
            if calls:
                message["tool_calls"] = _tool_calls(generation, calls)
            body["message"] = message
        return body

    def response_body(self, generation: Generation, response_id: str) -> dict[str, Any]:
        output = generation.outputs[0]
        text = "" if output.calls else generation.texts()[0]
        return {**self._piece(generation, text, output.calls, output.reasoning_text), **_done(generation)}

    def stream(self, generation: Generation, response_id: str) -> OllamaStream:
        return OllamaStream(self, generation)


class OllamaStream:
    """One JSON object per line: a piece per token, then the ``done`` object with the timings."""

    content_type = NDJSON

    def __init__(self, api: OllamaChat, generation: Generation) -> None:
        self._api = api
        self._generation = generation

    def _line(self, body: dict[str, Any]) -> bytes:
        return fast_json.dumps(body) + b"\n"

    def opening(self, index: int) -> bytes:
        return b""

    def token(self, index: int, position: int, piece: str) -> bytes:
        output = self._generation.outputs[0]
        if position < output.reasoning:
            return self._line({**self._api._piece(self._generation, "", thinking=piece), "done": False})
        if output.calls:  # a call goes out whole, with its last token
            _, call = output.call_at(position)
            if position != call.end - 1:
                return b""
            return self._line({**self._api._piece(self._generation, "", (call,)), "done": False})
        return self._line({**self._api._piece(self._generation, piece), "done": False})

    def finish(self, index: int) -> bytes:
        return self._line({**self._api._piece(self._generation, ""), **_done(self._generation)})

    def closing(self) -> bytes:
        return b""

    def error(self, error: SimError) -> bytes:
        return self._line({"error": error.message})

    def aborted(self, error: SimError) -> bytes:
        return self.error(error)

    def truncated(self) -> bytes:
        return b""  # its end is the done line, which carries the done reason and counts

    def malformed(self) -> bytes:
        return self._line(self._api._piece(self._generation, ""))[:-10] + b"\n"


class OllamaEmbed(OllamaErrors):
    """``POST /api/embed`` (``input``: a string or a list) and the older ``/api/embeddings`` (``prompt``)."""

    def __init__(self, legacy: bool) -> None:
        self.legacy = legacy
        self.name = "ollama.embeddings" if legacy else "ollama.embed"
        self.id_prefix = "ole-"

    def parse(self, body: Any, target: RequestTarget = NO_TARGET) -> GenerationRequest:
        body = expect_object(body)
        ignored = _unknown(body, ("model", "prompt", "options", "keep_alive") if self.legacy else
                           ("model", "input", "truncate", "options", "keep_alive", "dimensions"))
        value = body.get("prompt" if self.legacy else "input")
        if self.legacy and value is not None and not isinstance(value, str):
            # its prompt is one string: Go's JSON binding refuses a list (it hid a gateway's bug to take one)
            kind = ("array" if isinstance(value, list) else "object" if isinstance(value, dict)
                    else "bool" if isinstance(value, bool) else "number")
            raise invalid(f"json: cannot unmarshal {kind} into Go struct field EmbeddingRequest.prompt of type "
                          f"string", "prompt", "invalid_type")
        inputs = [value] if isinstance(value, str) else value
        if not isinstance(inputs, list) or not inputs or not all(isinstance(i, str) and i for i in inputs):
            field = "prompt" if self.legacy else "input"
            raise invalid(f"{field} must be a non-empty string or list of strings", field, "invalid_value")
        dimensions = body.get("dimensions")
        if dimensions is not None and (not is_int(dimensions) or dimensions < 1):
            raise invalid("dimensions must be a positive integer", "dimensions", "invalid_value")
        texts: list[str | list[int]] = list(inputs)
        return GenerationRequest(kind="embedding", model=_model(body), stream=False, include_usage=False,
                                 max_tokens=0, n=1, stops=[], seed=None, prompts=texts, dimensions=dimensions,
                                 prompt_param="prompt" if self.legacy else "input",
                                 keep_alive=keep_alive_seconds(body), ignored_fields=ignored)

    def response_body(self, generation: Generation, response_id: str) -> dict[str, Any]:
        vectors = generation.embeddings()
        if self.legacy:
            return {"embedding": vectors[0]}
        durations = _durations(generation)
        return {"model": generation.request.model, "embeddings": vectors,
                "total_duration": durations["total_duration"], "load_duration": durations["load_duration"],
                "prompt_eval_count": generation.prompt_tokens}

    def stream(self, generation: Generation, response_id: str) -> Any:
        raise TypeError("embeddings are never streamed")


def ollama_model(name: str, max_model_len: int) -> dict[str, Any]:
    """A model as ``/api/tags`` and ``/api/ps`` list it."""
    tagged = name if ":" in name else f"{name}:latest"
    return {"name": tagged, "model": tagged, "modified_at": "2026-01-01T00:00:00Z", "size": 1, "digest": "0" * 64,
            "details": {"format": "gguf", "family": "llmsim", "families": ["llmsim"], "parameter_size": "0B",
                        "quantization_level": "F16"}, "context_length": max_model_len}


def ollama_tags(names: list[str], max_model_len: int) -> dict[str, Any]:
    return {"models": [ollama_model(name, max_model_len) for name in names]}


def ollama_ps(loaded: list[tuple[str, float]], max_model_len: int) -> dict[str, Any]:
    """``/api/ps``: the models loaded, each with the wall seconds until it is unloaded (infinite: never)."""
    now = datetime.now(timezone.utc)
    models = []
    for name, seconds_left in loaded:
        expires = datetime(2318, 1, 1, tzinfo=timezone.utc) if math.isinf(seconds_left) else \
            now + timedelta(seconds=seconds_left)
        models.append({**ollama_model(name, max_model_len), "expires_at": expires.isoformat().replace("+00:00", "Z"),
                       "size_vram": 1})
    return {"models": models}


def ollama_version() -> dict[str, Any]:
    return {"version": VERSION}


def ollama_show(name: str, max_model_len: int) -> dict[str, Any]:
    """``/api/show``: what Ollama says of a model (its details, context length, capabilities)."""
    return {"modelfile": f"FROM {name}", "parameters": "", "template": "{{ .Prompt }}",
            "details": ollama_model(name, max_model_len)["details"],
            "model_info": {"general.architecture": "llmsim", "llmsim.context_length": max_model_len},
            "capabilities": ["completion", "tools", "embedding"]}


def model_not_found(name: str) -> SimError:
    return SimError(404, f"model '{name}' not found", param="model", code="not_found")


OLLAMA_CHAT = OllamaChat(generate=False)
OLLAMA_GENERATE = OllamaChat(generate=True)
OLLAMA_EMBED = OllamaEmbed(legacy=False)
OLLAMA_EMBEDDINGS = OllamaEmbed(legacy=True)
