"""How-to: test a Responses-API client (an agent loop) against the backend.

The official SDK's ``responses.create`` with ``previous_response_id`` chains a
conversation through the backend's store; the stored history counts as prompt
tokens, and ``responses.retrieve`` reads it back. Instructions apply to their
own request only (as OpenAI does), so an agent sends them every turn, which
also keeps the prompt's prefix, and so the prefix cache, stable.
"""

from __future__ import annotations

import openai


def test_agent_loop_chains_turns(llm_backend) -> None:
    llm_backend.reply_with("I will look it up.", "The answer is 42.")
    client = openai.OpenAI(base_url=llm_backend.base_url, api_key="test", max_retries=0)

    first = client.responses.create(model="llmsim", instructions="You are an agent.",
                                    input="What is six times seven? " * 8)
    second = client.responses.create(model="llmsim", instructions="You are an agent.", input="Go on.",
                                     previous_response_id=first.id)

    assert (first.output_text, second.output_text) == ("I will look it up.", "The answer is 42.")
    assert second.status == "completed"  # no max_output_tokens: the answer ends naturally
    assert second.usage.input_tokens > first.usage.input_tokens  # the history is in the prompt
    assert second.usage.input_tokens_details.cached_tokens > 0  # ... and in the prefix cache
    assert client.responses.retrieve(second.id).output_text == "The answer is 42."
    assert [r.api for r in llm_backend.requests] == ["openai.responses"] * 2  # generations are logged
