"""Ollama's routes: ``/api/chat``, ``/api/generate``, ``/api/embed`` and ``/api/embeddings``, and the model
routes (``/api/tags``, ``/api/ps``, ``/api/show``, ``/api/version``)."""

from __future__ import annotations

import math

from .ollama import (
    OLLAMA_CHAT,
    OLLAMA_EMBED,
    OLLAMA_EMBEDDINGS,
    OLLAMA_GENERATE,
    model_not_found,
    ollama_ps,
    ollama_show,
    ollama_tags,
    ollama_version,
)
from .routing import ApiRoute, Reply, RouteCall

__all__ = ["ROUTES"]


def _tags(call: RouteCall) -> Reply:
    """``GET /api/tags``: every served model, as Ollama lists them."""
    return Reply(ollama_tags(call.simulator.served_models(), call.simulator.config.max_model_len))


def _ps(call: RouteCall) -> Reply:
    """``GET /api/ps``: the models loaded now (used within their keep_alive), with when each expires."""
    simulator = call.simulator
    now = simulator.runtime.virtual_now()
    loaded = [(model.name, simulator.runtime.to_wall(model.expires_at - now) if model.in_use == 0 else math.inf)
              for model in simulator.residency.loaded(now)]
    return Reply(ollama_ps(loaded, simulator.config.max_model_len))


def _show(call: RouteCall) -> Reply:
    """``POST /api/show``: one served model's details."""
    body, _ = call.read_json()
    name = body.get("model") if isinstance(body, dict) else None
    name = name.removesuffix(":latest") if isinstance(name, str) else None
    if name is None or name not in call.simulator.served_models():
        raise model_not_found(str(name))
    return Reply(ollama_show(name, call.simulator.config.max_model_len))


ROUTES = (
    ApiRoute("/api/chat", OLLAMA_CHAT),
    ApiRoute("/api/generate", OLLAMA_GENERATE),
    ApiRoute("/api/embed", OLLAMA_EMBED),
    ApiRoute("/api/embeddings", OLLAMA_EMBEDDINGS),
    ApiRoute("/api/tags", OLLAMA_CHAT, ("GET",), _tags),
    ApiRoute("/api/ps", OLLAMA_CHAT, ("GET",), _ps),
    ApiRoute("/api/show", OLLAMA_CHAT, ("POST",), _show),
    ApiRoute("/api/version", OLLAMA_CHAT, ("GET",), lambda call: Reply(ollama_version())),
)
