"""Rules that match on the conversation's turn, the latest tool result, the previous assistant message or a
header (as fakellm's do), driven by the OpenAI SDK; the same over the control API and in a config file's form."""

from __future__ import annotations

import openai
import pytest

from pytest_llmsim import LLMBackend, RemoteBackend, Rule


def ask(client: openai.OpenAI, messages: list[dict[str, object]], **extra: object) -> str:
    answer = client.chat.completions.create(model="m", messages=messages, max_tokens=20, **extra)  # type: ignore
    return answer.choices[0].message.content or ""


def test_turn_tool_result_previous_and_header(llm_backend: LLMBackend) -> None:
    llm_backend.on(turn=1).reply("first turn")
    llm_backend.on(tool_result=r'"temp": *-\d').reply("it is freezing")
    llm_backend.on(previous=r"^first turn$", turn=2).reply("second, after the first")
    llm_backend.on(header="x-tenant: ^acme$").reply("hello acme")
    client = openai.OpenAI(base_url=llm_backend.base_url, api_key="k")
    user = {"role": "user", "content": "hi"}
    assert ask(client, [user]) == "first turn"
    assert ask(client, [user, {"role": "assistant", "content": "first turn"}, user]) == "second, after the first"
    call = {"id": "c1", "type": "function", "function": {"name": "weather", "arguments": "{}"}}
    assert ask(client, [user, {"role": "assistant", "content": None, "tool_calls": [call]},
                        {"role": "tool", "tool_call_id": "c1", "content": '{"temp": -4}'}, user]) == "it is freezing"
    two_turns = [user, {"role": "assistant", "content": "other"}, user]
    assert ask(client, two_turns, extra_headers={"X-Tenant": "acme"}) == "hello acme"
    assert ask(client, two_turns, extra_headers={"X-Tenant": "acme-2"}) != "hello acme"
    assert [rule.hits for rule in llm_backend.rules] == [1, 1, 1, 1]


def test_the_new_matchers_cross_the_control_api(llm_backend: LLMBackend) -> None:
    remote = RemoteBackend(llm_backend.root_url)
    remote.on(turn=2, header="x-tenant: acme", previous="x", tool_result="y").reply("ok")
    (rule,) = llm_backend.rules
    assert (rule.turn, rule.header, rule.previous, rule.tool_result) == (2, "x-tenant: acme", "x", "y")
    assert Rule.from_json(rule.to_json()).to_json() == rule.to_json()


@pytest.mark.parametrize(("given", "message"), [
    ({"turn": 0}, "'turn' must be a positive integer"),
    ({"header": "no colon"}, "header is 'Name: regex'"),
    ({"previous": "("}, "previous"),
])
def test_a_bad_matcher_is_named(given: dict[str, object], message: str) -> None:
    with pytest.raises((TypeError, ValueError), match=message):
        Rule(("x",), **given)  # type: ignore[arg-type]
