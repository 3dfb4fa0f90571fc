"""Seven OpenAI-compatible providers' chat completions, each as its official client and docs show it.

Routes::

    POST /v1/chat/completions          OpenAI's, or Mistral's, Together's, DeepSeek's, xAI's (by model or field)
    POST /openai/v1/chat/completions   Groq's (its model names), else Azure's v1 surface
    POST /api/v1/chat/completions      OpenRouter's
    POST /chat/completions             Perplexity's

A request header ``x-llmsim-provider: NAME`` (``groq``, ``openrouter``, ``mistral``, ``together``,
``deepseek``, ``xai``, ``perplexity``) makes any of these paths speak that provider. What each provider
changes of OpenAI's chat (:mod:`.compatible_chat`) is in its class: fields, thinking, usage, extras, errors,
rate-limit headers. Search (Perplexity's citations, xAI's sources) is not run: citations are made-up URLs on
``example.com``, seeded by the prompt.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from ..sim import GenerationRequest, RateLimitStatus, SimError, invalid
from ..sim.request import ReasoningAsk
from .azure import AZURE_V1_CHAT
from .base import NO_TARGET, RequestTarget, request_uuid
from .chat_providers_own_paths import GROQ, OPENROUTER, PERPLEXITY
from .compatible_chat import ChatByProvider, ProviderChat, chat_fields, provider_guard, reasoning_effort
from .openai_chat import OPENAI_CHAT
from .openai_common import generation_usage
from .routing import ApiRoute

if TYPE_CHECKING:
    from ..sim.generation import Generation
    from ..sim.tokens import PlannedCall

__all__ = ["DEEPSEEK", "GROQ", "MISTRAL", "OPENROUTER", "PERPLEXITY", "PROVIDERS", "ROUTES", "TOGETHER", "XAI"]


_MISTRAL_CALL_ID = re.compile(r"[a-zA-Z0-9]{9}\Z")
_MISTRAL_FIELDS = ("model", "messages", "temperature", "top_p", "max_tokens", "stream", "stop", "random_seed",
                   "metadata", "response_format", "tools", "tool_choice", "presence_penalty", "frequency_penalty",
                   "min_tokens", "repetition_penalty", "top_k", "logprobs", "top_logprobs", "prompt_logprobs",
                   "top_prompt_logprobs", "n", "prediction", "parallel_tool_calls", "reasoning_effort", "prompt_mode",
                   "guardrails", "prompt_cache_key", "service_tier", "safe_prompt")


class MistralChat(ProviderChat):
    """Mistral (``api.mistral.ai/v1``): strict about fields (one it does not define is a 422 ``extra_forbidden``,
    ``max_completion_tokens`` and ``stream_options`` included), ``random_seed``, ``tool_choice: "any"``, tool
    call ids of nine letters and digits (and refused in the history when they are not), usage on a stream's
    last chunk, and its error bodies (``{"object": "error", ...}``; a 401 ``{"message": "Unauthorized"}``)."""

    provider = "mistral"
    strict = True
    usage_in_stream = "finish"
    models = ("mistral-", "open-mistral", "open-mixtral", "open-codestral", "codestral", "ministral", "pixtral",
              "magistral", "devstral", "voxtral")
    marks = frozenset({"safe_prompt", "random_seed", "prompt_mode"})
    fields = chat_fields(no_effect=("random_seed", "safe_prompt", "prompt_mode", "min_tokens", "repetition_penalty",
                                    "top_k", "guardrails", "prompt_logprobs", "top_prompt_logprobs"),
                         without=[name for name in chat_fields().known if name not in _MISTRAL_FIELDS])

    def parse(self, body: Any, target: RequestTarget = NO_TARGET) -> GenerationRequest:
        if isinstance(body, dict) and body.get("tool_choice") == "any":
            body = {**body, "tool_choice": "required"}  # Mistral's word for it
        request = super().parse(body, target)
        seed = body.get("random_seed")
        if seed is not None:
            if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
                raise invalid("Input should be a valid integer, greater than or equal to 0", "random_seed",
                              "int_type")
            request.seed = seed
        return request

    def read(self, body: dict[str, Any], request: GenerationRequest) -> None:
        for message in body["messages"]:
            ids = [message.get("tool_call_id")] if message.get("role") == "tool" else [
                call.get("id") for call in message.get("tool_calls") or () if isinstance(call, dict)]
            for call_id in ids:
                if call_id is not None and not (isinstance(call_id, str) and _MISTRAL_CALL_ID.match(call_id)):
                    raise SimError(400, f"Tool call id was {call_id} but must be a-z, A-Z, 0-9, with a length of 9.",
                                   type="invalid_request_message_error", code="3280")

    def call_id(self, call: PlannedCall) -> str:
        return (re.sub(r"[^a-zA-Z0-9]", "", call.key) + "000000000")[:9]

    def usage(self, generation: Generation) -> dict[str, Any]:
        usage = generation_usage(generation)
        return {"prompt_tokens": usage["prompt_tokens"], "completion_tokens": usage["completion_tokens"],
                "total_tokens": usage["total_tokens"]}

    def unknown_field(self, name: str, value: Any) -> SimError:
        return SimError(422, "Extra inputs are not permitted", param=name, code="extra_forbidden",
                        details={"input": value})

    def error_body(self, error: SimError) -> dict[str, Any]:
        if error.status == 401:
            return {"message": "Unauthorized", "request_id": request_uuid().replace("-", "")}
        if error.status == 429:
            return {"object": "error", "message": "Requests rate limit exceeded", "type": "rate_limited",
                    "param": None, "code": "1300"}
        if _is_validation(error):  # a body the schema refuses: pydantic's details, as Mistral's API answers
            assert error.param is not None
            kind = error.code if error.code == "extra_forbidden" else "value_error"
            detail = {"type": kind, "loc": ["body", *error.param.replace("[", ".").replace("]", "").split(".")],
                      "msg": error.message, "input": error.details.get("input")}
            return {"object": "error", "message": {"detail": [detail]}, "type": "invalid_request_error",
                    "param": None, "code": None}
        return {"object": "error", "message": error.message, "type": error.type, "param": error.param,
                "code": error.code}

    def render_error(self, error: SimError) -> tuple[int, dict[str, Any], dict[str, str]]:
        status, body, headers = super().render_error(error)
        return (422 if _is_validation(error) else status), body, headers

    def rate_limit_headers(self, status: RateLimitStatus) -> dict[str, str]:
        if status.tpm is None:
            return {}
        return {"x-ratelimitbysize-limit-minute": str(status.tpm),
                "x-ratelimitbysize-remaining-minute": str(status.tokens_remaining)}


def _is_validation(error: SimError) -> bool:
    """A refusal of the body's shape (a field's type or value), which Mistral answers 422 with pydantic's details."""
    return error.status in (400, 422) and bool(error.param) and error.type == "invalid_request_error"


