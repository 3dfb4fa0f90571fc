"""Rerank and score: Cohere's ``/v2/rerank``, Jina's and vLLM's ``/v1/rerank`` and ``/rerank``, vLLM's ``/score``.

Routes::

    POST /v2/rerank                   COHERE_RERANK ("cohere.rerank"): results[{index, relevance_score}]
    POST /v1/rerank, /rerank          VLLM_RERANK ("vllm.rerank"): Jina's shape, documents returned
    POST /score, /v1/score            VLLM_SCORE ("vllm.score"): data[{index, object: "score", score}]

A relevance score is the cosine of the query's and the document's
embeddings (the same deterministic, similarity-preserving vectors as
``/v1/embeddings``), floored at 0: a document that shares the query's words
scores above one that does not, the same texts always score the same. The
query and every document go through the engine as an embedding request's
inputs (one prefill each, taking batch slots), so queueing, faults, limits
and the metrics apply as to embeddings.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from ..sim import GenerationRequest, SimError, invalid
from .base import NO_TARGET, RequestTarget, WireAPI
from .openai_common import OpenAIErrors
from .routing import ApiRoute
from .validation import describe, expect_object, is_int

if TYPE_CHECKING:
    from ..sim.generation import Generation

__all__ = ["COHERE_RERANK", "ROUTES", "VLLM_RERANK", "VLLM_SCORE"]

MAX_DOCUMENTS = 1000


def _text(value: Any, param: str, objects: bool) -> str:
    if isinstance(value, str) and value:
        return value
    if objects and isinstance(value, dict) and isinstance(value.get("text"), str) and value["text"]:
        return str(value["text"])
    expected = "a non-empty string or {'text': ...}" if objects else "a non-empty string"
    raise invalid(f"Invalid '{param}': expected {expected}, got {describe(value)}.", param, "invalid_value")


def _documents(body: dict[str, Any], objects: bool) -> list[str]:
    documents = body.get("documents")
    if not isinstance(documents, list) or not documents or len(documents) > MAX_DOCUMENTS:
        raise invalid(f"Invalid 'documents': 1 to {MAX_DOCUMENTS} documents are required.", "documents",
                      "missing_required_parameter" if documents is None else "invalid_value")
    return [_text(document, f"documents[{i}]", objects) for i, document in enumerate(documents)]


def _model(body: dict[str, Any]) -> str:
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise invalid("Invalid 'model': a model name is required.", "model", "missing_required_parameter")
    return model


def _top_n(body: dict[str, Any], count: int) -> int:
    top_n = body.get("top_n")
    if top_n is None:
        return count
    if not is_int(top_n) or top_n < 1:
        raise invalid(f"Invalid 'top_n': expected a positive integer, got {describe(top_n)}.", "top_n",
                      "invalid_value")
    return min(int(top_n), count)


def _rerank_request(body: Any, objects: bool, known: tuple[str, ...]) -> GenerationRequest:
    body = expect_object(body)
    unknown = sorted(set(body) - set(known))
    if unknown:
        raise invalid(f"Unrecognized request argument: {unknown[0]!r} (pytest-llmsim reads {', '.join(known)}).",
                      unknown[0], "unknown_parameter")
    query = _text(body.get("query"), "query", False)
    documents = _documents(body, objects)
    top_n = _top_n(body, len(documents))
    max_per_doc = body.get("max_tokens_per_doc")
    if max_per_doc is not None and (not is_int(max_per_doc) or max_per_doc < 1):
        raise invalid("Invalid 'max_tokens_per_doc': expected a positive integer.", "max_tokens_per_doc",
                      "invalid_value")
    return_documents = body.get("return_documents", objects)
    if not isinstance(return_documents, bool):
        raise invalid("Invalid 'return_documents': expected a boolean.", "return_documents", "invalid_type")
    return GenerationRequest(kind="embedding", model=_model(body), stream=False, include_usage=False, max_tokens=0,
                             n=1, stops=[], seed=None, prompts=[query, *documents], prompt_param="documents",
                             wire={"top_n": top_n, "documents": documents, "return_documents": return_documents})


def _score(first: list[float], second: list[float]) -> float:
    """Two texts' relevance: their unit vectors' cosine, floored at 0."""
    return round(max(0.0, sum(a * b for a, b in zip(first, second))), 6)


def _results(generation: Generation) -> list[dict[str, Any]]:
    """The ``top_n`` documents, best first: ``index``, ``relevance_score`` (and ``document``, when asked)."""
    query, *vectors = generation.embeddings()
    scores = [_score(query, vector) for vector in vectors]
    order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))[:generation.request.wire["top_n"]]
    wire = generation.request.wire
    return [{"index": i, "relevance_score": scores[i],
             **({"document": {"text": wire["documents"][i]}} if wire["return_documents"] else {})} for i in order]


class CohereErrors(WireAPI):
    """Cohere's error answer: the status, ``{"message": ...}``; no rate-limit headers."""

    def rate_limit_headers(self, status: Any) -> dict[str, str]:
        return {}

    def render_error(self, error: SimError) -> tuple[int, dict[str, Any], dict[str, str]]:
        return error.status, {"message": error.message}, dict(error.headers)


