"""Azure OpenAI: OpenAI's chat, completions, embeddings and Responses under Azure's paths, with its extras.

Routes::

    POST /openai/deployments/{deployment}/chat/completions?api-version=V   AZURE_CHAT ("azure.chat")
    POST /openai/deployments/{deployment}/completions?api-version=V        AZURE_COMPLETIONS
    POST /openai/deployments/{deployment}/embeddings?api-version=V         AZURE_EMBEDDINGS
    POST /openai/responses?api-version=V                                   AZURE_RESPONSES
    GET  /openai/models?api-version=V
    POST /openai/v1/chat/completions | responses | embeddings; GET /openai/v1/models   the v1 surface

(``/openai/v1/chat/completions`` is declared with Groq's, which shares it: :mod:`.chat_providers`.)

The bodies are OpenAI's (the adapters are OpenAI's); a deployment is a
served model name (a body without ``model`` gets the deployment's). A
missing or unknown ``api-version`` answers as Azure does: 404
``{"error": {"code": "404", "message": "Resource not found"}}``; an unknown
deployment under ``strict_models`` 404 ``DeploymentNotFound``. Answers carry
Azure's content-filter annotations (``prompt_filter_results``,
``content_filter_results``: nothing filtered), ``apim-request-id``, and of
the rate-limit headers ``x-ratelimit-remaining-requests``/``-tokens``; a 429
is worded as Azure words it, with ``retry-after`` and ``retry-after-ms``.
Any key (``api-key`` or ``Authorization: Bearer``) is accepted.
"""

from __future__ import annotations

import datetime
import re
from typing import TYPE_CHECKING, Any

from ..sim import GenerationRequest, RateLimitStatus, SimError
from ..sim.ratelimit import openai_rate_limit_headers
from .base import NO_TARGET, RequestTarget, StreamRenderer, WireAPI, request_uuid
from .openai_chat import OPENAI_CHAT
from .openai_common import openai_error_body, sse
from .openai_completions import OPENAI_COMPLETIONS
from .openai_embeddings import OPENAI_EMBEDDINGS
from .openai_models import list_models, show_model
from .openai_responses import OPENAI_RESPONSES
from .routing import ApiRoute

if TYPE_CHECKING:
    from ..sim.generation import Generation

__all__ = [
    "AZURE_CHAT",
    "AZURE_COMPLETIONS",
    "AZURE_EMBEDDINGS",
    "AZURE_RESPONSES",
    "AZURE_V1_CHAT",
    "AZURE_V1_EMBEDDINGS",
    "AZURE_V1_RESPONSES",
    "ROUTES",
    "api_version_known",
]

API_VERSION = re.compile(r"(\d{4}-\d{2}-\d{2}(-preview)?|v1|latest|preview)\Z")
NOT_FILTERED = {"filtered": False, "severity": "safe"}
CONTENT_FILTER_RESULTS = {kind: NOT_FILTERED for kind in ("hate", "self_harm", "sexual", "violence")}


FIRST_API_YEAR = 2022  # Azure OpenAI's first versions (2022-03-01-preview)


def api_version_known(query: Any) -> bool:
    """Whether ``?api-version=`` names a version Azure could serve: a real date from 2022 to next year (with or
    without ``-preview``), or ``v1``, ``latest``, ``preview`` (``2024-13-45`` names none)."""
    version = query.get("api-version")
    if not isinstance(version, str) or API_VERSION.match(version) is None:
        return False
    if not version[:1].isdigit():
        return True
    try:
        day = datetime.date.fromisoformat(version[:10])
    except ValueError:
        return False
    return FIRST_API_YEAR <= day.year <= datetime.date.today().year + 1