class TogetherChat(ProviderChat):
    """Together AI (``api.together.xyz/v1``): its sampling fields, ``reasoning: {"enabled"}`` (``delta.reasoning``),
    every delta naming its role, usage (with ``cached_tokens``) on a stream's last chunk, ``prompt`` and each
    choice's ``seed`` on an answer."""

    provider = "together"
    usage_in_stream = "finish"
    role_in_deltas = True
    marks = frozenset({"safety_model", "context_length_exceeded_behavior"})
    fields = chat_fields(honoured=("reasoning",),
                         no_effect=("repetition_penalty", "top_k", "min_p", "safety_model", "echo", "compliance",
                                    "context_length_exceeded_behavior", "chat_template_kwargs"))

    def claims(self, model: str) -> bool:
        """Together's serverless catalogue: ``org/Model-...-Turbo`` (``-Lite``, ``-Free``, ``-Reference``)."""
        return "/" in model and model.endswith(("-turbo", "-lite", "-free", "-reference"))

    def read(self, body: dict[str, Any], request: GenerationRequest) -> None:
        reasoning = body.get("reasoning")
        if isinstance(reasoning, dict) and reasoning.get("enabled") is True and request.reasoning is None:
            request.reasoning = ReasoningAsk(param="reasoning")
        elif isinstance(reasoning, dict) and reasoning.get("enabled") is False:
            request.reasoning = None

    def shown(self, request: GenerationRequest) -> str | None:
        return "reasoning"

    def usage(self, generation: Generation) -> dict[str, Any]:
        usage = generation_usage(generation)
        return {"prompt_tokens": usage["prompt_tokens"], "completion_tokens": usage["completion_tokens"],
                "total_tokens": usage["total_tokens"], "cached_tokens": generation.cached_tokens}

    def extras(self, generation: Generation, response_id: str) -> dict[str, Any]:
        return {"prompt": []}

    def choice_extras(self) -> dict[str, Any]:
        return {"seed": None}

    def rate_limit_headers(self, status: RateLimitStatus) -> dict[str, str]:
        headers: dict[str, str] = {}
        if status.rpm is not None:
            headers.update({"x-ratelimit-limit": str(status.rpm),
                            "x-ratelimit-remaining": str(status.requests_remaining),
                            "x-ratelimit-reset": str(max(1, round(status.reset)))})
        if status.tpm is not None:
            headers.update({"x-ratelimit-limit-tokens": str(status.tpm),
                            "x-ratelimit-remaining-tokens": str(status.tokens_remaining)})
        return headers


