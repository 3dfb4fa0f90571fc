"""Anthropic's newer surfaces through the official SDK: structured output (``output_config.format``, as
``messages.parse()`` and the stream helpers send it), and pydantic-ai's Claude model with its own defaults."""

from __future__ import annotations

from typing import Any

import anthropic
import pytest
from pydantic import BaseModel

from pytest_llmsim import LLMBackend

ASK: Any = [{"role": "user", "content": "Tell me about a city."}]


class City(BaseModel):
    name: str
    population: int


@pytest.fixture
def claude(llm_backend: LLMBackend) -> Any:
    client = anthropic.Anthropic(base_url=llm_backend.root_url, api_key="test", max_retries=0)
    yield client
    client.close()


def test_messages_parse_gets_an_instance_of_its_model(llm_backend: LLMBackend, claude: Any) -> None:
    parsed = claude.messages.parse(model="claude-sonnet-5-5", max_tokens=1024, messages=ASK, output_format=City)
    city = parsed.parsed_output
    assert isinstance(city, City) and city.name
    sent = llm_backend.requests[-1].body
    assert sent["output_config"]["format"]["type"] == "json_schema"  # how the SDK asks
    assert llm_backend.requests[-1].ignored_fields == []


def test_streamed_structured_output_parses(llm_backend: LLMBackend, claude: Any) -> None:
    schema = City.model_json_schema()
    with claude.messages.stream(model="claude-sonnet-5-5", max_tokens=1024, messages=ASK,
                                output_config={"format": {"type": "json_schema", "schema": schema}}) as stream:
        text = "".join(stream.text_stream)
    assert City.model_validate_json(text).population >= 0


@pytest.mark.parametrize(("output_config", "param"), [
    ({"format": {"type": "json_object"}}, "output_config.format"),
    ({"format": {"type": "json_schema", "schema": {"type": "object", "properties": 3}}},
     "output_config.format.schema"),
    ({"formats": {}}, "output_config.formats"),
])
def test_a_bad_output_config_is_a_400_naming_it(llm_backend: LLMBackend, claude: Any, output_config: Any,
                                                param: str) -> None:
    with pytest.raises(anthropic.BadRequestError):
        claude.messages.create(model="claude-sonnet-5-5", max_tokens=64, messages=ASK, output_config=output_config)
    error = llm_backend.requests[-1].error
    assert error is not None and error["param"] == param


@pytest.mark.filterwarnings("ignore::ResourceWarning")  # pydantic-ai's run_sync leaves its own loop's generators
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.usefixtures("collect_garbage")
def test_pydantic_ai_claude_with_its_defaults(llm_backend: LLMBackend) -> None:
    pydantic_ai = pytest.importorskip("pydantic_ai")
    from pydantic_ai.models.anthropic import AnthropicModel
    from pydantic_ai.providers.anthropic import AnthropicProvider

    model = AnthropicModel("claude-sonnet-5-5", provider=AnthropicProvider(api_key="t", base_url=llm_backend.root_url))
    for output_type in (str, City, pydantic_ai.NativeOutput(City)):
        result = pydantic_ai.Agent(model, output_type=output_type).run_sync("Tell me about a city.")
        assert result.output
        if output_type is not str:
            assert isinstance(result.output, City)
    assert all(record.status == 200 for record in llm_backend.requests)


THINK = {"type": "enabled", "budget_tokens": 1024}
WEATHER = [{"name": "get_weather", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}},
                                                   "required": ["city"]}}]


def test_extended_thinking_comes_first_and_counts_as_output(llm_backend: LLMBackend, claude: Any) -> None:
    llm_backend.configure(itl=0.01, speed=float("inf"))
    message = claude.messages.create(model="claude-sonnet-5-5", max_tokens=4096, thinking=THINK, messages=ASK)
    thinking, text = message.content
    assert (thinking.type, text.type, message.stop_reason) == ("thinking", "text", "end_turn")
    assert thinking.thinking and thinking.signature and text.text
    record = llm_backend.requests[-1]
    assert message.usage.output_tokens == record.completion_tokens
    assert record.e2e is not None and record.ttft is not None
    # the thinking takes decode time like the answer: every token after the first is one step
    assert record.e2e - record.ttft == pytest.approx((record.completion_tokens - 1) * 0.01)


def test_streamed_thinking_has_its_deltas_and_signature(llm_backend: LLMBackend, claude: Any) -> None:
    with claude.messages.stream(model="claude-sonnet-5-5", max_tokens=4096, thinking=THINK, messages=ASK) as stream:
        events = [event.type for event in stream]
        final = stream.get_final_message()
    assert {"thinking", "signature", "text"} <= set(events)
    thinking, text = final.content
    assert thinking.type == "thinking" and thinking.signature and text.type == "text"
    unstreamed = claude.messages.create(model="claude-sonnet-5-5", max_tokens=4096, thinking=THINK, messages=ASK)
    assert unstreamed.content[0].thinking == thinking.thinking  # seeded: the same request thinks the same


