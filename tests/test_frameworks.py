"""Frameworks nobody here wrote, with their own defaults: LangChain's ChatAnthropic (no max_tokens given: it
sends the model's largest), its streamed usage, and an openai-agents run that calls a tool."""

from __future__ import annotations

import pytest

from pytest_llmsim import LLMBackend


def test_langchain_chat_anthropic_with_its_default_max_tokens(llm_backend: LLMBackend) -> None:
    langchain_anthropic = pytest.importorskip("langchain_anthropic")
    model = langchain_anthropic.ChatAnthropic(model="claude-sonnet-5-5", base_url=llm_backend.root_url, api_key="t")
    answer = model.invoke("hi")
    sent = llm_backend.requests[-1]
    assert sent.body["max_tokens"] == 128_000 and sent.status == 200  # the model's largest, taken as Anthropic does
    assert answer.usage_metadata is not None and 512 <= answer.usage_metadata["output_tokens"] <= 1024
    chunks = list(model.stream("hi"))
    total = chunks[0]
    for chunk in chunks[1:]:
        total = total + chunk
    usage = total.usage_metadata
    assert usage is not None and usage["input_tokens"] == llm_backend.requests[-1].prompt_tokens > 0
    assert usage["output_tokens"] == llm_backend.requests[-1].completion_tokens


@pytest.mark.filterwarnings("ignore::ResourceWarning")  # the agents runner's own event loop and transports
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.usefixtures("collect_garbage")
def test_an_openai_agents_run_calls_its_tool_and_answers(llm_backend: LLMBackend) -> None:
    agents = pytest.importorskip("agents")
    from openai import AsyncOpenAI

    agents.set_tracing_disabled(True)
    called: list[str] = []

    @agents.function_tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        called.append(city)
        return f"sunny in {city}"

    client = AsyncOpenAI(base_url=llm_backend.base_url, api_key="t")
    agent = agents.Agent(name="weather", instructions="Be brief.", tools=[get_weather],
                         model=agents.OpenAIResponsesModel("gpt-4o", client))
    result = agents.Runner.run_sync(agent, "What is the weather in Paris?")
    assert result.final_output and len(called) == 1
    assert [record.api for record in llm_backend.requests] == ["openai.responses", "openai.responses"]


@pytest.mark.filterwarnings("ignore::ResourceWarning")
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.usefixtures("collect_garbage")
def test_pydantic_ai_openai_chat_and_responses_models(llm_backend: LLMBackend) -> None:
    pydantic_ai = pytest.importorskip("pydantic_ai")
    from pydantic import BaseModel
    from pydantic_ai.models.openai import OpenAIChatModel, OpenAIResponsesModel
    from pydantic_ai.providers.openai import OpenAIProvider

    class City(BaseModel):
        name: str
        population: int

    provider = OpenAIProvider(api_key="t", base_url=llm_backend.base_url)
    for model in (OpenAIChatModel("gpt-4o", provider=provider), OpenAIResponsesModel("gpt-4o", provider=provider)):
        for output_type in (str, City, pydantic_ai.NativeOutput(City)):
            result = pydantic_ai.Agent(model, output_type=output_type).run_sync("Tell me about a city.")
            assert result.output and (output_type is str or isinstance(result.output, City))
    assert {record.api for record in llm_backend.requests} == {"openai.chat", "openai.responses"}
    assert all(record.status == 200 and record.ignored_fields == [] for record in llm_backend.requests)


@pytest.mark.filterwarnings("ignore::ResourceWarning")
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.usefixtures("collect_garbage")
def test_an_openai_agents_run_with_reasoning(llm_backend: LLMBackend) -> None:
    agents = pytest.importorskip("agents")
    from openai import AsyncOpenAI
    from openai.types.shared import Reasoning

    agents.set_tracing_disabled(True)

    @agents.function_tool
    def lookup(topic: str) -> str:
        """Look a topic up."""
        return f"{topic}: 42"

    client = AsyncOpenAI(base_url=llm_backend.base_url, api_key="t")
    agent = agents.Agent(name="thinker", instructions="Think, then answer.", tools=[lookup],
                         model=agents.OpenAIResponsesModel("o4-mini", client),
                         model_settings=agents.ModelSettings(reasoning=Reasoning(effort="low", summary="auto")))
    result = agents.Runner.run_sync(agent, "What is the answer?")
    assert result.final_output
    first, second = llm_backend.requests
    assert first.body["reasoning"]["effort"] == "low" and first.ignored_fields == []
    items = [item.type for item in result.new_items]
    assert "reasoning_item" in items and "tool_call_item" in items