class DeepSeekChat(ProviderChat):
    """DeepSeek (``api.deepseek.com``): ``deepseek-reasoner`` (or ``thinking: {"type": "enabled"}``) thinks and
    shows it as ``reasoning_content``; usage adds ``prompt_cache_hit_tokens`` and ``prompt_cache_miss_tokens``;
    DeepSeek sends no rate-limit headers."""

    provider = "deepseek"
    models = ("deepseek-chat", "deepseek-reasoner", "deepseek-coder")
    marks = frozenset({"thinking"})
    fields = chat_fields(honoured=("thinking",))

    def read(self, body: dict[str, Any], request: GenerationRequest) -> None:
        thinking = body.get("thinking")
        if thinking is not None and (not isinstance(thinking, dict) or thinking.get("type") not in ("enabled",
                                                                                                    "disabled")):
            raise invalid("thinking.type must be 'enabled' or 'disabled'", "thinking", "invalid_request_error")
        enabled = thinking.get("type") == "enabled" if thinking else request.model.lower() == "deepseek-reasoner"
        request.reasoning = ReasoningAsk(param="thinking") if enabled else None

    def shown(self, request: GenerationRequest) -> str | None:
        return "reasoning_content"

    def usage(self, generation: Generation) -> dict[str, Any]:
        usage = generation_usage(generation)
        cached = generation.cached_tokens
        return {**usage, "prompt_cache_hit_tokens": cached, "prompt_cache_miss_tokens": usage["prompt_tokens"] - cached}

    def rate_limit_headers(self, status: RateLimitStatus) -> dict[str, str]:
        return {}


_XAI_CODES = {400: "Client specified an invalid argument", 401: "Unauthenticated", 403: "Permission denied",
              404: "Some requested entity was not found", 422: "Client specified an invalid argument",
              429: "Some resource has been exhausted", 500: "Internal error",
              503: "The service is currently unavailable"}


class XaiChat(ProviderChat):
    """xAI (``api.x.ai/v1``): ``grok-*`` models, ``reasoning_effort`` (``low``/``high``, shown as
    ``reasoning_content``), usage with its token details and ``num_sources_used``, errors as
    ``{"code": "...", "error": "..."}``, and a wrong API key answered 400, as xAI does."""

    provider = "xai"
    own = frozenset({"reasoning_effort"})
    models = ("grok-",)
    marks = frozenset({"search_parameters"})
    fields = chat_fields(refused={"search_parameters": "xAI's live search is not simulated"})

    def read(self, body: dict[str, Any], request: GenerationRequest) -> None:
        request.reasoning = reasoning_effort(body, "reasoning_effort", ("low", "high"))

    def shown(self, request: GenerationRequest) -> str | None:
        return "reasoning_content"

    def usage(self, generation: Generation) -> dict[str, Any]:
        usage = generation_usage(generation)
        usage["prompt_tokens_details"] = {"text_tokens": usage["prompt_tokens"], "audio_tokens": 0, "image_tokens": 0,
                                          "cached_tokens": generation.cached_tokens}
        usage["num_sources_used"] = 0
        return usage

    def error_body(self, error: SimError) -> dict[str, Any]:
        message = error.message
        if error.status == 401:
            message = "Incorrect API key provided. You can obtain an API key from https://console.x.ai."
        return {"code": _XAI_CODES.get(error.status, "Unknown error"), "error": message}

    def render_error(self, error: SimError) -> tuple[int, dict[str, Any], dict[str, str]]:
        status, body, headers = super().render_error(error)
        return (400 if status == 401 else status), body, headers


MISTRAL = MistralChat()
TOGETHER = TogetherChat()
DEEPSEEK = DeepSeekChat()
XAI = XaiChat()
PROVIDERS = (GROQ, OPENROUTER, MISTRAL, TOGETHER, DEEPSEEK, XAI, PERPLEXITY)

_SHARED = {
    "/v1/chat/completions": ChatByProvider(OPENAI_CHAT, (MISTRAL, DEEPSEEK, XAI, TOGETHER)),
    "/openai/v1/chat/completions": ChatByProvider(AZURE_V1_CHAT, (GROQ,)),
    "/api/v1/chat/completions": OPENROUTER,
    "/chat/completions": PERPLEXITY,
}

ROUTES = (
    *(ApiRoute(path, api, accepts=provider_guard(api.provider)) for path in _SHARED for api in PROVIDERS),
    *(ApiRoute(path, api) for path, api in _SHARED.items()),
)
