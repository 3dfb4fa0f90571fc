"""Anthropic's context editing (``context_management``) through the official SDK's beta surface: the edits
are applied to the prompt the backend counts, and reported as the API reports them."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import pytest

from pytest_llmsim import LLMBackend

BETA = ["context-management-2025-06-27"]
MODEL = "claude-sonnet-5-5"
TOOL = {"name": "search", "description": "Search the web", "input_schema": {
    "type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}}


def _conversation(uses: int) -> list[dict[str, Any]]:
    """A user question, then ``uses`` tool calls each answered by a long result, then a question."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": "research this"}]
    for i in range(uses):
        messages.append({"role": "assistant", "content": [
            {"type": "tool_use", "id": f"toolu_{i}", "name": "search", "input": {"query": f"topic {i}"}}]})
        messages.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": f"toolu_{i}", "content": f"result {i}: " + "lorem ipsum " * 200}]})
    messages.append({"role": "user", "content": "summarise"})
    return messages


def _clear(keep: int = 2, trigger: int = 100, **extra: Any) -> dict[str, Any]:
    return {"edits": [{"type": "clear_tool_uses_20250919", "trigger": {"type": "input_tokens", "value": trigger},
                       "keep": {"type": "tool_uses", "value": keep}, **extra}]}


@pytest.fixture
def claude(llm_backend: LLMBackend) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(base_url=llm_backend.root_url, api_key="k", max_retries=0) as client:
        yield client


def test_old_tool_results_are_cleared_from_the_counted_prompt(claude: anthropic.Anthropic) -> None:
    messages = _conversation(5)
    whole = claude.beta.messages.count_tokens(model=MODEL, messages=messages, tools=[TOOL], betas=BETA)
    edited = claude.beta.messages.create(model=MODEL, max_tokens=5, messages=messages, tools=[TOOL], betas=BETA,
                                         context_management=_clear(keep=2))
    assert edited.context_management is not None
    (applied,) = edited.context_management.applied_edits
    assert applied.type == "clear_tool_uses_20250919" and applied.cleared_tool_uses == 3
    assert edited.usage.input_tokens == whole.input_tokens - applied.cleared_input_tokens
    assert applied.cleared_input_tokens > 3 * 350  # three results of ~400 tokens each
    counted = claude.beta.messages.count_tokens(model=MODEL, messages=messages, tools=[TOOL], betas=BETA,
                                                context_management=_clear(keep=2))
    assert counted.input_tokens == edited.usage.input_tokens
    assert counted.context_management is not None
    assert counted.context_management.original_input_tokens == whole.input_tokens
    streamed = claude.beta.messages.create(model=MODEL, max_tokens=5, messages=messages, tools=[TOOL], betas=BETA,
                                           context_management=_clear(keep=2), stream=True)
    deltas = [event for event in streamed if event.type == "message_delta"]
    assert deltas[-1].context_management is not None
    assert deltas[-1].context_management.applied_edits[0].cleared_tool_uses == 3


def test_an_edit_acts_only_past_its_trigger_and_its_minimum(claude: anthropic.Anthropic) -> None:
    messages = _conversation(5)
    below = claude.beta.messages.create(model=MODEL, max_tokens=5, messages=messages, betas=BETA,
                                        context_management=_clear(trigger=1_000_000))
    assert below.context_management is not None and below.context_management.applied_edits == []
    not_worth_it = claude.beta.messages.create(
        model=MODEL, max_tokens=5, messages=messages, betas=BETA,
        context_management=_clear(clear_at_least={"type": "input_tokens", "value": 1_000_000}))
    assert not_worth_it.context_management is not None and not_worth_it.context_management.applied_edits == []
    assert not_worth_it.usage.input_tokens == below.usage.input_tokens
    excluded = claude.beta.messages.create(model=MODEL, max_tokens=5, messages=messages, betas=BETA,
                                           context_management=_clear(exclude_tools=["search"]))
    assert excluded.context_management is not None and excluded.context_management.applied_edits == []
    inputs = claude.beta.messages.create(model=MODEL, max_tokens=5, messages=messages, betas=BETA,
                                         context_management=_clear(keep=0, clear_tool_inputs=True))
    results_only = claude.beta.messages.create(model=MODEL, max_tokens=5, messages=messages, betas=BETA,
                                               context_management=_clear(keep=0))
    assert inputs.usage.input_tokens < results_only.usage.input_tokens < below.usage.input_tokens


