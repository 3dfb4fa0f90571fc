"""Vertex AI: Gemini's bodies under Google Cloud's paths, text-embedding ``:predict``, and Claude on Vertex.

Paths (``/v1/`` and ``/v1beta1/``, google-genai's Vertex default; each with
``projects/{project}/locations/{location}/`` and without it, the API-key
"express" mode)::

    publishers/google/models/{model}:generateContent | :streamGenerateContent   VERTEX_GENERATE
    publishers/google/models/{model}:countTokens | :embedContent               Gemini's bodies
    publishers/google/models/{model}:predict                                    VERTEX_PREDICT_EMBED
    publishers/anthropic/models/{model}:rawPredict | :streamRawPredict         VERTEX_ANTHROPIC
    publishers/anthropic/models/count-tokens:rawPredict                        VERTEX_ANTHROPIC_COUNTER

The Gemini surface answers exactly as the Gemini API does (its adapters,
named ``vertex.*`` in the request log). ``:predict`` takes the
``instances``/``parameters`` body google-genai sends for ``text-embedding-*``
models. Claude on Vertex is the Messages API with the model in the URL and
``anthropic_version`` (required, any value) in the body; it answers in
Anthropic's shapes. Any bearer token or API key is accepted.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from ..sim import GenerationRequest, SimError, invalid
from .anthropic_messages import AnthropicCounter, AnthropicMessages, parse_messages
from .base import NO_TARGET, RequestTarget
from .gemini import GeminiCounter, GeminiEmbed, GeminiErrors, GeminiGenerate
from .gemini_routes import show_gemini_model
from .routing import ApiRoute, counting_route
from .validation import describe, expect_object, is_int

if TYPE_CHECKING:
    from ..sim.generation import Generation

__all__ = ["ROUTES", "VERTEX_ANTHROPIC", "VERTEX_ANTHROPIC_COUNTER", "VERTEX_COUNTER", "VERTEX_EMBED",
           "VERTEX_GENERATE", "VERTEX_PREDICT_EMBED", "vertex_model_prefixes"]

RAW_ACTIONS = ("rawPredict", "streamRawPredict")
MAX_PREDICT_INSTANCES = 250


def vertex_model_prefixes(publisher: str) -> tuple[str, ...]:
    """The route prefixes of a publisher's models: both API versions, with and without a project."""
    return tuple(f"/{version}{project}/publishers/{publisher}/models" for version in ("v1", "v1beta1")
                 for project in ("/projects/{project}/locations/{location}", ""))


def _without_version(body: Any) -> dict[str, Any]:
    body = expect_object(body)
    if not isinstance(body.get("anthropic_version"), str):
        raise invalid("anthropic_version: Field required (a string, e.g. 'vertex-2023-10-16').",
                      "anthropic_version", "missing_required_parameter")
    return {key: value for key, value in body.items() if key != "anthropic_version"}


class VertexAnthropic(AnthropicMessages):
    """Claude on Vertex AI: ``{model}:rawPredict`` and ``:streamRawPredict``."""

    name = "vertex.anthropic"

    def parse(self, body: Any, target: RequestTarget = NO_TARGET) -> GenerationRequest:
        action = target.params.get("action", "")
        if action not in RAW_ACTIONS:
            raise SimError(404, f"Unknown action {action!r}; Claude on Vertex AI serves rawPredict and "
                                f"streamRawPredict.", param="action", code="not_found_error")
        parsed = parse_messages({**_without_version(body), "model": target.params.get("model", "")})
        parsed.stream = parsed.stream or action == "streamRawPredict"
        return parsed


class VertexAnthropicCounter(AnthropicCounter):
    """``count-tokens:rawPredict``: the model in the body, as Anthropic's ``count_tokens`` has it."""

    name = "vertex.anthropic.count_tokens"

    def parse_count(self, body: Any, target: RequestTarget) -> GenerationRequest:
        return parse_messages(_without_version(body), require_max_tokens=False)


