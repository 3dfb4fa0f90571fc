"""Every answer names its request with the API's own id header (``x-request-id``, ``request-id``), kept in
the request log, as the SDKs read it (``_request_id``, an error's ``request_id``)."""

from __future__ import annotations

import re

import anthropic
import httpx
import openai
import pytest

from pytest_llmsim import LLMBackend

ASK = [{"role": "user", "content": "hi"}]


def test_openai_answers_carry_x_request_id(llm_backend: LLMBackend) -> None:
    client = openai.OpenAI(base_url=llm_backend.base_url, api_key="sk-test", max_retries=0)
    answer = client.chat.completions.create(model="m", messages=ASK, max_tokens=3)  # type: ignore[arg-type]
    assert re.fullmatch(r"req_[0-9a-f]{32}", answer._request_id or "")
    assert llm_backend.requests[-1].request_id == answer._request_id
    with client.chat.completions.create(model="m", messages=ASK, max_tokens=3, stream=True) as stream:  # type: ignore[arg-type]
        list(stream)
        assert stream.response.headers["x-request-id"] == llm_backend.requests[-1].request_id
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model="m", messages=ASK, max_tokens=-1)  # type: ignore[arg-type]
    assert refused.value.request_id == llm_backend.requests[-1].request_id is not None
    ids = {record.request_id for record in llm_backend.requests}
    assert len(ids) == 3  # one per request
    assert httpx.get(llm_backend.url_for("/v1/models")).headers["x-request-id"].startswith("req_")
    client.close()


def test_anthropic_answers_carry_request_id(llm_backend: LLMBackend) -> None:
    client = anthropic.Anthropic(base_url=llm_backend.root_url, api_key="test", max_retries=0)
    message = client.messages.create(model="claude-sim", max_tokens=3, messages=ASK)  # type: ignore[arg-type]
    assert re.fullmatch(r"req_011C[0-9A-Za-z]{20}", message._request_id or "")
    assert llm_backend.requests[-1].request_id == message._request_id
    with pytest.raises(anthropic.BadRequestError) as refused:
        client.messages.create(model="claude-sim", max_tokens=-1, messages=ASK)  # type: ignore[arg-type]
    body = refused.value.body
    assert isinstance(body, dict)
    assert refused.value.request_id == body["request_id"] == llm_backend.requests[-1].request_id
    count = client.messages.with_raw_response.count_tokens(model="claude-sim", messages=ASK)  # type: ignore[arg-type]
    assert count.headers["request-id"].startswith("req_011C")
    client.close()


def test_azure_answers_carry_both_of_its_ids(llm_backend: LLMBackend) -> None:
    client = openai.AzureOpenAI(azure_endpoint=llm_backend.root_url, api_key="test", api_version="2024-10-21")
    raw = client.chat.completions.with_raw_response.create(model="gpt-4o", messages=ASK, max_tokens=2)  # type: ignore[arg-type]
    assert raw.headers["x-request-id"] and raw.headers["apim-request-id"]
    assert llm_backend.requests[-1].request_id == raw.headers["x-request-id"]
    client.close()
