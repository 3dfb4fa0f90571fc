"""instructor with its own defaults: iterables, partial streams and a plain response model, over OpenAI and
Anthropic (installed with ``--no-deps``; see the README's test command)."""

from __future__ import annotations

from typing import Any

import anthropic
import openai
import pytest
from pydantic import BaseModel

from pytest_llmsim import LLMBackend

# installed beside the integrations extra with --no-deps (the README's test command)
instructor = pytest.importorskip("instructor", reason="instructor is installed with the integrations (README)")


class User(BaseModel):
    name: str
    age: int


ASK: Any = [{"role": "user", "content": "Make up two users."}]


@pytest.fixture
def openai_client(llm_backend: LLMBackend) -> Any:
    client = openai.OpenAI(base_url=llm_backend.base_url, api_key="test", max_retries=0)
    yield instructor.from_openai(client)
    client.close()


def test_create_iterable_yields_instances(llm_backend: LLMBackend, openai_client: Any) -> None:
    users = list(openai_client.chat.completions.create_iterable(model="gpt-4o-mini", response_model=User,
                                                                messages=ASK))
    assert users and all(isinstance(user, User) and user.name for user in users)
    sent = llm_backend.requests[-1].body
    assert sent["stream"] is True and sent["tools"][0]["function"]["parameters"]["required"] == []  # all optional


def test_create_partial_streams_a_growing_instance(llm_backend: LLMBackend, openai_client: Any) -> None:
    parts = list(openai_client.chat.completions.create_partial(model="gpt-4o-mini", response_model=User,
                                                               messages=ASK))
    assert len(parts) > 2  # one per streamed piece of the arguments
    assert parts[0].name is None or len(parts[0].name or "") <= len(parts[-1].name)
    assert isinstance(parts[-1].name, str) and isinstance(parts[-1].age, int)
    assert llm_backend.requests[-1].stream


def test_a_response_model_over_anthropic(llm_backend: LLMBackend) -> None:
    raw = anthropic.Anthropic(base_url=llm_backend.root_url, api_key="test", max_retries=0)
    client = instructor.from_anthropic(raw)
    user = client.messages.create(model="claude-sonnet-5-5", max_tokens=1024, response_model=User, messages=ASK)
    assert isinstance(user, User) and user.age == int(user.age)
    assert llm_backend.requests[-1].body["tool_choice"]["type"] == "tool"
    raw.close()
