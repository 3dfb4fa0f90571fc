"""OpenAI moderations, ``POST /v1/moderations``: a classifier gateways route, check and fail over like any model.

``input`` is a string, a list of strings, or a list of multimodal parts (``{"type": "text", "text"}``,
``{"type": "image_url", "image_url": {"url"}}``); ``model`` defaults to ``omni-moderation-latest``. The
request runs through the engine as an embedding does (its text is prefilled: a batch slot and time, load and
queueing, the metrics' prompt tokens), so latency, faults and limits apply as to every request. The classifier
is a simulation: each of the thirteen categories scores low (seeded by the input) unless the text has one of
the category's trigger words (``kill`` for violence, ``hate`` for hate, ...: ``TRIGGERS``), which scores it
0.9 and flags the result. ``category_applied_input_types`` says ``text`` (and ``image`` for an input with an
image, whose pixels are never looked at) for the omni models; the ``text-moderation-*`` models have none.
"""

from __future__ import annotations

import hashlib
import re
from typing import TYPE_CHECKING, Any, NoReturn

from ..sim import GenerationRequest, invalid
from .base import NO_TARGET, RequestTarget
from .field_policy import FieldPolicy
from .openai_common import OpenAIErrors
from .routing import ApiRoute
from .validation import describe, expect_object

if TYPE_CHECKING:
    from ..sim.generation import Generation

__all__ = ["CATEGORIES", "OPENAI_MODERATIONS", "ROUTES", "TRIGGERS", "OpenAIModerations", "parse_moderations"]

DEFAULT_MODEL = "omni-moderation-latest"
MAX_INPUTS = 32
CATEGORIES = ("harassment", "harassment/threatening", "hate", "hate/threatening", "illicit", "illicit/violent",
              "self-harm", "self-harm/intent", "self-harm/instructions", "sexual", "sexual/minors", "violence",
              "violence/graphic")
#: A word that flags each category it names (whole words, any case): how a test makes the classifier say yes.
TRIGGERS = {"harassment": ("idiot",), "harassment/threatening": ("threaten",), "hate": ("hate",),
            "hate/threatening": ("exterminate",), "illicit": ("steal",), "illicit/violent": ("bomb",),
            "self-harm": ("suicide",), "self-harm/intent": ("suicide",), "self-harm/instructions": ("overdose",),
            "sexual": ("explicit",), "sexual/minors": ("minor",), "violence": ("kill",), "violence/graphic": ("gore",)}
_WORDS = re.compile(r"[a-z]+")

# Every field of openai's ModerationCreateParams (tests/test_field_policy.py walks it).
MODERATION_FIELDS = FieldPolicy.of(honoured=("model", "input"))


def _texts(value: Any) -> list[tuple[str, bool]]:
    """Each input's text and whether it had an image."""
    if isinstance(value, str):
        return [(value, False)]
    if isinstance(value, list) and value and all(isinstance(item, str) for item in value):
        if len(value) > MAX_INPUTS:
            raise invalid(f"Invalid 'input': {len(value)} inputs in one request; the limit is {MAX_INPUTS}.",
                          "input", "array_above_max_length")
        return [(item, False) for item in value]
    if isinstance(value, list) and value and all(isinstance(item, dict) for item in value):  # one multimodal input
        text, image = [], False
        for i, part in enumerate(value):
            if part.get("type") == "text" and isinstance(part.get("text"), str):
                text.append(part["text"])
            elif part.get("type") == "image_url" and isinstance(part.get("image_url"), dict) \
                    and isinstance(part["image_url"].get("url"), str):
                image = True
            else:
                raise invalid(f"Invalid 'input[{i}]': expected a text part or an image_url part.", f"input[{i}]",
                              "invalid_value")
        return [(" ".join(text), image)]
    raise invalid(f"Invalid 'input': expected a string, an array of strings or an array of text and image parts, "
                  f"but got {describe(value)}.", "input", "invalid_type")


def parse_moderations(body: Any) -> GenerationRequest:
    """Validate a ``POST /v1/moderations`` body."""
    body = expect_object(body)
    if "input" not in body:
        raise invalid("Missing required parameter: 'input'.", "input", "missing_required_parameter")
    model = body.get("model", DEFAULT_MODEL)
    if not isinstance(model, str) or not model:
        raise invalid(f"Invalid 'model': expected a string, but got {describe(model)}.", "model", "invalid_type")
    inputs = _texts(body["input"])
    return GenerationRequest(kind="embedding", model=model, stream=False, include_usage=False, max_tokens=0, n=1,
                             stops=[], seed=None, prompts=[text or " " for text, _ in inputs], prompt_param="input",
                             wire={"images": [image for _, image in inputs]},
                             ignored_fields=MODERATION_FIELDS.check(body))


def _result(text: str, image: bool, omni: bool) -> dict[str, Any]:
    words = set(_WORDS.findall(text.lower()))
    seed = hashlib.blake2b(text.encode(), digest_size=8).digest()
    scores = {category: round((seed[i % 8] + 7 * i) % 97 / 97 * 0.001, 7) for i, category in enumerate(CATEGORIES)}
    for category, triggers in TRIGGERS.items():
        if words.intersection(triggers):
            scores[category] = 0.9
    categories = {category: score >= 0.5 for category, score in scores.items()}
    result: dict[str, Any] = {"flagged": any(categories.values()), "categories": categories,
                              "category_scores": scores}
    if omni:
        kinds = ["text", "image"] if image else ["text"]
        result["category_applied_input_types"] = {category: kinds if category in (
            "self-harm", "self-harm/intent", "self-harm/instructions", "sexual", "violence", "violence/graphic")
            else ["text"] for category in CATEGORIES}
    return result


class OpenAIModerations(OpenAIErrors):
    """The moderations API (never streamed)."""

    name = "openai.moderations"
    id_prefix = "modr-"

    def parse(self, body: Any, target: RequestTarget = NO_TARGET) -> GenerationRequest:
        return parse_moderations(body)

    def response_body(self, generation: Generation, response_id: str) -> dict[str, Any]:
        request = generation.request
        omni = not request.model.startswith("text-moderation")
        results = [_result(str(text), image, omni) for text, image in zip(request.prompts, request.wire["images"])]
        return {"id": response_id, "model": request.model, "results": results}

    def stream(self, generation: Generation, response_id: str) -> NoReturn:
        raise TypeError("moderations are never streamed")  # parse() never asks for a stream


OPENAI_MODERATIONS = OpenAIModerations()

ROUTES = (ApiRoute("/v1/moderations", OPENAI_MODERATIONS),)
