"""OpenAI embeddings, ``POST /v1/embeddings``.

``input`` is a string, a list of strings, a list of token ids or a list of
token-id lists (at most 2,048 inputs; the simulator enforces OpenAI's 8,192
tokens per input and 300,000 per request, and ``dimensions`` up to the
backend's ``embedding_size``). ``encoding_format`` ``float`` (lists of
numbers) or ``base64`` (little-endian float32; the ``openai`` SDK asks for it
by default and decodes it). The request goes through the engine like any
other: its prefill takes a batch slot and time, so load and queueing shape
it, and the metrics count its prompt tokens.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NoReturn

from ..content.embeddings import encode_base64
from ..sim import GenerationRequest, invalid
from .base import NO_TARGET, RequestTarget
from .field_policy import FieldPolicy
from .openai_common import OpenAIErrors, model_field
from .routing import ApiRoute
from .validation import all_ints, describe, expect_object, is_int, optional

if TYPE_CHECKING:
    from ..sim.generation import Generation

__all__ = ["MAX_INPUTS", "OPENAI_EMBEDDINGS", "ROUTES", "OpenAIEmbeddings", "parse_embeddings"]

MAX_INPUTS = 2048
ENCODING_FORMATS = ("float", "base64")


def _inputs(value: Any) -> list[str | list[int]]:
    if isinstance(value, str):
        inputs: list[str | list[int]] = [value]
    elif isinstance(value, list) and value and all_ints(value):
        inputs = [list(value)]
    elif isinstance(value, list) and value and all(
            isinstance(item, str) or (isinstance(item, list) and item and all_ints(item))
            for item in value):
        inputs = list(value)
    else:
        raise invalid(f"Invalid 'input': expected a string, an array of strings, an array of token ids or an "
                      f"array of token-id arrays (none empty), but got {describe(value)}.", "input", "invalid_type")
    if len(inputs) > MAX_INPUTS:
        raise invalid(f"Invalid 'input': {len(inputs)} inputs in one request; the limit is {MAX_INPUTS}.",
                      "input", "array_above_max_length")
    for i, item in enumerate(inputs):
        if item == "":
            raise invalid(f"Invalid 'input[{i}]': an input must not be an empty string.", "input", "invalid_value")
    return inputs


# Every field of openai's EmbeddingCreateParams (tests/test_field_policy.py walks it).
EMBEDDING_FIELDS = FieldPolicy.of(honoured=("model", "input", "dimensions", "encoding_format"), no_effect=("user",))


def parse_embeddings(body: Any) -> GenerationRequest:
    """Validate a ``POST /v1/embeddings`` body."""
    body = expect_object(body)
    model = model_field(body)
    if "input" not in body:
        raise invalid("Missing required parameter: 'input'.", "input", "missing_required_parameter")
    inputs = _inputs(body["input"])
    dimensions = optional(body, "dimensions", is_int, "an integer")
    if dimensions is not None and dimensions < 1:
        raise invalid(f"Invalid 'dimensions': integer below minimum value. Expected a value >= 1, but got "
                      f"{dimensions} instead.", "dimensions", "integer_below_min_value")
    encoding = body.get("encoding_format") or "float"
    if encoding not in ENCODING_FORMATS:
        raise invalid(f"Invalid value for 'encoding_format': expected one of {', '.join(ENCODING_FORMATS)}, but "
                      f"got {describe(encoding)}.", "encoding_format", "invalid_value")
    optional(body, "user", lambda v: isinstance(v, str), "a string")
    return GenerationRequest(kind="embedding", model=model, stream=False, include_usage=False, max_tokens=0, n=1,
                             stops=[], seed=None, prompts=inputs, prompt_param="input", dimensions=dimensions,
                             wire={"encoding_format": encoding}, ignored_fields=EMBEDDING_FIELDS.check(body))


class OpenAIEmbeddings(OpenAIErrors):
    """The embeddings API (never streamed)."""

    name = "openai.embeddings"
    id_prefix = "emb-"

    def parse(self, body: Any, target: RequestTarget = NO_TARGET) -> GenerationRequest:
        return parse_embeddings(body)

    def response_body(self, generation: Generation, response_id: str) -> dict[str, Any]:
        as_base64 = generation.request.wire["encoding_format"] == "base64"
        data = [{"object": "embedding", "index": i, "embedding": encode_base64(vector) if as_base64 else vector}
                for i, vector in enumerate(generation.embeddings())]
        tokens = generation.prompt_tokens
        return {"object": "list", "data": data, "model": generation.request.model,
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}

    def stream(self, generation: Generation, response_id: str) -> NoReturn:
        raise TypeError("embeddings are never streamed")  # parse() never asks for a stream


OPENAI_EMBEDDINGS = OpenAIEmbeddings()

ROUTES = (ApiRoute("/v1/embeddings", OPENAI_EMBEDDINGS),)