def test_thinking_of_older_turns_is_cleared(claude: anthropic.Anthropic) -> None:
    first = claude.messages.create(model=MODEL, max_tokens=2048, thinking={"type": "enabled", "budget_tokens": 1024},
                                   messages=[{"role": "user", "content": "think"}])
    thought = [block.model_dump() for block in first.content]
    messages: list[dict[str, Any]] = []
    for turn in range(3):
        messages += [{"role": "user", "content": f"question {turn}"}, {"role": "assistant", "content": thought}]
    messages.append({"role": "user", "content": "last question"})
    edit = {"edits": [{"type": "clear_thinking_20251015", "keep": {"type": "thinking_turns", "value": 1}}]}
    answer = claude.beta.messages.create(model=MODEL, max_tokens=2048, messages=messages, betas=BETA,
                                         thinking={"type": "enabled", "budget_tokens": 1024},
                                         context_management=edit)
    assert answer.context_management is not None
    (applied,) = answer.context_management.applied_edits
    assert applied.type == "clear_thinking_20251015" and applied.cleared_thinking_turns == 2
    assert applied.cleared_input_tokens == 0  # thinking sent back is not counted here (Anthropic drops it)
    kept = claude.beta.messages.create(model=MODEL, max_tokens=2048, messages=messages, betas=BETA,
                                       thinking={"type": "enabled", "budget_tokens": 1024},
                                       context_management={"edits": [{"type": "clear_thinking_20251015",
                                                                      "keep": "all"}]})
    assert kept.context_management is not None and kept.context_management.applied_edits == []


@pytest.mark.parametrize(("edit", "param"), [
    ({"type": "compact_20260112"}, "context_management.edits.0.type"),
    ({"type": "clear_everything"}, "context_management.edits.0.type"),
    ({"type": "clear_tool_uses_20250919", "keep": {"type": "tool_uses", "value": -1}},
     "context_management.edits.0.keep"),
    ({"type": "clear_tool_uses_20250919", "trigger": 5}, "context_management.edits.0.trigger"),
])
def test_an_edit_it_does_not_simulate_is_a_400_naming_it(claude: anthropic.Anthropic, llm_backend: LLMBackend,
                                                         edit: dict[str, Any], param: str) -> None:
    with pytest.raises(anthropic.BadRequestError) as raised:
        claude.beta.messages.create(model=MODEL, max_tokens=5, messages=_conversation(1), betas=BETA,
                                    context_management={"edits": [edit]})
    assert llm_backend.requests[-1].error is not None and llm_backend.requests[-1].error["param"] == param
    if edit["type"] == "compact_20260112":
        assert "compact_20260112" in str(raised.value)


def test_the_sdks_memory_example_runs(claude: anthropic.Anthropic, tmp_path: Any) -> None:
    """examples/memory/basic.py's call: the tool runner, the memory tool, and its context management."""
    from anthropic.tools import BetaLocalFilesystemMemoryTool

    memory = BetaLocalFilesystemMemoryTool(base_path=str(tmp_path))
    runner = claude.beta.messages.tool_runner(
        betas=BETA, model=MODEL, max_tokens=2048, system="Store facts about the user.",
        messages=[{"role": "user", "content": "Hi, I am Ann."}], tools=[memory], max_iterations=3,
        context_management=_clear(keep=3, trigger=30_000, clear_at_least={"type": "input_tokens", "value": 5000},
                                  exclude_tools=["web_search"]))
    replies = list(runner)
    assert replies[0].stop_reason == "tool_use" and replies[0].content[0].type == "tool_use"
    assert replies[-1].stop_reason == "end_turn"
    assert all(reply.context_management is not None and reply.context_management.applied_edits == []
               for reply in replies)  # far under its 30,000-token trigger
