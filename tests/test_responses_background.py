"""The Responses API's background mode, input_tokens and input_items, through the openai SDK as its own
examples use them (poll until done, stream and resume after an event, cancel)."""

from __future__ import annotations

import time
from typing import Any

import httpx
import openai
import pytest

from pytest_llmsim import LLMBackend


@pytest.fixture
def client(llm_backend: LLMBackend) -> Any:
    made = openai.OpenAI(base_url=llm_backend.base_url, api_key="sk-test", max_retries=0)
    yield made
    made.close()


def test_a_background_response_is_polled_until_it_completes(llm_backend: LLMBackend, client: Any) -> None:
    # 40 tokens of 10 s at speed 10: 40 s of wall time at most, however loaded the machine; once it has been
    # seen in progress, speed=inf ends it at once (a 0.4 s window failed at load 13 on 2 cores)
    llm_backend.configure(itl=10.0, speed=10.0)
    queued = client.responses.create(model="gpt-4o", input="hi", background=True, max_output_tokens=40)
    assert queued.status == "queued" and queued.background is True and queued.output == []
    seen = {queued.status}
    response = queued
    deadline = time.monotonic() + 60
    while response.status in ("queued", "in_progress") and time.monotonic() < deadline:
        time.sleep(0.005)
        response = client.responses.retrieve(queued.id)
        seen.add(response.status)
        if response.status == "in_progress":
            llm_backend.configure(speed=float("inf"))
    assert response.status == "incomplete" and response.usage.output_tokens == 40  # cut by its own limit
    assert "in_progress" in seen
    (record,) = [r for r in llm_backend.requests if r.api == "openai.responses"]
    assert record.status == 200 and record.completion_tokens == 40


def test_a_background_stream_resumes_after_an_event(llm_backend: LLMBackend, client: Any) -> None:
    llm_backend.configure(itl=0.005, speed=10.0)
    stream = client.responses.create(model="gpt-4o", input="hi", background=True, stream=True,
                                     max_output_tokens=30)
    first = []
    for event in stream:
        first.append(event)
        if len(first) == 6:
            break
    stream.close()  # the client leaves; the response goes on
    response_id = first[0].response.id
    cursor = first[-1].sequence_number
    rest = list(client.responses.retrieve(response_id, stream=True, starting_after=cursor))
    assert rest[0].sequence_number == cursor + 1
    assert rest[-1].type == "response.incomplete"
    text = "".join(e.delta for e in first + rest if e.type == "response.output_text.delta")
    assert text == client.responses.retrieve(response_id).output_text  # nothing lost, nothing twice
    again = list(client.responses.retrieve(response_id, stream=True, starting_after=cursor))
    assert [e.sequence_number for e in again] == [e.sequence_number for e in rest]  # replayable


def test_a_background_response_can_be_cancelled(llm_backend: LLMBackend, client: Any) -> None:
    llm_backend.configure(itl=0.05, speed=1.0)  # 200 tokens: 10 s, unless cancelled
    queued = client.responses.create(model="gpt-4o", input="hi", background=True, max_output_tokens=200)
    time.sleep(0.05)
    cancelled = client.responses.cancel(queued.id)
    assert cancelled.status == "cancelled"
    assert client.responses.retrieve(queued.id).status == "cancelled"
    assert llm_backend.wait_idle(timeout=5)
    record = llm_backend.requests[-1]
    assert record.completion_tokens < 200
    done = client.responses.create(model="gpt-4o", input="hi", max_output_tokens=5)
    with pytest.raises(openai.BadRequestError):
        client.responses.cancel(done.id)  # only background responses can be cancelled
    with pytest.raises(openai.NotFoundError):
        client.responses.cancel("resp_unknown")


def test_background_needs_the_store(llm_backend: LLMBackend, client: Any) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(model="gpt-4o", input="hi", background=True, store=False)
    assert refused.value.param == "background"
    plain = client.responses.create(model="gpt-4o", input="hi", max_output_tokens=5)
    answer = httpx.get(llm_backend.url_for(f"/v1/responses/{plain.id}"), params={"stream": "true"})
    assert answer.status_code == 400  # only background responses stream again


def test_input_tokens_counts_what_a_request_would_be_charged(llm_backend: LLMBackend, client: Any) -> None:
    counted = client.responses.input_tokens.count(model="gpt-4o", input="Tell me a story.", instructions="Be brief.")
    answer = client.responses.create(model="gpt-4o", input="Tell me a story.", instructions="Be brief.",
                                     max_output_tokens=5)
    assert counted.input_tokens == answer.usage.input_tokens > 0
    chained = client.responses.input_tokens.count(model="gpt-4o", input="And then?", previous_response_id=answer.id)
    assert chained.input_tokens > counted.input_tokens  # the stored conversation counts
    assert llm_backend.requests[-1].api == "openai.responses.input_tokens"


def test_input_items_list_a_stored_responses_input(llm_backend: LLMBackend, client: Any) -> None:
    answer = client.responses.create(model="gpt-4o", max_output_tokens=5, input=[
        {"role": "user", "content": "first"}, {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "second"}])
    items = client.responses.input_items.list(answer.id)
    assert [item.content[0].text for item in items.data] == ["second", "ok", "first"]  # newest first
    oldest = client.responses.input_items.list(answer.id, order="asc", limit=1)
    assert [item.content[0].text for item in oldest.data] == ["first"] and oldest.has_more
    with pytest.raises(openai.NotFoundError):
        client.responses.input_items.list("resp_unknown")
