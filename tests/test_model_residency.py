"""Which models are loaded (Ollama's model residency), in simulated time."""

from __future__ import annotations

import math

from pytest_llmsim.sim.model_residency import ModelResidency


def test_a_cold_model_loads_and_requests_during_the_load_wait_for_what_is_left() -> None:
    residency = ModelResidency()
    assert residency.acquire("m", 0.0, 5.0, 60.0) == 5.0
    assert residency.acquire("m", 2.0, 5.0, 60.0) == 3.0  # the same load, not a second one
    assert residency.acquire("other", 2.0, 5.0, 60.0) == 5.0
    assert [model.name for model in residency.loaded(3.0)] == ["m", "other"]


def test_the_keep_alive_timer_starts_when_the_last_request_ends() -> None:
    residency = ModelResidency()
    residency.acquire("m", 0.0, 1.0, 10.0)
    residency.acquire("m", 0.5, 1.0, 10.0)
    residency.release("m", 3.0)
    assert residency.loaded(100.0)  # one request still uses it
    residency.release("m", 4.0)
    assert residency.loaded(13.9) and not residency.loaded(14.0)
    assert residency.acquire("m", 13.0, 1.0, 10.0) == 0.0  # still warm
    residency.release("m", 13.5)
    assert residency.acquire("m", 24.0, 1.0, 10.0) == 1.0  # expired at 23.5: loads again


def test_keep_alive_zero_unloads_at_once_and_infinite_never() -> None:
    residency = ModelResidency()
    residency.acquire("m", 0.0, 1.0, 0.0)
    residency.release("m", 2.0)
    assert residency.loaded(2.0) == []
    residency.acquire("m", 2.0, 1.0, math.inf)
    residency.release("m", 3.5)
    assert residency.loaded(1e12)[0].expires_at == math.inf


def test_a_request_that_gives_up_during_the_load_leaves_the_model_loading() -> None:
    residency = ModelResidency()
    residency.acquire("m", 0.0, 30.0, 5.0)
    residency.release("m", 1.0)  # the client hung up after 1 s
    assert residency.acquire("m", 31.0, 30.0, 5.0) == 0.0  # loaded at 30, kept until 35
    residency.release("m", 32.0)
    residency.release("m", 33.0)  # an extra release is ignored
    assert residency.loaded(36.9)
    residency.clear()
    assert residency.loaded(0.0) == []
