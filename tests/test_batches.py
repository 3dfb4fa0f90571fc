"""Batch work through the official SDKs: OpenAI's Files and Batch APIs, Anthropic's Message Batches; run by
the same engine behind interactive traffic, finishing in simulated time."""

from __future__ import annotations

import io
import json
from typing import Any

import anthropic
import httpx
import openai
import pytest
from polling import wait_for

from pytest_llmsim import LLMBackend

ASK = [{"role": "user", "content": "hi"}]


def _line(number: int, url: str = "/v1/chat/completions", **body: Any) -> str:
    return json.dumps({"custom_id": f"request-{number}", "method": "POST", "url": url,
                       "body": {"model": "gpt-4o", "messages": ASK, "max_tokens": 5, **body}})


@pytest.fixture
def client(llm_backend: LLMBackend) -> Any:
    made = openai.OpenAI(base_url=llm_backend.base_url, api_key="sk-test", max_retries=0)
    yield made
    made.close()


@pytest.fixture
def claude(llm_backend: LLMBackend) -> Any:
    made = anthropic.Anthropic(base_url=llm_backend.root_url, api_key="test", max_retries=0)
    yield made
    made.close()


def test_an_openai_batch_runs_its_file_and_writes_output_and_error_files(llm_backend: LLMBackend,
                                                                         client: Any) -> None:
    lines = [_line(0), _line(1), _line(2, max_tokens=-1), _line(3)]
    uploaded = client.files.create(file=("requests.jsonl", io.BytesIO("\n".join(lines).encode())), purpose="batch")
    assert uploaded.purpose == "batch" and uploaded.bytes > 0
    batch = client.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions",
                                  completion_window="24h", metadata={"job": "nightly"})
    assert batch.status == "in_progress" and batch.request_counts.total == 4
    batch = wait_for(lambda: client.batches.retrieve(batch.id), lambda b: b.status == "completed")
    assert (batch.request_counts.completed, batch.request_counts.failed) == (3, 1)
    assert batch.metadata == {"job": "nightly"}
    output = [json.loads(line) for line in client.files.content(batch.output_file_id).text.splitlines()]
    assert [line["custom_id"] for line in output] == ["request-0", "request-1", "request-3"]
    assert all(line["response"]["status_code"] == 200 and line["response"]["body"]["usage"]["completion_tokens"] == 5
               for line in output)
    (error,) = [json.loads(line) for line in client.files.content(batch.error_file_id).text.splitlines()]
    assert error["custom_id"] == "request-2" and error["response"]["status_code"] == 400
    assert error["response"]["body"]["error"]["param"] == "max_tokens"
    assert [b.id for b in client.batches.list()] == [batch.id]
    chats = [record for record in llm_backend.requests if record.api == "openai.chat"]
    assert len(chats) == 4  # each line is a request in the log and the metrics


def test_a_batch_runs_behind_interactive_traffic(llm_backend: LLMBackend, client: Any) -> None:
    llm_backend.configure(itl=0.01, speed=4.0, max_batch_size=4)
    lines = [_line(i, max_tokens=40) for i in range(8)]
    uploaded = client.files.create(file=("r.jsonl", io.BytesIO("\n".join(lines).encode())), purpose="batch")
    batch = client.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions",
                                  completion_window="24h")
    interactive = client.chat.completions.create(model="gpt-4o", messages=ASK, max_tokens=5)
    assert interactive.usage.completion_tokens == 5
    assert client.batches.retrieve(batch.id).status == "in_progress"  # the interactive request did not wait
    assert llm_backend.metrics.max_running <= 3  # the batch took at most two slots
    batch = wait_for(lambda: client.batches.retrieve(batch.id), lambda b: b.status == "completed", 30)
    assert batch.request_counts.completed == 8


def test_an_openai_batch_can_be_cancelled(llm_backend: LLMBackend, client: Any) -> None:
    llm_backend.configure(itl=0.05, speed=1.0)
    lines = [_line(i, max_tokens=20) for i in range(6)]
    uploaded = client.files.create(file=("r.jsonl", io.BytesIO("\n".join(lines).encode())), purpose="batch")
    batch = client.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions",
                                  completion_window="24h")
    assert client.batches.cancel(batch.id).status == "cancelling"
    batch = wait_for(lambda: client.batches.retrieve(batch.id), lambda b: b.status == "cancelled")
    assert batch.status == "cancelled" and batch.request_counts.completed < 6


