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
    parsed = claude.messages.parse(model="claude-sonnet-4-5", max_tokens=1024, messages=ASK, output_format=City)
    city = parsed.parsed_output
    assert isinstance(city, City) and city.name
    sent = llm_backend.requests[-1].body
    assert sent["output_config"]["format"]["type"] == "json_schema"  # how the SDK asks
    assert llm_backend.requests[-1].ignored_fields == []


def test_streamed_structured_output_parses(llm_backend: LLMBackend, claude: Any) -> None:
    schema = City.model_json_schema()
    with claude.messages.stream(model="claude-sonnet-4-5", max_tokens=1024, messages=ASK,
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
        claude.messages.create(model="claude-sonnet-4-5", max_tokens=64, messages=ASK, output_config=output_config)
    error = llm_backend.requests[-1].error
    assert error is not None and error["param"] == param


@pytest.mark.filterwarnings("ignore::ResourceWarning")  # pydantic-ai's run_sync leaves its own loop's generators
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.usefixtures("collect_garbage")
def test_pydantic_ai_claude_with_its_defaults(llm_backend: LLMBackend) -> None:
    pydantic_ai = pytest.importorskip("pydantic_ai")
    from pydantic_ai.models.anthropic import AnthropicModel
    from pydantic_ai.providers.anthropic import AnthropicProvider

    model = AnthropicModel("claude-sonnet-4-5", provider=AnthropicProvider(api_key="t", base_url=llm_backend.root_url))
    for output_type in (str, City, pydantic_ai.NativeOutput(City)):
        result = pydantic_ai.Agent(model, output_type=output_type).run_sync("Tell me about a city.")
        assert result.output
        if output_type is not str:
            assert isinstance(result.output, City)
    assert all(record.status == 200 for record in llm_backend.requests)
