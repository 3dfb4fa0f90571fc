"""The "how to add" paths of docs/architecture.md, each walked once from outside the package.

An API (with a route that generates nothing, a shared path and a session) is
walked in ``tests/test_routes.py``; a setting in ``tests/test_config.py``
(every surface of every declared setting). Here: a fault kind, as a new
effect class registered beside the built-in ones, with no change anywhere else.
"""

from __future__ import annotations

import openai
import pytest

from pytest_llmsim import LLMBackend
from pytest_llmsim.sim import SimError
from pytest_llmsim.sim.fault_effects import EFFECTS, BaseEffect, Fail, FaultParams, Truncate


class Teapot(BaseEffect):
    """A throwaway kind: every request it picks is refused with a 418, on any route."""

    params = ("message",)
    on_routes_without_generation = True

    def on_request(self, fault: FaultParams) -> Fail:
        return Fail(SimError(418, fault.message or "I'm a teapot (a throwaway fault kind).", code="teapot"))


class CutAtTwo(BaseEffect):
    """A throwaway kind: a stream ends cleanly after two tokens."""

    ending = "cut after two"

    def cut_at(self, fault: FaultParams) -> int:
        return 2

    def at_cut(self, fault: FaultParams) -> Truncate:
        return Truncate()


@pytest.fixture
def new_kinds(llm_backend: LLMBackend, monkeypatch: pytest.MonkeyPatch) -> LLMBackend:
    if not hasattr(llm_backend, "_server"):
        pytest.skip("registers a kind in this process: needs the backend in this process")
    monkeypatch.setitem(EFFECTS, "teapot", Teapot())
    monkeypatch.setitem(EFFECTS, "cut_at_two", CutAtTwo())
    return llm_backend


def test_a_new_fault_kind_is_its_effect_class(new_kinds: LLMBackend) -> None:
    backend = new_kinds
    client = openai.OpenAI(base_url=backend.base_url, api_key="sk-test", max_retries=0)
    backend.add_fault("teapot", message="short and stout", times=1)
    with pytest.raises(openai.APIStatusError) as refused:
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    assert refused.value.status_code == 418 and refused.value.body["code"] == "teapot"  # type: ignore[index]
    assert "short and stout" in str(refused.value)
    backend.add_fault("teapot", route="/v1/models", times=1)  # it says it applies where nothing is generated
    with pytest.raises(openai.APIStatusError):
        client.models.list()
    assert [model.id for model in client.models.list()] == [backend.config.model]

    backend.reply_with("one two three four")
    stream = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], stream=True,
                                            extra_headers={"x-llmsim-fault": "cut_at_two"})
    chunks = list(stream)
    text = "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
    assert text == "one two" and all(chunk.choices[0].finish_reason is None for chunk in chunks if chunk.choices)
    assert backend.wait_idle(timeout=30)  # a cut stream's end reaches the client before its accounting ends
    assert backend.metrics.faults == {"teapot": 2, "cut_at_two": 1}
    assert backend.requests[-1].fault == "cut_at_two"


def test_an_unknown_kind_is_still_refused_by_name(llm_backend: LLMBackend) -> None:
    with pytest.raises(ValueError, match="unknown fault kind 'teapot'"):
        llm_backend.add_fault("teapot")
