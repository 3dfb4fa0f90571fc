"""The Gemini API's routes: generation and embeddings under ``/v1beta`` and ``/v1``, ``countTokens``, the
model list and cards, and ``cachedContents`` (a named cached prompt, kept per API key).

``GET /v1/models`` is OpenAI's path too: a request that carries a Google API key
(``x-goog-api-key`` or ``?key=``) gets Gemini's list (:func:`~.gemini.gemini_key`).
"""

from __future__ import annotations

import functools
import os

from ..sim import SimError
from .gemini import (
    GEMINI_COUNTER,
    GEMINI_EMBED,
    GEMINI_GENERATE,
    cached_content_resource,
    gemini_key,
    gemini_model_card,
    gemini_model_list,
    parse_cached_content,
)
from .openai_models import unknown_model
from .routing import ApiRoute, Reply, RouteCall, counting_route

__all__ = ["ROUTES", "list_gemini_models", "show_gemini_model"]


def list_gemini_models(call: RouteCall, prefix: str = "models/") -> Reply:
    """Every served name, as the Gemini API (or, ``prefix`` ``publishers/google/models/``, Vertex AI) lists
    models."""
    limit = call.simulator.config.max_model_len
    return Reply(gemini_model_list([gemini_model_card(name, limit, prefix) for name in call.simulator.served_models()]))


def show_gemini_model(call: RouteCall, prefix: str = "models/") -> Reply:
    """One served model's card, else a 404."""
    model_id = call.params["model"]
    if model_id not in call.simulator.served_models():
        raise unknown_model(model_id)
    return Reply(gemini_model_card(model_id, call.simulator.config.max_model_len, prefix))


def cached_contents(call: RouteCall) -> Reply:
    """``POST`` creates a cached content (a named cached prompt, the key's that made it), ``GET`` lists them."""
    conversations = call.simulator.conversations
    if call.method == "GET":
        return Reply({"cachedContents": [stored.body for _, stored in conversations.named("cachedContents/",
                                                                                            call.credential)]})
    record = call.log("gemini.cached_contents")
    parsed, fields = parse_cached_content(call.read_json(record)[0])
    parsed.credential = call.credential  # it belongs to the key that made it
    name = f"cachedContents/{os.urandom(8).hex()}"
    resource = call.simulator.keep_prefix(name, parsed, functools.partial(cached_content_resource, name, fields))
    record.status, record.model = 200, parsed.model
    call.simulator.finish(record)
    return Reply(resource)


def cached_content(call: RouteCall) -> Reply:
    """``GET`` one cached content, or ``DELETE`` it."""
    name = f"cachedContents/{call.params['id']}"
    conversations = call.simulator.conversations
    stored = conversations.get(name, call.credential)
    if stored is None or (call.method == "DELETE" and not conversations.delete(name, call.credential)):
        raise SimError(404, f"CachedContent not found: {name}.", param="name", code="not_found")
    return Reply({} if call.method == "DELETE" else stored.body)


ROUTES = tuple(route for version in ("v1beta", "v1") for route in (
    ApiRoute(f"/{version}/models/{{model}}:{{action}}", GEMINI_GENERATE),  # generateContent, streamGenerateContent
    ApiRoute(f"/{version}/models/{{model}}:embedContent", GEMINI_EMBED),
    ApiRoute(f"/{version}/models/{{model}}:batchEmbedContents", GEMINI_EMBED),
    counting_route(f"/{version}/models/{{model}}:countTokens", GEMINI_GENERATE, GEMINI_COUNTER),
    # /v1/models is OpenAI's too: a request with a Google API key gets Gemini's list
    ApiRoute(f"/{version}/models", GEMINI_GENERATE, ("GET",), list_gemini_models,
             accepts=None if version == "v1beta" else gemini_key),
    ApiRoute(f"/{version}/models/{{model}}", GEMINI_GENERATE, ("GET",), show_gemini_model,
             accepts=None if version == "v1beta" else gemini_key),
    ApiRoute(f"/{version}/cachedContents", GEMINI_GENERATE, ("POST", "GET"), cached_contents, stored=True),
    ApiRoute(f"/{version}/cachedContents/{{id}}", GEMINI_GENERATE, ("GET", "DELETE"), cached_content, stored=True),
))
