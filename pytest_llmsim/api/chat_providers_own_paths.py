"""OpenAI-compatible providers with chat paths of their own: Groq (``/openai/v1``), OpenRouter (``/api/v1``) and
Perplexity (``/chat/completions``); served by :mod:`.chat_providers`'s routes with the others."""

from __future__ import annotations

import hashlib
import time
from typing import TYPE_CHECKING, Any

from ..sim import GenerationRequest, RateLimitStatus, SimError, invalid
from ..sim.request import ReasoningAsk
from .base import NO_TARGET, RequestTarget
from .compatible_chat import TAGS, ProviderChat, chat_fields, reasoning_effort
from .openai_common import generation_usage

if TYPE_CHECKING:
    from ..sim.generation import Generation

__all__ = ["GROQ", "OPENROUTER", "PERPLEXITY"]


def _times(generation: Generation) -> dict[str, float]:
    """Groq's usage times: simulated seconds queued, prefilling and decoding (of the first choice)."""
    seq = generation.sequences[0]
    queued = seq.queue_time or 0.0
    ttft = seq.ttft if seq.ttft is not None else queued
    e2e = seq.e2e if seq.e2e is not None else ttft
    prompt, completion = max(0.0, ttft - queued), max(0.0, e2e - ttft)
    return {"queue_time": round(queued, 6), "prompt_time": round(prompt, 6), "completion_time": round(completion, 6),
            "total_time": round(prompt + completion, 6)}


class GroqChat(ProviderChat):
    """Groq (``api.groq.com/openai/v1``): ``reasoning_format`` (``parsed``: ``message.reasoning``; ``raw``:
    ``<think>`` in the content; ``hidden``), usage with its timings, ``x_groq`` with the request id (and, on a
    stream's last chunk, the usage)."""

    provider = "groq"
    own = frozenset({"reasoning_effort"})
    models = ("llama-", "llama3", "meta-llama/", "openai/gpt-oss", "moonshotai/", "qwen/", "groq/", "gemma",
              "deepseek-r1-distill", "allam-", "mistral-saba", "compound")
    fields = chat_fields(honoured=("reasoning_format", "include_reasoning"),
                         no_effect=("disable_tool_validation", "exclude_domains", "include_domains"),
                         refused={"search_settings": "web search is not simulated",
                                  "documents": "document grounding is not simulated",
                                  "citation_options": "document grounding is not simulated",
                                  "compound_custom": "Groq's compound systems are not simulated"})

    def read(self, body: dict[str, Any], request: GenerationRequest) -> None:
        fmt = body.get("reasoning_format")
        if fmt is not None and fmt not in ("parsed", "raw", "hidden"):
            raise invalid("'reasoning_format' must be one of: parsed, raw, hidden", "reasoning_format",
                          "invalid_value")
        if fmt is not None and body.get("include_reasoning") is not None:
            raise invalid("'include_reasoning' and 'reasoning_format' cannot be used together", "include_reasoning",
                          "invalid_value")
        request.reasoning = reasoning_effort(body, "reasoning_effort", ("none", "default", "low", "medium", "high"))
        if request.reasoning is not None and request.reasoning.effort == "none":
            request.reasoning = None
        elif request.reasoning is None and fmt is not None:
            request.reasoning = ReasoningAsk(param="reasoning_format")
        request.wire["reasoning_format"] = fmt or ("hidden" if body.get("include_reasoning") is False else "parsed")

    def shown(self, request: GenerationRequest) -> str | None:
        return {"parsed": "reasoning", "raw": TAGS, "hidden": None}[request.wire["reasoning_format"]]

    def usage(self, generation: Generation) -> dict[str, Any]:
        return {**generation_usage(generation), **_times(generation)}

    def extras(self, generation: Generation, response_id: str) -> dict[str, Any]:
        return {"x_groq": {"id": _groq_id(response_id), "seed": generation.seed}}

    def chunk_extras(self, generation: Generation, response_id: str, first: bool, last: bool) -> dict[str, Any]:
        if first:
            return {"x_groq": {"id": _groq_id(response_id)}}
        if last:
            return {"x_groq": {"id": _groq_id(response_id), "seed": generation.seed, "usage": self.usage(generation)}}
        return {}


