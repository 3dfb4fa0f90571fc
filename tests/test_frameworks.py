"""Frameworks nobody here wrote, with their own defaults: LangChain's ChatAnthropic (no max_tokens given: it
sends the model's largest), its streamed usage, and an openai-agents run that calls a tool."""

from __future__ import annotations

import pytest

from pytest_llmsim import LLMBackend


def test_langchain_chat_anthropic_with_its_default_max_tokens(llm_backend: LLMBackend) -> None:
    langchain_anthropic = pytest.importorskip("langchain_anthropic")
    model = langchain_anthropic.ChatAnthropic(model="claude-sonnet-4-5", base_url=llm_backend.root_url, api_key="t")
    answer = model.invoke("hi")
    sent = llm_backend.requests[-1]
    assert sent.body["max_tokens"] == 64_000 and sent.status == 200  # the model's largest, taken as Anthropic does
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
