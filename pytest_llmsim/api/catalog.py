"""Every route of every API this package speaks, in one list the server registers.

Adding an API: its module declares ``ROUTES`` (see :mod:`.routing`) and is listed
here; nothing in ``server/`` changes. The server itself imports only this list.
"""

from __future__ import annotations

from ..sim.faults import declare_routes_without_generation
from . import (
    anthropic_messages,
    azure,
    bedrock,
    chat_providers,
    cohere_v2,
    gemini_live,
    gemini_routes,
    ollama_routes,
    openai_completions,
    openai_embeddings,
    openai_images,
    openai_models,
    openai_moderations,
    openai_realtime,
    openai_responses,
    openai_responses_socket,
    openai_speech,
    openai_transcription,
    rerank,
    vertex,
    vllm_extras,
)
from .openai_chat import OPENAI_CHAT
from .routing import ApiRoute

__all__ = ["API_ROUTES", "DEFAULT_API"]

API_ROUTES: tuple[ApiRoute, ...] = (
    *chat_providers.ROUTES, *openai_completions.ROUTES, *anthropic_messages.ROUTES, *openai_responses.ROUTES,
    *openai_responses_socket.ROUTES, *openai_realtime.ROUTES, *openai_embeddings.ROUTES, *openai_images.ROUTES,
    *openai_speech.ROUTES, *openai_transcription.ROUTES, *openai_moderations.ROUTES,
    *gemini_routes.ROUTES, *gemini_live.ROUTES,
    *vertex.ROUTES, *bedrock.ROUTES, *azure.ROUTES, *ollama_routes.ROUTES, *cohere_v2.ROUTES, *rerank.ROUTES,
    *openai_models.ROUTES, *vllm_extras.ROUTES,
)
# for fault checks: a call generates nothing (a session's responses do: each is checked as a generation request);
# a path that also has a generation or session route (a guarded refusal beside it) is not one of them
declare_routes_without_generation({route.template for route in API_ROUTES if route.handler is not None}
                                  - {route.template for route in API_ROUTES if route.handler is None})

#: Whose error shape a path outside every route answers in.
DEFAULT_API = OPENAI_CHAT