def _groq_id(response_id: str) -> str:
    return "req_" + hashlib.sha256(response_id.encode()).hexdigest()[:26]


class OpenRouterChat(ProviderChat):
    """OpenRouter (``openrouter.ai/api/v1``): ``models`` (the first is served when ``model`` is left out),
    ``reasoning`` (``message.reasoning``), usage with ``cost`` in every stream, ``provider`` on the answer,
    errors as ``{"error": {"code": <status>, "message", "metadata"}}`` and ``X-RateLimit-*`` headers."""

    provider = "openrouter"
    usage_in_stream = "always"
    fields = chat_fields(honoured=("models", "reasoning"),
                         no_effect=("provider", "transforms", "route", "usage", "top_k", "min_p", "top_a",
                                    "repetition_penalty", "debug", "session_id", "trace", "image_config"),
                         refused={"plugins": "OpenRouter's plugins (web search, file parsing) are not simulated"})

    def parse(self, body: Any, target: RequestTarget = NO_TARGET) -> GenerationRequest:
        if isinstance(body, dict) and body.get("model") is None and isinstance(body.get("models"), list):
            models = [m for m in body["models"] if isinstance(m, str)]
            if models:
                body = {**body, "model": models[0]}
        return super().parse(body, target)

    def read(self, body: dict[str, Any], request: GenerationRequest) -> None:
        reasoning = body.get("reasoning")
        if reasoning is None:
            return
        if not isinstance(reasoning, dict):
            raise invalid("'reasoning' must be an object", "reasoning", "invalid_type")
        if reasoning.get("enabled") is False or reasoning.get("effort") == "none":
            request.reasoning = None
            return
        budget = reasoning.get("max_tokens")
        if budget is not None and (not isinstance(budget, int) or budget < 0):
            raise invalid("'reasoning.max_tokens' must be a non-negative integer", "reasoning.max_tokens",
                          "invalid_value")
        effort = reasoning.get("effort") or "medium"
        if effort not in ("minimal", "low", "medium", "high", "xhigh"):
            raise invalid(f"'reasoning.effort' must be one of minimal, low, medium, high, xhigh; got {effort!r}",
                          "reasoning.effort", "invalid_value")
        request.reasoning = ReasoningAsk(effort=effort, budget=budget, param="reasoning")
        request.wire["reasoning_excluded"] = reasoning.get("exclude") is True

    def shown(self, request: GenerationRequest) -> str | None:
        return None if request.wire.get("reasoning_excluded") else "reasoning"

    def usage(self, generation: Generation) -> dict[str, Any]:
        usage = generation_usage(generation)
        cost = round((usage["prompt_tokens"] * 0.1 + usage["completion_tokens"] * 0.4) / 1e6, 9)
        return {**usage, "cost": cost, "is_byok": False, "cost_details": {"upstream_inference_cost": None}}

    def extras(self, generation: Generation, response_id: str) -> dict[str, Any]:
        return {"provider": "pytest-llmsim"}

    def chunk_extras(self, generation: Generation, response_id: str, first: bool, last: bool) -> dict[str, Any]:
        return {"provider": "pytest-llmsim"}

    def error_body(self, error: SimError) -> dict[str, Any]:
        metadata: dict[str, Any] = {}
        if error.param:
            metadata["param"] = error.param
        return {"error": {"code": error.status, "message": error.message, "metadata": metadata or None},
                "user_id": None}

    def rate_limit_headers(self, status: RateLimitStatus) -> dict[str, str]:
        if status.rpm is None:
            return {}
        reset_ms = int((time.time() + status.reset) * 1000)
        return {"X-RateLimit-Limit": str(status.rpm), "X-RateLimit-Remaining": str(status.requests_remaining),
                "X-RateLimit-Reset": str(reset_ms)}


