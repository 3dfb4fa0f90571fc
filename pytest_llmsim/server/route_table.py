"""The route table: every API's routes, as data.

Generation routes map a template to the wire API that parses and renders
it; the routes that generate nothing map a template to its handler in
``info_routes`` and the API whose error shape it answers in. Adding an API is
adding its module to ``pytest_llmsim.api`` and its lines here (or, from a
test or a plugin, ``SimulatorServer.add_route``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import NamedTuple

from werkzeug.wrappers import Response

from ..api import ANTHROPIC_MESSAGES, OPENAI_CHAT, OPENAI_COMPLETIONS, OPENAI_EMBEDDINGS, OPENAI_RESPONSES, WireAPI
from ..api.anthropic_messages import ANTHROPIC_COUNTER
from ..api.azure import (
    AZURE_CHAT,
    AZURE_COMPLETIONS,
    AZURE_EMBEDDINGS,
    AZURE_RESPONSES,
    AZURE_V1_CHAT,
    AZURE_V1_EMBEDDINGS,
    AZURE_V1_RESPONSES,
)
from ..api.bedrock import (
    BEDROCK_CONVERSE,
    BEDROCK_CONVERSE_STREAM,
    BEDROCK_COUNTER,
    BEDROCK_INVOKE,
    BEDROCK_INVOKE_STREAM,
)
from ..api.cohere_v2 import COHERE_CHAT, COHERE_EMBED
from ..api.gemini import GEMINI_COUNTER, GEMINI_EMBED, GEMINI_GENERATE, gemini_key
from ..api.ollama import OLLAMA_CHAT, OLLAMA_EMBED, OLLAMA_EMBEDDINGS, OLLAMA_GENERATE
from ..api.openai_responses import RESPONSES_COUNTER
from ..api.rerank import COHERE_RERANK, VLLM_RERANK, VLLM_SCORE
from ..api.vertex import (
    VERTEX_ANTHROPIC,
    VERTEX_ANTHROPIC_COUNTER,
    VERTEX_COUNTER,
    VERTEX_EMBED,
    VERTEX_GENERATE,
    VERTEX_PREDICT_EMBED,
    vertex_model_prefixes,
)
from ..sim.faults import declare_routes_without_generation
from .batch_routes import BatchRoutes
from .info_routes import InfoRoutes
from .routes import Guard

__all__ = ["BATCH_ROUTES", "GENERATION_ROUTES", "INFO_ROUTES", "InfoRoute"]

# Generation routes: template -> the wire API that parses and renders them.
GENERATION_ROUTES: dict[str, WireAPI] = {
    "/v1/chat/completions": OPENAI_CHAT,
    "/v1/completions": OPENAI_COMPLETIONS,
    "/v1/messages": ANTHROPIC_MESSAGES,
    "/v1/responses": OPENAI_RESPONSES,
    "/v1/embeddings": OPENAI_EMBEDDINGS,
    "/v1beta/models/{model}:{action}": GEMINI_GENERATE,  # generateContent, streamGenerateContent
    "/v1/models/{model}:{action}": GEMINI_GENERATE,
    "/v1beta/models/{model}:embedContent": GEMINI_EMBED,
    "/v1beta/models/{model}:batchEmbedContents": GEMINI_EMBED,
    "/v1/models/{model}:embedContent": GEMINI_EMBED,
    "/v1/models/{model}:batchEmbedContents": GEMINI_EMBED,
    **{f"{prefix}/{{model}}:{action}": api for prefix in vertex_model_prefixes("google") for action, api in (
        ("{action}", VERTEX_GENERATE), ("embedContent", VERTEX_EMBED), ("predict", VERTEX_PREDICT_EMBED))},
    **{f"{prefix}/{{model}}:{{action}}": VERTEX_ANTHROPIC for prefix in vertex_model_prefixes("anthropic")},
    "/model/{model}/converse": BEDROCK_CONVERSE,
    "/model/{model}/converse-stream": BEDROCK_CONVERSE_STREAM,
    "/model/{model}/invoke": BEDROCK_INVOKE,
    "/model/{model}/invoke-with-response-stream": BEDROCK_INVOKE_STREAM,
    "/openai/deployments/{deployment}/chat/completions": AZURE_CHAT,
    "/openai/deployments/{deployment}/completions": AZURE_COMPLETIONS,
    "/openai/deployments/{deployment}/embeddings": AZURE_EMBEDDINGS,
    "/openai/responses": AZURE_RESPONSES,
    "/openai/v1/chat/completions": AZURE_V1_CHAT,
    "/openai/v1/responses": AZURE_V1_RESPONSES,
    "/openai/v1/embeddings": AZURE_V1_EMBEDDINGS,
    "/api/chat": OLLAMA_CHAT,
    "/api/generate": OLLAMA_GENERATE,
    "/api/embed": OLLAMA_EMBED,
    "/api/embeddings": OLLAMA_EMBEDDINGS,
    "/v2/chat": COHERE_CHAT,
    "/v2/embed": COHERE_EMBED,
    "/v2/rerank": COHERE_RERANK,
    "/v1/rerank": VLLM_RERANK,
    "/rerank": VLLM_RERANK,
    "/v1/score": VLLM_SCORE,
    "/score": VLLM_SCORE,
}


class InfoRoute(NamedTuple):
    """A route that generates nothing: its handler (an ``InfoRoutes`` method) and whose error shape it uses.

    ``keyed``: with ``required_api_key`` or ``api_keys`` set, it takes the API's keys as the API's generation
    routes do (all but ``/health`` and ``/metrics``). ``stored``: it returns stored content (files, batches,
    stored and background responses, cached contents, ``/metrics``), so while the backend listens on loopback
    it answers only the Host names the control API does, and a web page that DNS rebinding pointed here
    cannot read it; generation routes take any Host (gateways rewrite it to the provider's name).
    """

    template: str
    methods: tuple[str, ...]
    handler: Callable[..., Response]  # (InfoRoutes, Request, RouteMatch) -> Response
    api: WireAPI
    accepts: Guard | None = None  # asked of the environ, where two APIs share the path
    keyed: bool = True
    stored: bool = False


INFO_ROUTES: tuple[InfoRoute, ...] = (
    InfoRoute("/v1/messages/count_tokens", ("POST",),
              functools.partial(InfoRoutes.count_tokens, counter=ANTHROPIC_COUNTER), ANTHROPIC_MESSAGES),
    InfoRoute("/v1/responses/input_tokens", ("POST",),
              functools.partial(InfoRoutes.count_tokens, counter=RESPONSES_COUNTER), OPENAI_RESPONSES),
    InfoRoute("/v1/responses/{id}", ("GET", "DELETE"), InfoRoutes.stored_response, OPENAI_RESPONSES, stored=True),
    InfoRoute("/v1/responses/{id}/cancel", ("POST",), InfoRoutes.cancel_response, OPENAI_RESPONSES, stored=True),
    InfoRoute("/v1/responses/{id}/input_items", ("GET",), InfoRoutes.input_items, OPENAI_RESPONSES, stored=True),
    InfoRoute("/v1/models", ("GET",), InfoRoutes.models, OPENAI_CHAT),
    InfoRoute("/v1/models/{id}", ("GET",), InfoRoutes.model, OPENAI_CHAT),
    InfoRoute("/v1/load_lora_adapter", ("POST",), InfoRoutes.load_lora, OPENAI_CHAT),
    InfoRoute("/v1/unload_lora_adapter", ("POST",), InfoRoutes.unload_lora, OPENAI_CHAT),
    InfoRoute("/tokenize", ("POST",), InfoRoutes.tokenize, OPENAI_CHAT),
    InfoRoute("/detokenize", ("POST",), InfoRoutes.detokenize, OPENAI_CHAT),
    InfoRoute("/health", ("GET",), InfoRoutes.health, OPENAI_CHAT, keyed=False),
    InfoRoute("/metrics", ("GET",), InfoRoutes.metrics, OPENAI_CHAT, keyed=False, stored=True),
    *(route for version in ("v1beta", "v1") for route in (
        InfoRoute(f"/{version}/models/{{model}}:countTokens", ("POST",),
                  functools.partial(InfoRoutes.count_tokens, counter=GEMINI_COUNTER), GEMINI_GENERATE),
        # /v1/models is OpenAI's too: a request with a Google API key gets Gemini's list
        InfoRoute(f"/{version}/models", ("GET",), InfoRoutes.gemini_models, GEMINI_GENERATE,
                  None if version == "v1beta" else gemini_key),
        InfoRoute(f"/{version}/models/{{model}}", ("GET",), InfoRoutes.gemini_model, GEMINI_GENERATE,
                  None if version == "v1beta" else gemini_key),
        InfoRoute(f"/{version}/cachedContents", ("POST", "GET"), InfoRoutes.cached_contents, GEMINI_GENERATE,
                  stored=True),
        InfoRoute(f"/{version}/cachedContents/{{id}}", ("GET", "DELETE"), InfoRoutes.cached_content,
                  GEMINI_GENERATE, stored=True))),
    *(route for prefix in vertex_model_prefixes("google") for route in (
        InfoRoute(f"{prefix}/{{model}}:countTokens", ("POST",),
                  functools.partial(InfoRoutes.count_tokens, counter=VERTEX_COUNTER), VERTEX_GENERATE),
        InfoRoute(f"{prefix}/{{model}}", ("GET",),
                  functools.partial(InfoRoutes.gemini_model, prefix="publishers/google/models/"), VERTEX_GENERATE))),
    *(InfoRoute(f"{prefix}/count-tokens:rawPredict", ("POST",),
                functools.partial(InfoRoutes.count_tokens, counter=VERTEX_ANTHROPIC_COUNTER), VERTEX_ANTHROPIC)
      for prefix in vertex_model_prefixes("anthropic")),
    InfoRoute("/model/{model}/count-tokens", ("POST",),
              functools.partial(InfoRoutes.count_tokens, counter=BEDROCK_COUNTER), BEDROCK_CONVERSE),
    InfoRoute("/api/tags", ("GET",), InfoRoutes.ollama_tags, OLLAMA_CHAT),
    InfoRoute("/api/ps", ("GET",), InfoRoutes.ollama_ps, OLLAMA_CHAT),
    InfoRoute("/api/show", ("POST",), InfoRoutes.ollama_show, OLLAMA_CHAT),
    InfoRoute("/api/version", ("GET",), InfoRoutes.ollama_version, OLLAMA_CHAT),
    InfoRoute("/openai/models", ("GET",), InfoRoutes.models, AZURE_CHAT),
    InfoRoute("/openai/v1/models", ("GET",), InfoRoutes.models, AZURE_V1_CHAT),
    InfoRoute("/openai/v1/models/{id}", ("GET",), InfoRoutes.model, AZURE_V1_CHAT),
)
# The batch routes start work the engine runs later; each handler is a BatchRoutes method.
BATCH_ROUTES: tuple[InfoRoute, ...] = tuple(
    InfoRoute(template, methods, handler, api, stored=True) for template, methods, handler, api in (
    ("/v1/files", ("POST", "GET"), BatchRoutes.files, OPENAI_CHAT),
    ("/v1/files/{id}", ("GET", "DELETE"), BatchRoutes.file, OPENAI_CHAT),
    ("/v1/files/{id}/content", ("GET",), BatchRoutes.file_content, OPENAI_CHAT),
    ("/v1/batches", ("POST", "GET"), BatchRoutes.batches, OPENAI_CHAT),
    ("/v1/batches/{id}", ("GET",), BatchRoutes.batch, OPENAI_CHAT),
    ("/v1/batches/{id}/cancel", ("POST",), BatchRoutes.batch_cancel, OPENAI_CHAT),
    ("/v1/messages/batches", ("POST", "GET"), BatchRoutes.message_batches, ANTHROPIC_MESSAGES),
    ("/v1/messages/batches/{id}", ("GET", "DELETE"), BatchRoutes.message_batch, ANTHROPIC_MESSAGES),
    ("/v1/messages/batches/{id}/cancel", ("POST",), BatchRoutes.message_batch_cancel, ANTHROPIC_MESSAGES),
    ("/v1/messages/batches/{id}/results", ("GET",), BatchRoutes.message_batch_results, ANTHROPIC_MESSAGES),
))
# only some fault kinds apply there
declare_routes_without_generation(template for template, *_ in (*INFO_ROUTES, *BATCH_ROUTES))
