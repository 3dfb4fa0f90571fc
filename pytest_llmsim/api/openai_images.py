"""OpenAI images: ``POST /v1/images/generations``, ``/v1/images/edits`` and ``/v1/images/variations``.

An image request is a generation like any other (queue, batch, latency, faults, limits, log, metrics): its
prompt is prefilled and its image takes as many decode steps as the model's output tokens for that size and
quality (gpt-image-1's published counts: 272 to 6,240; DALL·E's a quality's worth). The answer's images are
valid PNGs of the asked size (:mod:`pytest_llmsim.content.images`), as ``b64_json`` or a ``url`` that this
backend serves (``GET /v1/images/files/{name}``: the image is drawn again from the name, so nothing is stored).
gpt-image models answer ``b64_json`` with ``usage``, as OpenAI's do; JPEG and WebP output and streamed partial
images are refused, naming them.
"""

from __future__ import annotations

import base64
import hashlib
import re
import time
from typing import TYPE_CHECKING, Any

from ..content.images import png
from ..sim import GenerationRequest, SimError, invalid
from .base import NO_TARGET, RequestTarget
from .field_policy import FieldPolicy
from .openai_common import OpenAIErrors
from .routing import ApiRoute, Reply, RouteCall

if TYPE_CHECKING:
    from ..sim.generation import Generation

__all__ = ["OPENAI_IMAGES", "ROUTES", "image_tokens"]

GPT_IMAGE = ("gpt-image-", "chatgpt-image")
SIZES = {  # model family -> the sizes it draws ("auto" is the first)
    "gpt-image": ("1024x1024", "1024x1536", "1536x1024"),
    "dall-e-3": ("1024x1024", "1792x1024", "1024x1792"),
    "dall-e-2": ("1024x1024", "256x256", "512x512"),
}
QUALITIES = {"gpt-image": ("auto", "low", "medium", "high"), "dall-e-3": ("standard", "hd"),
             "dall-e-2": ("standard",)}
# gpt-image-1's output tokens by quality, for a square image and an oblong one (OpenAI's pricing table)
_GPT_IMAGE_TOKENS = {"low": (272, 408), "medium": (1056, 1584), "high": (4160, 6240)}
_NAME = re.compile(r"(?P<seed>[0-9a-f]{1,16})-(?P<w>\d{2,4})x(?P<h>\d{2,4})\.png\Z")

FIELDS = FieldPolicy.of(
    honoured=("model", "prompt", "n", "size", "quality", "response_format", "output_format", "image", "mask",
              "stream"),
    no_effect=("style", "user", "background", "moderation", "output_compression", "input_fidelity",
               "safety_identifier", "complexity"),
    refused={"partial_images": "streamed partial images are not simulated",
             "frame_count": "GIF output is not simulated", "frame_duration_ms": "GIF output is not simulated",
             "svg": "SVG output is not simulated", "markup": "SVG output is not simulated"})


def _family(model: str) -> str:
    lowered = model.lower()
    if lowered.startswith(GPT_IMAGE):
        return "gpt-image"
    return "dall-e-3" if lowered.startswith("dall-e-3") else "dall-e-2"


def image_tokens(family: str, size: str, quality: str) -> int:
    """The output tokens one image takes to draw (its decode steps)."""
    width, height = (int(side) for side in size.split("x"))
    oblong = width != height
    if family == "gpt-image":
        return _GPT_IMAGE_TOKENS["medium" if quality == "auto" else quality][oblong]
    return (4160 if quality == "hd" else 1056) if family == "dall-e-3" else 272


def _choice(body: dict[str, Any], name: str, allowed: tuple[str, ...], default: str, family: str) -> str:
    value = body.get(name)
    if value is None or (value == "auto" and name == "size"):
        return default
    if value not in allowed:
        raise invalid(f"Invalid value: '{value}'. Supported values for {family} are: "
                      f"{', '.join(repr(v) for v in allowed)}.", name, "invalid_value")
    return str(value)