@pytest.mark.parametrize(("lines", "endpoint", "param"), [
    ([_line(0, url="/v1/embeddings")], "/v1/chat/completions", "input_file_id"),
    (["not json"], "/v1/chat/completions", "input_file_id"),
    ([_line(0), _line(0)], "/v1/chat/completions", "input_file_id"),  # a custom_id twice
    ([_line(0)], "/v1/images/generations", "endpoint"),
])
def test_a_bad_batch_is_a_400_naming_the_field(llm_backend: LLMBackend, client: Any, lines: list[str],
                                               endpoint: str, param: str) -> None:
    uploaded = client.files.create(file=("r.jsonl", io.BytesIO("\n".join(lines).encode())), purpose="batch")
    with pytest.raises(openai.BadRequestError) as refused:
        client.batches.create(input_file_id=uploaded.id, endpoint=endpoint, completion_window="24h")  # type: ignore[arg-type]
    assert refused.value.param == param
    with pytest.raises(openai.NotFoundError):
        client.batches.retrieve("batch_unknown")
    with pytest.raises(openai.NotFoundError):
        client.files.content("file-unknown")


def test_an_anthropic_message_batch_and_its_results(llm_backend: LLMBackend, claude: Any) -> None:
    requests = [{"custom_id": f"q{i}", "params": {"model": "claude-sonnet-5-5", "max_tokens": 5 if i else -1,
                                                   "messages": ASK}} for i in range(3)]
    batch = claude.messages.batches.create(requests=requests)
    assert batch.processing_status == "in_progress" and batch.results_url is None
    batch = wait_for(lambda: claude.messages.batches.retrieve(batch.id), lambda b: b.processing_status == "ended")
    counts = batch.request_counts
    assert (counts.succeeded, counts.errored, counts.processing) == (2, 1, 0)
    assert batch.results_url == f"{llm_backend.root_url}/v1/messages/batches/{batch.id}/results"
    results = {result.custom_id: result.result for result in claude.messages.batches.results(batch.id)}
    assert results["q1"].type == "succeeded" and results["q1"].message.usage.output_tokens == 5
    assert results["q0"].type == "errored" and results["q0"].error.error.type == "invalid_request_error"
    assert [b.id for b in claude.messages.batches.list()] == [batch.id]
    assert claude.messages.batches.delete(batch.id).type == "message_batch_deleted"
    with pytest.raises(anthropic.NotFoundError):
        claude.messages.batches.retrieve(batch.id)


def test_an_anthropic_batch_is_cancelled_and_not_deleted_while_it_runs(llm_backend: LLMBackend,
                                                                       claude: Any) -> None:
    llm_backend.configure(itl=0.05, speed=1.0)
    requests = [{"custom_id": f"q{i}", "params": {"model": "claude-sonnet-5-5", "max_tokens": 20, "messages": ASK}}
                for i in range(6)]
    batch = claude.messages.batches.create(requests=requests)
    with pytest.raises(anthropic.BadRequestError):
        claude.messages.batches.delete(batch.id)
    early = httpx.get(llm_backend.url_for(f"/v1/messages/batches/{batch.id}/results"))
    assert early.status_code == 400  # no results before it ends (the SDK does not even ask)
    assert claude.messages.batches.cancel(batch.id).processing_status == "canceling"
    batch = wait_for(lambda: claude.messages.batches.retrieve(batch.id), lambda b: b.processing_status == "ended")
    assert batch.request_counts.canceled > 0
    kinds = {result.result.type for result in claude.messages.batches.results(batch.id)}
    assert "canceled" in kinds


@pytest.mark.parametrize(("body", "param"), [
    ({"requests": []}, "requests"),
    ({"requests": [{"custom_id": "bad id!", "params": {}}]}, "requests.0.custom_id"),
    ({"requests": [{"custom_id": "a", "params": {"stream": True}}]}, "requests.0.params.stream"),
    ({"requests": [{"custom_id": "a", "params": {}}], "extra": 1}, "extra"),
])
def test_a_bad_message_batch_is_a_400_naming_the_field(llm_backend: LLMBackend, body: Any, param: str) -> None:
    answer = httpx.post(llm_backend.url_for("/v1/messages/batches"), json=body)
    assert answer.status_code == 400 and answer.json()["type"] == "error"
    assert llm_backend.requests[-1].error is not None and llm_backend.requests[-1].error["param"] == param