class CohereRerank(CohereErrors):
    """``POST /v2/rerank``: ``model``, ``query``, ``documents`` (strings), ``top_n``, ``max_tokens_per_doc``."""

    name = "cohere.rerank"
    id_prefix = "rr-"

    def parse(self, body: Any, target: RequestTarget = NO_TARGET) -> GenerationRequest:
        return _rerank_request(body, False, ("model", "query", "documents", "top_n", "max_tokens_per_doc",
                                             "return_documents"))

    def response_body(self, generation: Generation, response_id: str) -> dict[str, Any]:
        return {"id": response_id, "results": _results(generation),
                "meta": {"api_version": {"version": "2"}, "billed_units": {"search_units": 1}}}

    def stream(self, generation: Generation, response_id: str) -> Any:
        raise TypeError("rerank is never streamed")  # parse() never asks for a stream


class VLLMRerank(OpenAIErrors):
    """``POST /v1/rerank`` and ``/rerank`` in Jina's shape (as vLLM serves it)."""

    name = "vllm.rerank"
    id_prefix = "rerank-"

    def parse(self, body: Any, target: RequestTarget = NO_TARGET) -> GenerationRequest:
        return _rerank_request(body, True, ("model", "query", "documents", "top_n", "return_documents",
                                            "max_tokens_per_doc"))

    def response_body(self, generation: Generation, response_id: str) -> dict[str, Any]:
        return {"id": response_id, "model": generation.request.model, "results": _results(generation),
                "usage": {"total_tokens": generation.prompt_tokens}}

    def stream(self, generation: Generation, response_id: str) -> Any:
        raise TypeError("rerank is never streamed")


def _texts(value: Any, param: str) -> list[str]:
    if isinstance(value, str):
        return [_text(value, param, False)]
    if isinstance(value, list) and value and len(value) <= MAX_DOCUMENTS:
        return [_text(item, f"{param}[{i}]", False) for i, item in enumerate(value)]
    raise invalid(f"Invalid '{param}': expected a string or a list of 1 to {MAX_DOCUMENTS} strings.", param,
                  "invalid_value")


class VLLMScore(OpenAIErrors):
    """``POST /score`` and ``/v1/score``: ``text_1`` against each ``text_2`` (or pairwise, two lists)."""

    name = "vllm.score"
    id_prefix = "score-"

    def parse(self, body: Any, target: RequestTarget = NO_TARGET) -> GenerationRequest:
        body = expect_object(body)
        unknown = sorted(set(body) - {"model", "text_1", "text_2", "user"})
        if unknown:
            raise invalid(f"Unrecognized request argument: {unknown[0]!r} (pytest-llmsim reads model, text_1, "
                          f"text_2, user).", unknown[0], "unknown_parameter")
        first, second = _texts(body.get("text_1"), "text_1"), _texts(body.get("text_2"), "text_2")
        if len(first) > 1 and len(first) != len(second):
            raise invalid("text_1 and text_2 must have the same length when both are lists.", "text_2",
                          "invalid_value")
        pairs = [(0, j) for j in range(len(second))] if len(first) == 1 else [(i, i) for i in range(len(first))]
        return GenerationRequest(kind="embedding", model=_model(body), stream=False, include_usage=False,
                                 max_tokens=0, n=1, stops=[], seed=None, prompts=[*first, *second],
                                 prompt_param="text_1", wire={"pairs": pairs, "first": len(first)})

    def response_body(self, generation: Generation, response_id: str) -> dict[str, Any]:
        vectors = generation.embeddings()
        offset = generation.request.wire["first"]
        data = [{"index": n, "object": "score", "score": _score(vectors[i], vectors[offset + j])}
                for n, (i, j) in enumerate(generation.request.wire["pairs"])]
        return {"id": response_id, "object": "list", "created": int(time.time()), "model": generation.request.model,
                "data": data, "usage": {"prompt_tokens": generation.prompt_tokens,
                                        "total_tokens": generation.prompt_tokens}}

    def stream(self, generation: Generation, response_id: str) -> Any:
        raise TypeError("scores are never streamed")


COHERE_RERANK = CohereRerank()
VLLM_RERANK = VLLMRerank()
VLLM_SCORE = VLLMScore()

ROUTES = (ApiRoute("/v2/rerank", COHERE_RERANK), ApiRoute("/v1/rerank", VLLM_RERANK), ApiRoute("/rerank", VLLM_RERANK),
          ApiRoute("/v1/score", VLLM_SCORE), ApiRoute("/score", VLLM_SCORE))
