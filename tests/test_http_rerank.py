"""Rerank and score: Cohere's ``/v2/rerank`` through the official ``cohere`` SDK, Jina's and vLLM's
``/v1/rerank``/``/rerank`` and vLLM's ``/score`` through httpx and LiteLLM's ``rerank()``."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import cohere
import httpx
import pytest

from pytest_llmsim import GENERATION_FAULT_KINDS, LLMBackend

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
pytestmark = [pytest.mark.usefixtures("loopback_only"),
              pytest.mark.filterwarnings("ignore:The `__fields__` attribute is deprecated:DeprecationWarning")]
DOCS = ["The cat sat on the mat.", "Stock prices fell sharply today.", "A cat and a mat: a story about a cat."]
QUERY = "cat on a mat"


@pytest.fixture
def co(llm_backend: LLMBackend) -> Iterator[cohere.ClientV2]:
    client = cohere.ClientV2(api_key="test-key", base_url=llm_backend.root_url)
    yield client
    client._client_wrapper.httpx_client.httpx_client.close()


def test_cohere_rerank_orders_by_shared_words(llm_backend: LLMBackend, co: cohere.ClientV2) -> None:
    ranked = co.rerank(model="rerank-v3.5", query=QUERY, documents=DOCS)
    order = [result.index for result in ranked.results]
    assert order[-1] == 1  # the document that shares none of the query's words comes last
    scores = [result.relevance_score for result in ranked.results]
    assert scores == sorted(scores, reverse=True) and scores[-1] < min(scores[:-1])
    assert ranked.meta is not None and ranked.meta.billed_units is not None
    assert ranked.meta.billed_units.search_units == 1
    again = co.rerank(model="rerank-v3.5", query=QUERY, documents=DOCS)
    assert [r.relevance_score for r in again.results] == scores  # deterministic
    top = co.rerank(model="rerank-v3.5", query=QUERY, documents=DOCS, top_n=1)
    assert len(top.results) == 1 and top.results[0].index == order[0]
    record = llm_backend.requests[-1]
    assert (record.api, record.route, record.status) == ("cohere.rerank", "/v2/rerank", 200)
    assert record.prompt_tokens > 0


def test_vllm_and_jina_rerank_return_documents(llm_backend: LLMBackend) -> None:
    for path in ("/v1/rerank", "/rerank"):
        answer = httpx.post(llm_backend.url_for(path), json={"model": "bge", "query": QUERY, "top_n": 2,
                                                            "documents": [{"text": d} for d in DOCS]}).json()
        assert [result["document"]["text"] for result in answer["results"]] == [DOCS[r["index"]]
                                                                                 for r in answer["results"]]
        assert len(answer["results"]) == 2 and answer["usage"]["total_tokens"] == llm_backend.requests[-1].prompt_tokens
    bare = httpx.post(llm_backend.url_for("/v1/rerank"), json={"model": "bge", "query": QUERY, "documents": DOCS,
                                                                "return_documents": False}).json()
    assert all("document" not in result for result in bare["results"])


def test_score_one_against_many_and_pairwise(llm_backend: LLMBackend) -> None:
    many = httpx.post(llm_backend.url_for("/score"), json={"model": "m", "text_1": QUERY, "text_2": DOCS}).json()
    assert [item["index"] for item in many["data"]] == [0, 1, 2] and many["data"][1]["score"] < many["data"][0]["score"]
    pairs = httpx.post(llm_backend.url_for("/v1/score"), json={"model": "m", "text_1": [QUERY, "stock prices"],
                                                               "text_2": [DOCS[0], DOCS[1]]}).json()
    assert all(item["object"] == "score" and item["score"] > 0.1 for item in pairs["data"])
    assert llm_backend.requests[-1].api == "vllm.score"


def test_litellm_rerank_through_cohere_and_jina() -> None:
    litellm = pytest.importorskip("litellm")
    with LLMBackend(speed=float("inf")) as backend:
        for model, base in (("cohere/rerank-v3.5", backend.root_url),
                            ("jina_ai/jina-reranker-v2", backend.root_url + "/v1")):
            response = litellm.rerank(model=model, query=QUERY, documents=DOCS, api_base=base, api_key="k", top_n=1)
            assert response.results[0]["index"] in (0, 2)
        assert [record.api for record in backend.requests] == ["cohere.rerank", "vllm.rerank"]


def test_a_throttle_is_retried_by_the_sdk(llm_backend: LLMBackend, co: cohere.ClientV2) -> None:
    llm_backend.add_fault("rate_limit", times=1, retry_after=0.05)
    assert co.rerank(model="rerank-v3.5", query=QUERY, documents=DOCS).results
    assert [record.status for record in llm_backend.requests] == [429, 200]
    llm_backend.add_fault("rate_limit", times=3)
    with pytest.raises(cohere.errors.TooManyRequestsError):
        co.rerank(model="rerank-v3.5", query=QUERY, documents=DOCS, request_options={"max_retries": 0})


@pytest.mark.parametrize("kind", sorted(GENERATION_FAULT_KINDS))
def test_every_fault_kind_keeps_the_server_serving(llm_backend: LLMBackend, kind: str) -> None:
    params: dict[str, Any] = {"stall": {"seconds": 0.05}, "http_error": {"status": 418}}.get(kind, {})
    llm_backend.add_fault(kind, times=3, **params)
    rerank = {"model": "m", "query": QUERY, "documents": DOCS}
    for path, body, shape in (("/v2/rerank", rerank, "message"), ("/v1/rerank", rerank, "error"),
                              ("/score", {"model": "m", "text_1": QUERY, "text_2": DOCS}, "error")):
        try:
            response = httpx.post(llm_backend.url_for(path), json=body, timeout=5)
            if response.status_code >= 400:
                assert shape in response.json()
        except httpx.HTTPError:
            assert kind in ("drop", "drop_before_headers", "close_session", "bad_encoding")  # bad_encoding: a lie
    healthy = httpx.post(llm_backend.url_for("/v2/rerank"), json={"model": "m", "query": QUERY, "documents": DOCS})
    assert healthy.status_code == 200
    llm_backend.check()


BAD: list[tuple[str, Any, str]] = [
    ("/v2/rerank", {"model": "m", "documents": DOCS}, "query"),
    ("/v2/rerank", {"model": "m", "query": QUERY}, "documents"),
    ("/v2/rerank", {"model": "m", "query": QUERY, "documents": [{"text": "objects are Jina's"}]}, "documents[0]"),
    ("/v2/rerank", {"model": "m", "query": QUERY, "documents": DOCS, "top_n": 0}, "top_n"),
    ("/v2/rerank", {"query": QUERY, "documents": DOCS}, "model"),
    ("/v2/rerank", {"model": "m", "query": QUERY, "documents": DOCS, "rank_fields": ["x"]}, "rank_fields"),
    ("/v1/rerank", {"model": "m", "query": QUERY, "documents": [3]}, "documents[0]"),
    ("/v1/rerank", {"model": "m", "query": QUERY, "documents": DOCS, "return_documents": "yes"}, "return_documents"),
    ("/score", {"model": "m", "text_1": ["a", "b"], "text_2": ["c"]}, "text_2"),
    ("/score", {"model": "m", "text_1": "", "text_2": "c"}, "text_1"),
    ("/score", {"model": "m", "text_1": "a", "text_2": "c", "truncate_prompt_tokens": 5}, "truncate_prompt_tokens"),
]


@pytest.mark.parametrize(("path", "payload", "param"), BAD)
def test_bad_input_names_the_field_and_never_breaks(llm_backend: LLMBackend, path: str, payload: Any,
                                                    param: str) -> None:
    response = httpx.post(llm_backend.url_for(path), json=payload)
    assert response.status_code == 400, response.text
    assert llm_backend.requests[-1].error is not None and llm_backend.requests[-1].error["param"] == param
    assert httpx.post(llm_backend.url_for("/v2/rerank"),
                      json={"model": "m", "query": QUERY, "documents": DOCS}).status_code == 200
