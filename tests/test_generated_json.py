"""Generated JSON reads like a model's: optional properties filled in at optional_property_rate, arrays of a
typical length, strings that read as values of their property names; always valid for the schema."""

from __future__ import annotations

import random
from typing import Any

import jsonschema
import openai
import pytest
from pydantic import BaseModel

from pytest_llmsim import LLMBackend
from pytest_llmsim.content.schema import generate_instance

OPTIONAL = {"type": "object", "properties": {name: {"type": "string"} for name in "abcde"}}
ITERABLE = {"type": "object", "required": [], "properties": {"tasks": {"type": "array", "items": {
    "type": "object", "properties": {"title": {"type": "string"}, "city": {"type": "string"},
                                     "description": {"type": "string"}},
    "required": ["title", "city", "description"]}}}}  # instructor's create_iterable shape


def _instances(schema: Any, rate: float = 0.9, count: int = 200) -> list[Any]:
    return [generate_instance(schema, random.Random(seed), optional_rate=rate) for seed in range(count)]


def test_optional_properties_are_filled_in_at_the_rate() -> None:
    filled = sum(len(instance) for instance in _instances(OPTIONAL)) / (5 * 200)
    assert 0.85 <= filled <= 0.95
    assert all(instance == {} for instance in _instances(OPTIONAL, rate=0.0))
    assert all(instance for instance in _instances(OPTIONAL, rate=0.05))  # at least one, whatever the draws
    assert all(len(instance) == 5 for instance in _instances(OPTIONAL, rate=1.0))


def test_an_iterable_of_tasks_is_never_empty_and_reads_as_its_names() -> None:
    instances = _instances(ITERABLE)
    with_tasks = [instance for instance in instances if instance.get("tasks")]
    assert len(with_tasks) == len(instances)  # only optional properties: a model still writes one, never {}
    lengths = {len(instance["tasks"]) for instance in with_tasks}
    assert lengths == {1, 2, 3}  # a typical length, within the bounds
    for instance in with_tasks:
        jsonschema.validate(instance, ITERABLE)
        for task in instance["tasks"]:
            assert task["title"][0].isupper() and task["description"].endswith(".")
            assert task["city"] in ("Paris", "Tokyo", "Lagos", "Lima", "Oslo", "Toronto", "Mumbai", "Sydney",
                                    "Nairobi", "Madrid")


class Profile(BaseModel):
    name: str
    city: str | None = None
    country: str | None = None
    nickname: str | None = None


def test_an_sdk_parse_gets_its_optional_fields(llm_backend: LLMBackend) -> None:
    client = openai.OpenAI(base_url=llm_backend.base_url, api_key="sk", max_retries=0)
    profiles = [client.chat.completions.parse(model="gpt-4o", response_format=Profile, seed=seed, messages=[
        {"role": "user", "content": "A profile."}]).choices[0].message.parsed for seed in range(10)]
    assert all(isinstance(p, Profile) for p in profiles)
    filled = sum(p.city is not None for p in profiles if p is not None)
    assert filled >= 6  # the SDK's strict schema lists every field as required (nullable): most are values
    client.close()


@pytest.mark.parametrize("rate", [-0.1, 1.5, "often"])
def test_a_bad_rate_is_refused(llm_backend: LLMBackend, rate: Any) -> None:
    from pytest_llmsim import ConfigError

    with pytest.raises(ConfigError, match="optional_property_rate"):
        llm_backend.configure(optional_property_rate=rate)