class OpenAIImages(OpenAIErrors):
    """One of the image routes (``kind``: ``generation``, ``edit`` or ``variation``)."""

    id_prefix = "img-"
    links_here = True

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.name = f"openai.images.{kind}"

    def parse(self, body: Any, target: RequestTarget = NO_TARGET) -> GenerationRequest:
        if not isinstance(body, dict):
            raise invalid("The body must be a JSON object or a multipart form.", None, "invalid_type")
        model = body.get("model") or "dall-e-2"  # OpenAI's default for every image route
        if not isinstance(model, str):
            raise invalid("Invalid type for 'model': expected a string.", "model", "invalid_type")
        family = _family(model)
        prompt = body.get("prompt", "")
        if self.kind != "variation" and (not isinstance(prompt, str) or not prompt):
            raise invalid("Missing required parameter: 'prompt'.", "prompt", "missing_required_parameter")
        if self.kind != "generation" and not hasattr(body.get("image"), "read") and not isinstance(
                body.get("image"), list):
            raise invalid("Missing required parameter: 'image' (a file in a multipart form).", "image",
                          "missing_required_parameter")
        if self.kind == "variation" and family != "dall-e-2":
            raise invalid("Variations are only supported by dall-e-2.", "model", "invalid_value")
        if body.get("stream") in (True, "true"):
            raise invalid("'stream' is not supported by pytest-llmsim for images: streamed partial images are not "
                          "simulated.", "stream", "unsupported_parameter")
        size = _choice(body, "size", SIZES[family], SIZES[family][0], family)
        quality = _choice(body, "quality", QUALITIES[family], QUALITIES[family][0], family)
        n = _count(body.get("n", 1), 1 if family == "dall-e-3" else 10)
        response_format = body.get("response_format")
        if family == "gpt-image" and response_format is not None:
            raise invalid(f"Unknown parameter: 'response_format' is not supported by {model}: it always answers "
                          "b64_json.", "response_format", "unknown_parameter")
        if response_format not in (None, "url", "b64_json"):
            raise invalid(f"Invalid value: '{response_format}'. Supported values are: 'url' and 'b64_json'.",
                          "response_format", "invalid_value")
        output_format = body.get("output_format", "png")
        if output_format != "png":
            raise invalid(f"output_format '{output_format}' is not simulated: pytest-llmsim draws PNG only.",
                          "output_format", "unsupported_value")
        tokens = image_tokens(family, size, quality)
        wire = {"origin": target.origin, "family": family, "size": size, "quality": quality, "prompt": prompt,
                "response_format": "b64_json" if family == "gpt-image" else (response_format or "url")}
        return GenerationRequest(kind="completion", model=model, stream=False, include_usage=False, max_tokens=tokens,
                                 n=n, stops=[], seed=None, prompts=[prompt or "(variation)"], prompt_param="prompt",
                                 run_to_limit=True, ignored_fields=FIELDS.check(body), wire=wire)

    def response_body(self, generation: Generation, response_id: str) -> dict[str, Any]:
        wire = generation.request.wire
        width, height = (int(side) for side in wire["size"].split("x"))
        data = []
        for index in range(len(generation.outputs)):
            # the image is drawn from one number (so a URL can name it): the prompt's, the request's seed, the index
            digest = hashlib.sha256(f"{wire['prompt']}:{generation.seed}:{index}".encode()).hexdigest()
            seed = int(digest[:12], 16)
            if wire["response_format"] == "url":
                item: dict[str, Any] = {"url": f"{wire['origin']}/v1/images/files/{seed:x}-{width}x{height}.png"}
            else:
                item = {"b64_json": base64.b64encode(png(width, height, "", seed)).decode()}
            if wire["family"] == "dall-e-3":
                item["revised_prompt"] = wire["prompt"]
            data.append(item)
        body: dict[str, Any] = {"created": int(time.time()), "data": data}
        if wire["family"] == "gpt-image":
            prompt, output = generation.prompt_tokens, generation.reported_completion_tokens
            body.update({"background": "opaque", "output_format": "png", "quality": wire["quality"],
                         "size": wire["size"],
                         "usage": {"input_tokens": prompt, "output_tokens": output, "total_tokens": prompt + output,
                                   "input_tokens_details": {"text_tokens": prompt, "image_tokens": 0}}})
        return body

    def stream(self, generation: Generation, response_id: str) -> Any:
        raise TypeError("images are never streamed")  # parse() refuses stream


def _count(value: Any, most: int) -> int:
    if isinstance(value, str) and value.isdigit():
        value = int(value)  # a multipart form's fields are text
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= most:
        raise invalid(f"Invalid 'n': expected an integer from 1 to {most}.", "n", "integer_out_of_range")
    return value


def image_file(call: RouteCall) -> Reply:
    """``GET /v1/images/files/{name}``: an image a ``url`` answer named, drawn again from its name."""
    found = _NAME.match(call.params.get("name", ""))
    width, height = (int(found["w"]), int(found["h"])) if found else (0, 0)
    if found is None or not (64 <= width <= 4096 and 64 <= height <= 4096):
        raise SimError(404, "No such image.", code="not_found")
    return Reply(png(width, height, "", int(found["seed"], 16)), content_type="image/png",
                 headers={"Cache-Control": "public, max-age=3600"})


OPENAI_IMAGES = OpenAIImages("generation")
OPENAI_IMAGE_EDITS = OpenAIImages("edit")
OPENAI_IMAGE_VARIATIONS = OpenAIImages("variation")

ROUTES = (
    ApiRoute("/v1/images/generations", OPENAI_IMAGES),
    ApiRoute("/v1/images/edits", OPENAI_IMAGE_EDITS),
    ApiRoute("/v1/images/variations", OPENAI_IMAGE_VARIATIONS),
    ApiRoute("/v1/images/files/{name}", OPENAI_IMAGES, ("GET",), image_file, keyed=False),
)