def test_thinking_is_sent_back_and_checked(llm_backend: LLMBackend, claude: Any) -> None:
    first = claude.messages.create(model="claude-sonnet-5-5", max_tokens=4096, thinking=THINK, tools=WEATHER,
                                   messages=[{"role": "user", "content": "Weather in Paris?"}])
    assert [block.type for block in first.content] == ["thinking", "tool_use"] and first.stop_reason == "tool_use"
    call = first.content[1]
    follow_up = [{"role": "user", "content": "Weather in Paris?"},
                 {"role": "assistant", "content": first.content},
                 {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "sunny"}]}]
    answer = claude.messages.create(model="claude-sonnet-5-5", max_tokens=4096, thinking=THINK, tools=WEATHER,
                                    messages=follow_up)
    assert answer.stop_reason == "end_turn" and answer.content[-1].type == "text"
    tampered = [dict(follow_up[0]), {"role": "assistant", "content": [
        {"type": "thinking", "thinking": first.content[0].thinking + " (edited)",
         "signature": first.content[0].signature}, call.model_dump()]}, follow_up[2]]
    with pytest.raises(anthropic.BadRequestError, match="Invalid `signature` in `thinking` block"):
        claude.messages.create(model="claude-sonnet-5-5", max_tokens=4096, thinking=THINK, tools=WEATHER,
                               messages=tampered)


def test_adaptive_thinking_follows_the_effort(llm_backend: LLMBackend, claude: Any) -> None:
    lengths = {}
    for effort in ("low", "high"):
        message = claude.messages.create(model="claude-opus-5-5", max_tokens=8192, thinking={"type": "adaptive"},
                                         output_config={"effort": effort}, messages=ASK)
        assert message.content[0].type == "thinking"
        lengths[effort] = llm_backend.requests[-1].completion_tokens
    assert lengths["low"] < lengths["high"]


@pytest.mark.parametrize(("thinking", "extra", "param"), [
    ({"type": "enabled", "budget_tokens": 512}, {}, "thinking.budget_tokens"),
    ({"type": "enabled", "budget_tokens": 4096}, {}, "thinking.budget_tokens"),  # not below max_tokens
    ({"type": "enabled"}, {}, "thinking.budget_tokens"),
    ({"type": "on"}, {}, "thinking.type"),
    ({**THINK, "display": "omitted"}, {}, "thinking.display"),  # accepted only as what is done: shown
    (THINK, {"tool_choice": {"type": "any"}, "tools": WEATHER}, "tool_choice"),
])
def test_bad_thinking_is_a_400_naming_the_field(llm_backend: LLMBackend, claude: Any, thinking: Any,
                                                 extra: dict[str, Any], param: str) -> None:
    with pytest.raises(anthropic.BadRequestError):
        claude.messages.create(model="claude-sonnet-5-5", max_tokens=4096, thinking=thinking, messages=ASK, **extra)
    error = llm_backend.requests[-1].error
    assert error is not None and error["param"] == param


@pytest.mark.parametrize("tool", [
    {"type": "memory_20250818", "name": "memory"},
    {"type": "text_editor_20250728", "name": "str_replace_based_edit_tool"},
    {"type": "bash_20250124", "name": "bash"},
    {"type": "computer_20250124", "name": "computer", "display_width_px": 1024, "display_height_px": 768},
])
def test_anthropic_defined_client_tools_are_called_with_documented_inputs(llm_backend: LLMBackend, claude: Any,
                                                                          tool: dict[str, Any]) -> None:
    for turn in range(4):
        message = claude.messages.create(model="claude-sonnet-5-5", max_tokens=1024, tools=[tool],
                                         tool_choice={"type": "any"}, messages=[{"role": "user", "content": f"{turn}"}])
        (call,) = [block for block in message.content if block.type == "tool_use"]
        assert call.name == tool["name"]
        if tool["name"] == "memory":
            assert call.input["command"] in ("view", "create", "str_replace", "insert", "delete", "rename")
            assert all(str(v).startswith("/memories") for k, v in call.input.items() if "path" in k)
        elif tool["name"] == "bash":
            assert set(call.input) in ({"command"}, {"restart"})
        elif tool["name"] == "computer":
            assert call.input["action"] in ("screenshot", "left_click", "mouse_move", "type", "key")
            assert all(0 <= v < 768 for v in call.input.get("coordinate", []))
        else:
            assert call.input["command"] in ("view", "create", "str_replace", "insert") and call.input["path"]
    with pytest.raises(anthropic.BadRequestError):
        claude.messages.create(model="claude-sonnet-5-5", max_tokens=64, messages=ASK,
                               tools=[{**tool, "name": "renamed"}])


def test_a_memory_tool_round_trip_ends_with_text(llm_backend: LLMBackend, claude: Any) -> None:
    tools = [{"type": "memory_20250818", "name": "memory"}]
    history: list[Any] = [{"role": "user", "content": "Remember that I like tea."}]
    first = claude.messages.create(model="claude-sonnet-5-5", max_tokens=1024, tools=tools, messages=history)
    assert first.stop_reason == "tool_use"
    (call,) = [block for block in first.content if block.type == "tool_use"]
    history += [{"role": "assistant", "content": first.content},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "done"}]}]
    second = claude.messages.create(model="claude-sonnet-5-5", max_tokens=4096, tools=tools, messages=history)
    assert second.stop_reason == "end_turn" and second.content[0].type == "text"
