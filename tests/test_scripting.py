"""Scripted replies (text, JSON, tool calls, errors) and rules, in every API and every way to set them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest

from pytest_llmsim import ErrorReply, LLMBackend, RemoteBackend, Rule, ToolCall, load_conversation

ASK: list[Any] = [{"role": "user", "content": "What is the weather in Paris?"}]


def oai(backend: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=backend.base_url, api_key="sk-test", max_retries=0)


def claude(backend: LLMBackend) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=backend.root_url, api_key="sk-ant-test", max_retries=0)


def test_reply_with_every_kind_in_order(llm_backend: LLMBackend) -> None:
    llm_backend.reply_with("plain text", {"answer": 42}, ToolCall("get_weather", {"city": "Paris"}),
                           [ToolCall("a"), ToolCall("b", '{"broken": ')], ErrorReply(503, "try later"))
    client = oai(llm_backend)
    first = client.chat.completions.create(model="m", messages=ASK)
    assert first.choices[0].message.content == "plain text"
    second = client.chat.completions.create(model="m", messages=ASK)
    assert json.loads(second.choices[0].message.content or "") == {"answer": 42}
    third = client.chat.completions.create(model="m", messages=ASK)
    (call,) = third.choices[0].message.tool_calls or []
    assert (call.function.name, json.loads(call.function.arguments)) == ("get_weather", {"city": "Paris"})
    assert third.choices[0].finish_reason == "tool_calls"
    fourth = client.chat.completions.create(model="m", messages=ASK)
    assert [(c.function.name, c.function.arguments) for c in fourth.choices[0].message.tool_calls or []] == [
        ("a", "{}"), ("b", '{"broken": ')]  # a string is sent as given, broken JSON included
    with pytest.raises(openai.InternalServerError) as caught:
        client.chat.completions.create(model="m", messages=ASK)
    assert caught.value.status_code == 503 and "try later" in str(caught.value)
    # the queue is empty: back to filler
    assert client.chat.completions.create(model="m", messages=ASK, max_tokens=3).usage.completion_tokens == 3  # type: ignore[union-attr]
    assert [r.status for r in llm_backend.requests] == [200, 200, 200, 200, 503, 200]


def test_scripted_tool_call_in_responses_and_messages(llm_backend: LLMBackend) -> None:
    llm_backend.reply_with(ToolCall("lookup", {"q": "x"}), ToolCall("lookup", {"q": "y"}), ErrorReply(429, "slow"))
    response = oai(llm_backend).responses.create(model="m", input="hi")
    assert response.output[0].type == "function_call" and response.output[0].arguments == '{"q":"x"}'
    message = claude(llm_backend).messages.create(model="c", max_tokens=50, messages=ASK)
    assert message.content[0].type == "tool_use" and message.content[0].input == {"q": "y"}
    with pytest.raises(anthropic.RateLimitError):
        claude(llm_backend).messages.create(model="c", max_tokens=50, messages=ASK)


def test_rules_first_match_wins_times_and_log(llm_backend: LLMBackend) -> None:
    weather = llm_backend.on(prompt=r"weather").reply(ToolCall("get_weather", {"city": "Paris"}), times=2)
    llm_backend.on(prompt=r"weather|time", api="chat").reply("It is noon.")
    llm_backend.on(model="strict-model").reply("from the model rule")
    llm_backend.reply_with("queued")
    client = oai(llm_backend)

    def say(text: str, model: str = "m") -> str:
        message = client.chat.completions.create(model=model, messages=[{"role": "user", "content": text}]).choices[
            0].message
        return message.tool_calls[0].function.name if message.tool_calls else message.content or ""

    assert [say("weather?"), say("weather?"), say("weather?"), say("time?")] == [
        "get_weather", "get_weather", "It is noon.", "It is noon."]
    assert say("hello", model="strict-model") == "from the model rule"
    assert say("hello") == "queued"
    assert weather.hits == 2 and weather.exhausted
    assert [r.rule for r in llm_backend.requests] == [weather.name, weather.name, "rule-2", "rule-2", "rule-3", None]
    # a rule for another API does not match chat
    llm_backend.on(prompt="only-completions", api="completions").reply("completed")
    assert say("only-completions") != "completed"
    assert oai(llm_backend).completions.create(model="m", prompt="only-completions").choices[0].text == "completed"


def test_rule_matching_a_tool(llm_backend: LLMBackend) -> None:
    llm_backend.on(tool="search").reply(ToolCall("search", {"query": "llmsim"}))
    tools: list[Any] = [{"type": "function", "function": {"name": "search"}}]
    with_tool = oai(llm_backend).chat.completions.create(model="m", messages=ASK, tools=tools)
    assert (with_tool.choices[0].message.tool_calls or [])[0].function.arguments == '{"query":"llmsim"}'
    without = oai(llm_backend).chat.completions.create(model="m", messages=ASK)
    assert without.choices[0].message.tool_calls is None


@pytest.mark.llm_reply("first", "second")
@pytest.mark.llm_reply(ToolCall("f", {"x": 1}), prompt="call f")
def test_reply_marker(llm_backend: LLMBackend) -> None:
    client = oai(llm_backend)
    calls = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "call f now"}])
    assert (calls.choices[0].message.tool_calls or [])[0].function.name == "f"
    texts = [client.chat.completions.create(model="m", messages=ASK).choices[0].message.content for _ in range(2)]
    assert texts == ["first", "second"]


def test_reply_marker_is_checked(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        import pytest

        @pytest.mark.llm_reply("x", colour="red")
        def test_it(llm_backend):
            pass
    """)
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.stdout.fnmatch_lines(["*llm_reply takes replies as positional arguments*"])


