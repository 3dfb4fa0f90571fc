"""Garbage collection paced by requests (``llmsim serve --gc-pacing on``)."""

from __future__ import annotations

import gc
import time
from collections.abc import Iterator

import httpx
import pytest

from pytest_llmsim import LLMBackend
from pytest_llmsim.cli import build_parser, pace_collections
from pytest_llmsim.gc_pacing import CollectionPacer, PauseWatch, freeze_startup

real_collect = gc.collect  # before any test replaces it


@pytest.fixture
def collections(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The generations ``gc.collect`` was asked for (nothing is collected)."""
    asked: list[int] = []
    monkeypatch.setattr(gc, "collect", lambda generation=2: asked.append(generation) or 0)
    return asked


@pytest.fixture
def unfrozen() -> Iterator[None]:
    was_frozen = gc.get_freeze_count() > 0  # the session's own freeze (--llmsim-gc-freeze) stays
    yield
    if not was_frozen:
        gc.unfreeze()  # give the test process its objects back


def test_the_pacer_collects_young_then_middle_generations_by_requests(collections: list[int]) -> None:
    pacer = CollectionPacer(young_every=3, middle_every=9)
    for _ in range(18):
        pacer.request_done()
    assert collections == [0, 0, 1, 0, 0, 1]


def test_pacer_settings_are_checked() -> None:
    with pytest.raises(ValueError):
        CollectionPacer(young_every=0)
    with pytest.raises(ValueError):
        CollectionPacer(young_every=10, middle_every=5)


def test_freezing_moves_live_objects_out_of_the_collector(unfrozen: None) -> None:
    before = gc.get_freeze_count()
    freeze_startup()
    assert gc.get_freeze_count() > before


def test_a_paced_backend_ticks_once_per_request_whatever_its_outcome(unfrozen: None,
                                                                     collections: list[int]) -> None:
    """Successes, API errors and unknown paths each end in the simulator's accounting, so each counts."""
    backend = LLMBackend()
    pacer = pace_collections(backend, CollectionPacer(young_every=2, middle_every=4))
    backend.start()
    try:
        chat = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
        assert httpx.post(backend.url_for("/v1/chat/completions"), json=chat).status_code == 200
        assert httpx.post(backend.url_for("/v1/chat/completions"), json={"model": "m"}).status_code == 400
        assert httpx.get(backend.url_for("/v1/nothing-here")).status_code == 404
        assert httpx.post(backend.url_for("/v1/completions"),
                          json={"model": "m", "prompt": "hi", "max_tokens": 1}).status_code == 200
    finally:
        backend.stop()
    assert len(backend.requests) == 4 and pacer.young_every == 2
    assert collections[-2:] == [0, 1]  # requests 2 and 4 (freeze_startup's full collection came first)


def test_serve_paces_by_default_and_can_leave_cpython_alone() -> None:
    parser = build_parser()
    assert parser.parse_args(["serve"]).gc_pacing == "on"
    assert parser.parse_args(["serve", "--gc-pacing", "off"]).gc_pacing == "off"
    with pytest.raises(SystemExit):
        parser.parse_args(["serve", "--gc-pacing", "sometimes"])


def test_the_pause_watch_sees_a_collection_and_answers_by_time() -> None:
    watch = PauseWatch(floor=0.0)
    watch.install()
    watch.install()  # once only
    try:
        before = time.monotonic()
        garbage = [[i] for i in range(200_000)]  # tracked objects for the collector to walk
        real_collect(2)
        del garbage
        seen = watch.longest_since(before)
        assert seen > 0.0
        assert watch.longest_since(time.monotonic() + 1) == 0.0  # none ended after a later moment
    finally:
        watch.uninstall()
        watch.uninstall()
    assert watch._on_gc not in gc.callbacks


@pytest.mark.parametrize("cap", [0, 1, 3, 50])
def test_recent_samples_keep_the_newest_values_whatever_the_counts(cap: int) -> None:
    """A histogram's recent samples: the newest ``cap`` values, a run of ``count`` equal values counting
    ``count`` times (a count of 0 adds nothing)."""
    import random

    from pytest_llmsim.sim.histogram import RecentValues
    rng = random.Random(cap)
    recent, kept = RecentValues(cap), []
    for step in range(400):
        count = rng.choice([1, 1, 2, 5, 0, 60])
        recent.add(float(step), count)
        kept = (kept + [float(step)] * count)[-cap:] if cap else []
        assert sorted(recent) == sorted(kept)