class PerplexityChat(ProviderChat):
    """Perplexity (``api.perplexity.ai``): answers with ``citations`` and ``search_results`` (made-up, seeded by
    the prompt; none with ``disable_search``), the ``sonar-reasoning`` models think in ``<think>`` tags, usage
    with ``search_context_size``, ``num_search_queries`` and a ``cost``, on a stream's last chunk."""

    provider = "perplexity"
    usage_in_stream = "finish"
    models = ("sonar", "r1-1776")
    fields = chat_fields(
        honoured=("disable_search", "web_search_options"),
        no_effect=("search_mode", "search_domain_filter", "search_recency_filter", "search_after_date_filter",
                   "search_before_date_filter", "last_updated_after_filter", "last_updated_before_filter",
                   "return_images", "return_related_questions", "top_k", "enable_search_classifier",
                   "language_preference", "stream_mode", "search_language_filter", "image_domain_filter",
                   "image_format_filter"),
        without=("web_search_options",))

    def read(self, body: dict[str, Any], request: GenerationRequest) -> None:
        options = body.get("web_search_options") or {}
        size = options.get("search_context_size", "low") if isinstance(options, dict) else "low"
        if size not in ("low", "medium", "high"):
            raise invalid("web_search_options.search_context_size must be low, medium or high",
                          "web_search_options.search_context_size", "invalid_value")
        request.wire["search_context_size"] = size
        request.wire["searched"] = body.get("disable_search") is not True
        if request.model.lower().startswith("sonar-reasoning") and request.reasoning is None:
            request.reasoning = ReasoningAsk(param="model")

    def shown(self, request: GenerationRequest) -> str | None:
        return TAGS

    def usage(self, generation: Generation) -> dict[str, Any]:
        usage = generation_usage(generation)
        searched = generation.request.wire.get("searched", True)
        input_cost = round(usage["prompt_tokens"] / 1e6, 6)
        output_cost = round(usage["completion_tokens"] / 1e6, 6)
        request_cost = 0.005 if searched else 0.0
        return {"prompt_tokens": usage["prompt_tokens"], "completion_tokens": usage["completion_tokens"],
                "total_tokens": usage["total_tokens"],
                "search_context_size": generation.request.wire.get("search_context_size", "low"),
                "num_search_queries": 1 if searched else 0,
                "reasoning_tokens": usage["completion_tokens_details"]["reasoning_tokens"],
                "cost": {"input_tokens_cost": input_cost, "output_tokens_cost": output_cost,
                         "request_cost": request_cost, "total_cost": round(input_cost + output_cost + request_cost, 6)}}

    def _sources(self, generation: Generation) -> dict[str, Any]:
        if not generation.request.wire.get("searched", True):
            return {"citations": [], "search_results": []}
        last = generation.request.messages[-1].content if generation.request.messages else ""
        digest = hashlib.sha256(last.encode()).hexdigest()
        results = [{"title": f"Source {n + 1} ({digest[n * 6:n * 6 + 6]})",
                    "url": f"https://example.com/llmsim/{digest[:12]}/{n + 1}", "date": "2026-01-01",
                    "last_updated": "2026-01-01", "snippet": last[:120], "source": "web"} for n in range(3)]
        return {"citations": [r["url"] for r in results], "search_results": results}

    def extras(self, generation: Generation, response_id: str) -> dict[str, Any]:
        return self._sources(generation)

    def chunk_extras(self, generation: Generation, response_id: str, first: bool, last: bool) -> dict[str, Any]:
        return self._sources(generation)


GROQ = GroqChat()
OPENROUTER = OpenRouterChat()
PERPLEXITY = PerplexityChat()