def test_bad_replies_are_refused_early(llm_backend: LLMBackend) -> None:
    with pytest.raises(TypeError, match="a reply is"):
        llm_backend.reply_with(42)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="HTTP error status"):
        ErrorReply(200, "fine")
    with pytest.raises(TypeError, match="times"):
        llm_backend.on(prompt="x").reply("y", times=0)


def test_replay_a_recorded_conversation(llm_backend: LLMBackend, tmp_path: Path) -> None:
    log = tmp_path / "conversation.jsonl"
    log.write_text("\n".join(json.dumps(line) for line in [
        {"messages": [{"role": "user", "content": "Hi"}], "reply": "Hello! How can I help?"},
        {"request": {"messages": [{"role": "user", "content": "Weather?"}]},
         "reply": {"role": "assistant", "content": None, "tool_calls": [
             {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}]}},
    ]) + "\n")
    for rule in load_conversation(log):
        llm_backend.add_rule(rule)
    client = oai(llm_backend)
    hello = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "Hi"}])
    assert hello.choices[0].message.content == "Hello! How can I help?"
    weather = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "Weather?"}])
    assert (weather.choices[0].message.tool_calls or [])[0].function.name == "get_weather"
    other = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "Hi there"}])
    assert other.choices[0].message.content != "Hello! How can I help?"  # exact match only
    assert llm_backend.requests[0].rule == "conversation.jsonl:1"


def test_rules_over_the_control_api(llm_backend: LLMBackend) -> None:
    remote = RemoteBackend(llm_backend.root_url)
    rule = remote.on(prompt="weather").reply(ToolCall("get_weather", {"city": "Oslo"}), times=1)
    remote.reply_with({"ok": True}, ErrorReply(400, "scripted bad request", code="nope"))
    client = oai(llm_backend)
    first = client.chat.completions.create(model="m", messages=ASK)
    assert (first.choices[0].message.tool_calls or [])[0].function.arguments == '{"city":"Oslo"}'
    assert json.loads(client.chat.completions.create(model="m", messages=ASK).choices[0].message.content or "") == {
        "ok": True}
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model="m", messages=ASK)
    assert caught.value.code == "nope"
    (stored,) = remote.rules
    assert (stored.name, stored.hits) == (rule.name, 1)
    bad = httpx.post(llm_backend.root_url + "/llmsim/v1/rules", json={"prompt": "x"})
    assert bad.status_code == 400 and "needs a reply" in bad.text


def test_serve_loads_rules_from_config_and_replay(tmp_path: Path) -> None:
    config = tmp_path / "llmsim.toml"
    config.write_text('speed = "inf"\n\n[[rules]]\nprompt = "weather"\n'
                      'tool_call = { name = "get_weather", arguments = { city = "Paris" } }\n\n'
                      '[[rules]]\napi = "messages"\ntext = "Bonjour"\n')
    replay = tmp_path / "log.jsonl"
    replay.write_text(json.dumps({"messages": [{"role": "user", "content": "ping"}], "reply": "pong"}) + "\n")
    process = subprocess.Popen([sys.executable, "-m", "pytest_llmsim.cli", "serve", "--port", "0", "--config",
                                str(config), "--replay", str(replay)], stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        url = line.split(" at ")[1].split(" ")[0]
        client = openai.OpenAI(base_url=url, api_key="x", max_retries=0)
        answer = client.chat.completions.create(model="m", messages=ASK)
        assert (answer.choices[0].message.tool_calls or [])[0].function.arguments == '{"city":"Paris"}'
        assert client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "ping"}]).choices[0].message.content == "pong"
        message = anthropic.Anthropic(base_url=url.removesuffix("/v1"), api_key="x").messages.create(
            model="c", max_tokens=5, messages=[{"role": "user", "content": "hi"}])
        assert message.content[0].type == "text" and message.content[0].text == "Bonjour"
        client.close()
    finally:
        process.terminate()
        process.wait(10)
        if process.stdout is not None:
            process.stdout.close()


def test_bad_rules_in_config_are_named(tmp_path: Path) -> None:
    config = tmp_path / "bad.toml"
    config.write_text('[[rules]]\nprompt = "x"\ncolour = "red"\ntext = "y"\n')
    result = subprocess.run([sys.executable, "-m", "pytest_llmsim.cli", "serve", "--config", str(config)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "rules #1: unknown rule key(s) colour" in result.stderr


def test_rule_json_round_trip() -> None:
    rule = Rule((ToolCall("f", {"a": [1, 2]}), "text", {"k": "v"}, ErrorReply(500, "boom")), prompt="p",
                times=3, name="r")
    again = Rule.from_json(json.loads(json.dumps(rule.to_json())))
    assert (again.replies, again.prompt, again.times, again.name) == (rule.replies, "p", 3, "r")


def test_scripted_error_keeps_serving(llm_backend: LLMBackend) -> None:
    llm_backend.reply_with(ErrorReply(500, "kaboom"))
    response = httpx.post(llm_backend.url_for("/v1/chat/completions"), json={"model": "m", "messages": ASK})
    assert response.status_code == 500 and response.json()["error"]["message"] == "kaboom"
    assert response.json()["error"]["type"] == "server_error"
    assert httpx.post(llm_backend.url_for("/v1/chat/completions"), json={"model": "m", "messages": ASK}).is_success