class AzureOpenAI(WireAPI):
    """One of OpenAI's adapters as Azure serves it (``versioned``: the route needs ``api-version``)."""

    def __init__(self, inner: WireAPI, name: str, versioned: bool = True, chat: bool = False) -> None:
        self._inner = inner
        self.name = name
        self.id_prefix = inner.id_prefix
        self.versioned = versioned
        self.chat = chat  # chat streams open with Azure's prompt-filter chunk

    def parse(self, body: Any, target: RequestTarget = NO_TARGET) -> GenerationRequest:
        if self.versioned and not api_version_known(target.query):
            raise SimError(404, "Resource not found", code="404")
        deployment = target.params.get("deployment")
        if deployment is not None and isinstance(body, dict) and "model" not in body:
            body = {**body, "model": deployment}  # Azure routes by the deployment; the body need not name it
        return self._inner.parse(body, target)

    def content_filter(self, message: str, prompt: bool) -> SimError | None:
        """As OpenAI's (its error carries Azure's ``innererror``); refused where the inner API has none."""
        inner = getattr(self._inner, "content_filter", None)
        if inner is None:
            raise SimError(400, f"The content_filter fault does not apply to {self.name}.", code="unsupported_fault")
        result: SimError | None = inner(message, prompt)
        return result

    def response_body(self, generation: Generation, response_id: str) -> dict[str, Any]:
        body = self._inner.response_body(generation, response_id)
        if "choices" in body:  # chat and completions: Azure's content-filter annotations
            body["prompt_filter_results"] = [{"prompt_index": 0, "content_filter_results": CONTENT_FILTER_RESULTS}]
            for choice in body["choices"]:
                choice["content_filter_results"] = CONTENT_FILTER_RESULTS
        return body

    def stream(self, generation: Generation, response_id: str) -> StreamRenderer:
        inner = self._inner.stream(generation, response_id)
        return _AzureChatStream(inner) if self.chat else inner

    def rate_limit_headers(self, status: RateLimitStatus) -> dict[str, str]:
        headers = openai_rate_limit_headers(status)
        return {name: value for name, value in headers.items() if name.startswith("x-ratelimit-remaining")}

    request_id_header = "x-request-id"

    def new_request_id(self) -> str:
        return request_uuid()

    def answer_headers(self) -> dict[str, str]:
        """Headers every successful answer carries."""
        return {"apim-request-id": request_uuid()}

    def render_error(self, error: SimError) -> tuple[int, dict[str, Any], dict[str, str]]:
        headers = {**error.headers, "apim-request-id": request_uuid()}
        if error.rate_limit is not None:
            headers.update(self.rate_limit_headers(error.rate_limit))
        if error.status == 404 and error.code == "404":
            return 404, {"error": {"code": "404", "message": "Resource not found"}}, headers
        if error.status == 404 and error.code == "model_not_found":
            return 404, {"error": {"code": "DeploymentNotFound", "message": "The API deployment for this resource "
                                   "does not exist. If you created the deployment within the last 5 minutes, please "
                                   "wait a moment and try again."}}, headers
        if error.status == 429:
            delay = headers.get("Retry-After") or headers.get("retry-after") or "1"
            message = (f"Requests to the {self.name} operation have exceeded the call rate limit of your current "
                       f"pricing tier (simulated by pytest-llmsim). Please retry after {delay} second(s).")
            return 429, {"error": {"code": "429", "message": message}}, headers
        return error.status, openai_error_body(error), headers


class _AzureChatStream:
    """OpenAI's chat stream, opened by Azure's first chunk: the prompt's filter results, no choices."""

    def __init__(self, inner: StreamRenderer) -> None:
        self._inner = inner
        self.token = inner.token  # the hot path, untouched
        self.finish = inner.finish
        self.closing = inner.closing
        self.error = inner.error
        self.aborted = inner.aborted
        self.malformed = inner.malformed
        self.truncated = inner.truncated

    def opening(self, index: int) -> bytes:
        head = b""
        if index == 0:
            head = sse({"id": "", "object": "", "created": 0, "model": "", "choices": [],
                        "prompt_filter_results": [{"prompt_index": 0,
                                                   "content_filter_results": CONTENT_FILTER_RESULTS}]})
        return head + self._inner.opening(index)


AZURE_CHAT = AzureOpenAI(OPENAI_CHAT, "azure.chat", chat=True)
AZURE_COMPLETIONS = AzureOpenAI(OPENAI_COMPLETIONS, "azure.completions")
AZURE_EMBEDDINGS = AzureOpenAI(OPENAI_EMBEDDINGS, "azure.embeddings")
AZURE_RESPONSES = AzureOpenAI(OPENAI_RESPONSES, "azure.responses")
AZURE_V1_CHAT = AzureOpenAI(OPENAI_CHAT, "azure.v1.chat", versioned=False, chat=True)
AZURE_V1_RESPONSES = AzureOpenAI(OPENAI_RESPONSES, "azure.v1.responses", versioned=False)
AZURE_V1_EMBEDDINGS = AzureOpenAI(OPENAI_EMBEDDINGS, "azure.v1.embeddings", versioned=False)

ROUTES = (
    ApiRoute("/openai/deployments/{deployment}/chat/completions", AZURE_CHAT),
    ApiRoute("/openai/deployments/{deployment}/completions", AZURE_COMPLETIONS),
    ApiRoute("/openai/deployments/{deployment}/embeddings", AZURE_EMBEDDINGS),
    ApiRoute("/openai/responses", AZURE_RESPONSES),
    ApiRoute("/openai/v1/responses", AZURE_V1_RESPONSES),
    ApiRoute("/openai/v1/embeddings", AZURE_V1_EMBEDDINGS),
    ApiRoute("/openai/models", AZURE_CHAT, ("GET",), list_models),
    ApiRoute("/openai/v1/models", AZURE_V1_CHAT, ("GET",), list_models),
    ApiRoute("/openai/v1/models/{id}", AZURE_V1_CHAT, ("GET",), show_model),
)