class VertexPredictEmbed(GeminiErrors):
    """``{model}:predict`` for text-embedding models: ``instances[].content``, ``parameters``."""

    name = "vertex.predict"
    id_prefix = "vpred"

    def parse(self, body: Any, target: RequestTarget = NO_TARGET) -> GenerationRequest:
        body = expect_object(body)
        instances = body.get("instances")
        if not isinstance(instances, list) or not instances or len(instances) > MAX_PREDICT_INSTANCES:
            raise invalid(f"Invalid value at 'instances': 1 to {MAX_PREDICT_INSTANCES} instances are required.",
                          "instances", "invalid_value")
        texts: list[str | list[int]] = []
        for i, instance in enumerate(instances):
            unknown = sorted(set(instance) - {"content", "task_type", "title"}) if isinstance(instance, dict) else []
            if unknown:
                raise invalid(f"Invalid JSON payload received. Unknown name \"{unknown[0]}\" at 'instances[{i}]'.",
                              f"instances[{i}].{unknown[0]}", "unknown_field")
            content = instance.get("content") if isinstance(instance, dict) else None
            if not isinstance(content, str) or not content:
                raise invalid(f"Invalid value at 'instances[{i}].content': expected a non-empty string, got "
                              f"{describe(content)}.", f"instances[{i}].content", "invalid_value")
            texts.append(content)
        parameters = body.get("parameters") or {}
        if not isinstance(parameters, dict):
            raise invalid("Invalid value at 'parameters': expected an object.", "parameters", "invalid_type")
        unknown = sorted(set(parameters) - {"outputDimensionality", "autoTruncate"})
        if unknown:
            raise invalid(f"Invalid JSON payload received. Unknown name \"{unknown[0]}\" at 'parameters'.",
                          f"parameters.{unknown[0]}", "unknown_field")
        dimensions = parameters.get("outputDimensionality")
        if dimensions is not None and (not is_int(dimensions) or dimensions < 1):
            raise invalid("Invalid value at 'parameters.outputDimensionality': expected a positive integer.",
                          "parameters.outputDimensionality", "invalid_value")
        return GenerationRequest(kind="embedding", model=target.params.get("model", ""), stream=False,
                                 include_usage=False, max_tokens=0, n=1, stops=[], seed=None, prompts=texts,
                                 prompt_param="instances", dimensions=dimensions)

    def response_body(self, generation: Generation, response_id: str) -> dict[str, Any]:
        counts = generation.prompt_lengths
        predictions = [{"embeddings": {"values": vector, "statistics": {"token_count": count, "truncated": False}}}
                       for vector, count in zip(generation.embeddings(), counts)]
        characters = sum(len(text) for text in generation.request.prompts if isinstance(text, str))
        return {"predictions": predictions, "metadata": {"billableCharacterCount": characters}}

    def stream(self, generation: Generation, response_id: str) -> Any:
        raise TypeError("embeddings are never streamed")  # parse() never asks for a stream


VERTEX_GENERATE = GeminiGenerate("vertex.generate_content", "vtx")
VERTEX_EMBED = GeminiEmbed("vertex.embed_content", "vtxe")
VERTEX_COUNTER = GeminiCounter("vertex.count_tokens")
VERTEX_PREDICT_EMBED = VertexPredictEmbed()
VERTEX_ANTHROPIC = VertexAnthropic()
VERTEX_ANTHROPIC_COUNTER = VertexAnthropicCounter()

ROUTES = (
    *(route for prefix in vertex_model_prefixes("google") for route in (
        ApiRoute(f"{prefix}/{{model}}:{{action}}", VERTEX_GENERATE),
        ApiRoute(f"{prefix}/{{model}}:embedContent", VERTEX_EMBED),
        ApiRoute(f"{prefix}/{{model}}:predict", VERTEX_PREDICT_EMBED),
        counting_route(f"{prefix}/{{model}}:countTokens", VERTEX_GENERATE, VERTEX_COUNTER),
        ApiRoute(f"{prefix}/{{model}}", VERTEX_GENERATE, ("GET",),
                 functools.partial(show_gemini_model, prefix="publishers/google/models/")))),
    *(route for prefix in vertex_model_prefixes("anthropic") for route in (
        ApiRoute(f"{prefix}/{{model}}:{{action}}", VERTEX_ANTHROPIC),
        counting_route(f"{prefix}/count-tokens:rawPredict", VERTEX_ANTHROPIC, VERTEX_ANTHROPIC_COUNTER))),
)
