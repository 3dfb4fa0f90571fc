"""Stream faults that leave a stream whole but wrong: an event sent twice (``repeat_event``) or two swapped
(``reorder_events``), which a gateway that replays, buffers or re-sequences a stream must not pass on unnoticed."""

from __future__ import annotations

import anthropic
import openai
import pytest

from pytest_llmsim import LLMBackend

ASK = [{"role": "user", "content": "hi"}]


def streamed_text(backend: LLMBackend) -> str:
    client = openai.OpenAI(base_url=backend.base_url, api_key="k")
    chunks = client.chat.completions.create(model="m", messages=ASK, max_tokens=20, stream=True)  # type: ignore
    return "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)


@pytest.mark.parametrize(("kind", "expected"), [
    ("repeat_event", "one two three three four five"),
    ("reorder_events", "one three two four five"),
])
def test_the_stream_goes_on_garbled(llm_backend: LLMBackend, kind: str, expected: str) -> None:
    llm_backend.on().reply("one two three four five")
    llm_backend.add_fault(kind, after_tokens=3, times=2)
    assert streamed_text(llm_backend) == expected
    claude = anthropic.Anthropic(base_url=llm_backend.root_url, api_key="k")
    with claude, claude.messages.stream(model="claude-sonnet-4-5", max_tokens=20, messages=ASK) as stream:  # type: ignore
        message = stream.get_final_message()
    assert message.content[0].text == expected and message.stop_reason == "end_turn"  # type: ignore[union-attr]
    # the stream ended as usual: the log has it whole, with the fault named
    assert [(r.status, r.fault, r.completion_tokens) for r in llm_backend.requests] == [(200, kind, 5)] * 2
    assert streamed_text(llm_backend) == "one two three four five"  # only twice
    whole = openai.OpenAI(base_url=llm_backend.base_url, api_key="k")
    llm_backend.add_fault(kind, after_tokens=1)
    answer = whole.chat.completions.create(model="m", messages=ASK, max_tokens=20)  # type: ignore[arg-type]
    assert answer.choices[0].message.content == "one two three four five"  # a whole answer has no events


def test_a_garbling_fault_needs_no_more_than_after_tokens(llm_backend: LLMBackend) -> None:
    with pytest.raises(ValueError, match="mode"):
        llm_backend.add_fault("repeat_event", mode="twice")
