"""Anthropic's server tools through the official SDK: the call, its result and the answer in one reply."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import httpx
import pytest

from pytest_llmsim import LLMBackend

MODEL = "claude-sonnet-5-5"
SEARCH: Any = [{"type": "web_search_20250305", "name": "web_search", "max_uses": 3}]
ASK: Any = [{"role": "user", "content": "What is the weather in Paris today?"}]


@pytest.fixture
def claude(llm_backend: LLMBackend) -> Any:
    llm_backend.configure(answer_length=20)
    client = anthropic.Anthropic(base_url=llm_backend.root_url, api_key="test", max_retries=0)
    yield client
    client.close()


def test_a_web_search_is_shown_with_its_results_then_the_answer(llm_backend: LLMBackend, claude: Any) -> None:
    message = claude.messages.create(model=MODEL, max_tokens=400, tools=SEARCH, messages=ASK)
    use, result, answer = message.content
    assert use.type == "server_tool_use" and use.name == "web_search" and use.id.startswith("srvtoolu_")
    assert use.input == {"query": "What is the weather in Paris today?"}  # the user's words, as a model searches
    assert result.type == "web_search_tool_result" and result.tool_use_id == use.id
    assert 3 <= len(result.content) <= 5
    assert all(hit.type == "web_search_result" and hit.url.startswith("https://") and hit.encrypted_content
               for hit in result.content)
    assert answer.type == "text" and answer.text
    assert message.stop_reason == "end_turn"
    assert message.usage.server_tool_use.web_search_requests == 1
    assert message.usage.server_tool_use.web_fetch_requests == 0
    record = llm_backend.requests[-1]
    query_tokens = record.completion_tokens - 20  # the call's input is written, counted and timed too
    assert query_tokens > 5 and message.usage.output_tokens == record.completion_tokens
    again = claude.messages.create(model=MODEL, max_tokens=400, tools=SEARCH, messages=ASK)
    assert [hit.url for hit in again.content[1].content] == [hit.url for hit in result.content]  # deterministic


def test_allowed_and_blocked_domains_shape_the_results(claude: Any) -> None:
    allowed = [{**SEARCH[0], "allowed_domains": ["docs.python.org", "peps.python.org"]}]
    message = claude.messages.create(model=MODEL, max_tokens=400, tools=allowed, messages=ASK)
    assert {hit.url.split("/")[2] for hit in message.content[1].content} <= {"docs.python.org", "peps.python.org"}
    blocked = [{**SEARCH[0], "blocked_domains": ["en.wikipedia.org"]}]
    message = claude.messages.create(model=MODEL, max_tokens=400, tools=blocked, messages=ASK)
    assert all("wikipedia" not in hit.url for hit in message.content[1].content)


def test_the_stream_reads_as_the_sdk_expects(llm_backend: LLMBackend, claude: Any) -> None:
    with claude.messages.stream(model=MODEL, max_tokens=400, tools=SEARCH, messages=ASK) as stream:
        final = stream.get_final_message()
    assert [block.type for block in final.content] == ["server_tool_use", "web_search_tool_result", "text"]
    assert final.content[0].input["query"].startswith("What is")
    assert final.usage.server_tool_use.web_search_requests == 1 and final.stop_reason == "end_turn"
    body = {"model": MODEL, "max_tokens": 400, "tools": SEARCH, "messages": ASK, "stream": True}
    events = []
    with httpx.stream("POST", llm_backend.root_url + "/v1/messages", json=body) as answer:
        for line in answer.iter_lines():
            if line.startswith("data: "):
                events.append(json.loads(line[6:]))
    opened = [(e["index"], e["content_block"]["type"]) for e in events if e["type"] == "content_block_start"]
    assert opened == [(0, "server_tool_use"), (1, "web_search_tool_result"), (2, "text")]
    stops = [e["index"] for e in events if e["type"] == "content_block_stop"]
    assert stops == [0, 1, 2]
    deltas = {e["delta"]["type"] for e in events if e["type"] == "content_block_delta" and e["index"] == 0}
    assert deltas == {"input_json_delta"}


def test_web_fetch_reads_the_url_the_user_gave(claude: Any) -> None:
    fetch = [{"type": "web_fetch_20250910", "name": "web_fetch", "max_uses": 2, "max_content_tokens": 50,
              "citations": {"enabled": True}}]
    ask = [{"role": "user", "content": "Summarize https://example.org/posts/42 for me."}]
    message = claude.messages.create(model=MODEL, max_tokens=400, tools=fetch, messages=ask)
    use, result, answer = message.content
    assert use.name == "web_fetch" and use.input == {"url": "https://example.org/posts/42"}
    fetched = result.content
    assert result.type == "web_fetch_tool_result" and fetched.type == "web_fetch_result"
    assert fetched.url == "https://example.org/posts/42" and fetched.content.citations.enabled
    assert 0 < len(fetched.content.source.data.split()) <= 50  # max_content_tokens caps the page
    assert message.usage.server_tool_use.web_fetch_requests == 1 and answer.type == "text"


@pytest.mark.parametrize(("version", "call", "result"), [
    ("code_execution_20250522", "code_execution", "code_execution_tool_result"),
    ("code_execution_20250825", "bash_code_execution", "bash_code_execution_tool_result"),
])
def test_code_execution_runs_in_the_reply(claude: Any, version: str, call: str, result: str) -> None:
    tools = [{"type": version, "name": "code_execution"}]
    message = claude.messages.create(model=MODEL, max_tokens=400, tools=tools,
                                     messages=[{"role": "user", "content": "Add up 0 to 9."}])
    use, ran, _ = message.content
    assert use.name == call and ran.type == result
    assert ran.content.return_code == 0 and ran.content.stdout and ran.content.stderr == ""


def test_tool_choice_and_the_call_rate_decide_as_for_client_tools(llm_backend: LLMBackend, claude: Any) -> None:
    weather = {"name": "get_weather", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}},
                                                      "required": ["city"]}}
    forced = claude.messages.create(model=MODEL, max_tokens=400, tools=[weather, *SEARCH], messages=ASK,
                                    tool_choice={"type": "tool", "name": "web_search"})
    assert forced.content[0].type == "server_tool_use"
    none = claude.messages.create(model=MODEL, max_tokens=400, tools=SEARCH, messages=ASK, tool_choice={"type": "none"})
    assert [block.type for block in none.content] == ["text"] and none.usage.server_tool_use is None
    llm_backend.configure(tool_call_rate=0.0)
    plain = claude.messages.create(model=MODEL, max_tokens=400, tools=SEARCH, messages=ASK)
    assert [block.type for block in plain.content] == ["text"]


def test_a_reply_sent_back_is_accepted_and_counted(llm_backend: LLMBackend, claude: Any) -> None:
    first = claude.messages.create(model=MODEL, max_tokens=400, tools=SEARCH, messages=ASK)
    history = [*ASK, {"role": "assistant", "content": [block.model_dump(exclude_none=True) for block in first.content]},
               {"role": "user", "content": "Thanks. And tomorrow?"}]
    follow_up = claude.messages.create(model=MODEL, max_tokens=400, tools=SEARCH, messages=history)
    assert follow_up.content[-1].type == "text"
    plain = [*ASK, {"role": "assistant", "content": "ok"}, {"role": "user", "content": "Thanks."}]
    short = claude.messages.count_tokens(model=MODEL, tools=SEARCH, messages=plain)
    assert follow_up.usage.input_tokens > short.input_tokens + 50  # the results count as prompt


def test_max_tokens_can_cut_the_call(claude: Any) -> None:
    message = claude.messages.create(model=MODEL, max_tokens=3, tools=SEARCH, messages=ASK)
    assert [block.type for block in message.content] == ["server_tool_use"]  # no input written whole: no result
    assert message.stop_reason == "max_tokens" and message.usage.output_tokens == 3


@pytest.mark.parametrize(("tool", "param", "words"), [
    ({"type": "web_search_20250305", "name": "search"}, "tools.0.name", "must be named 'web_search'"),
    ({"type": "web_search_20250305", "name": "web_search", "max_uses": 0}, "tools.0.max_uses", "positive"),
    ({"type": "web_fetch_20250910", "name": "web_fetch", "allowed_domains": ["a.com"], "blocked_domains": ["b.com"]},
     "tools.0.allowed_domains", "cannot both be set"),
    ({"type": "web_search_20250305", "name": "web_search", "allowed_domains": "a.com"}, "tools.0.allowed_domains",
     "list of domain names"),
])
def test_bad_server_tool_settings_are_400s_naming_the_field(llm_backend: LLMBackend, tool: Any, param: str,
                                                            words: str) -> None:
    body = {"model": MODEL, "max_tokens": 50, "tools": [tool], "messages": ASK}
    answer = httpx.post(llm_backend.root_url + "/v1/messages", json=body)
    assert answer.status_code == 400 and answer.json()["type"] == "error"
    assert words in answer.json()["error"]["message"] and param in answer.json()["error"]["message"]
    assert llm_backend.requests[-1].error is not None


SDK_TOOL_TYPES = {"web_search": ("WebSearchTool20250305Param", "WebSearchTool20260209Param"),
                  "web_fetch": ("WebFetchTool20250910Param", "WebFetchTool20260209Param"),
                  "code_execution": ("CodeExecutionTool20250522Param", "CodeExecutionTool20250825Param",
                                     "CodeExecutionTool20260120Param")}


def test_every_field_of_the_sdks_server_tool_types_is_decided() -> None:
    """A new SDK field fails here until someone decides: honoured, no effect (documented) or refused."""
    from pytest_llmsim.api.anthropic_server_tools import SERVER_TOOL_FIELDS

    for name, type_names in SDK_TOOL_TYPES.items():
        for type_name in type_names:
            fields = set(getattr(anthropic.types, type_name).__annotations__)
            assert fields <= SERVER_TOOL_FIELDS[name].known, (type_name, fields - SERVER_TOOL_FIELDS[name].known)


@pytest.mark.parametrize(("extra", "param", "words"), [
    ({"defer_loading": True}, "tools.0.defer_loading", "tool search) is not simulated"),
    ({"allowed_callers": ["code_execution_20250825"]}, "tools.0.allowed_callers", "without 'direct'"),
    ({"colour": "blue"}, "tools.0.colour", "Extra inputs are not permitted"),
])
def test_server_tool_fields_not_acted_on_are_refused(llm_backend: LLMBackend, extra: Any, param: str,
                                                     words: str) -> None:
    body = {"model": MODEL, "max_tokens": 50, "tools": [{**SEARCH[0], **extra}], "messages": ASK}
    answer = httpx.post(llm_backend.root_url + "/v1/messages", json=body)
    assert answer.status_code == 400 and answer.json()["type"] == "error"
    assert param in answer.json()["error"]["message"] and words in answer.json()["error"]["message"]
    fetch = {"type": "web_fetch_20250910", "name": "web_fetch", "url_sources": {"type": "only", "urls": ["x"]}}
    refused = httpx.post(llm_backend.root_url + "/v1/messages", json={**body, "tools": [fetch]})
    assert refused.status_code == 400 and "tools.0.url_sources" in refused.json()["error"]["message"]


def test_fields_with_no_effect_are_accepted(claude: Any) -> None:
    tools = [{**SEARCH[0], "cache_control": {"type": "ephemeral"}, "strict": True, "defer_loading": False,
              "allowed_callers": ["direct"], "user_location": {"type": "approximate", "city": "Oslo"}}]
    assert claude.messages.create(model=MODEL, max_tokens=400, tools=tools, messages=ASK).content[0].type == \
        "server_tool_use"
    fetch = [{"type": "web_fetch_20250910", "name": "web_fetch", "url_sources": None}]
    assert claude.messages.create(model=MODEL, max_tokens=400, tools=fetch, messages=ASK).stop_reason == "end_turn"
