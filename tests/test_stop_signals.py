"""``llmsim serve``'s stop on SIGINT/SIGTERM: the handler notes the signal and takes no lock (one that took the
lock an ``Event.wait()`` holds left a replica whose parent died serving forever, its main thread deadlocked on
itself); a second signal exits at once."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from types import FrameType, SimpleNamespace
from typing import Any

import pytest

from pytest_llmsim.cli import stop_signals
from pytest_llmsim.cli.stop_signals import StopSignals


@pytest.fixture
def stopper() -> Iterator[StopSignals]:
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    stop = StopSignals()
    stop.install()
    yield stop
    signal.signal(signal.SIGINT, before[0])
    signal.signal(signal.SIGTERM, before[1])


def test_a_signal_ends_the_wait(stopper: StopSignals) -> None:
    assert stopper.wait(0.01) is False and stopper.signum is None
    timer = threading.Timer(0.05, os.kill, (os.getpid(), signal.SIGTERM))
    timer.start()
    try:
        assert stopper.wait(60.0) is True  # well before the 60 s: the signal came
    finally:
        timer.cancel()
    assert stopper.signum == signal.SIGTERM
    assert stopper.wait(60.0) is True  # and stays noted


def test_the_handler_needs_no_lock_the_waiting_thread_holds(stopper: StopSignals,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """The signal is handled in the middle of the wait, in the waiting thread itself (as Python runs a handler:
    between two bytecodes of the main thread): the wait ends, nothing blocks."""
    slept: list[float] = []

    def sleep_then_signalled(seconds: float) -> None:
        slept.append(seconds)
        stopper.on_signal(signal.SIGINT, None)

    monkeypatch.setattr(stop_signals, "time", SimpleNamespace(monotonic=time.monotonic, sleep=sleep_then_signalled))
    assert stopper.wait(60.0) is True and slept == [stop_signals.GLANCE_SECONDS]


def test_the_handler_takes_no_lock(stopper: StopSignals) -> None:
    """What the handler calls, watched: no lock taken (``threading.Event.set()``, the handler before, takes one,
    which the main thread holds inside ``Event.wait()`` around its bookkeeping: called there, it waited on
    itself)."""
    taken: list[str] = []

    def watch(frame: FrameType, event: str, arg: Any) -> None:
        if event == "c_call" and getattr(arg, "__name__", "") in ("acquire", "__enter__", "acquire_lock"):
            taken.append(repr(arg))

    sys.setprofile(watch)
    try:
        stopper.on_signal(signal.SIGTERM, None)
    finally:
        sys.setprofile(None)
    assert taken == [] and stopper.signum == signal.SIGTERM
    event = threading.Event()  # the watch does see an Event's lock
    sys.setprofile(watch)
    try:
        event.set()
    finally:
        sys.setprofile(None)
    assert taken


def test_a_second_signal_exits_at_once(stopper: StopSignals, monkeypatch: pytest.MonkeyPatch) -> None:
    exits: list[int] = []
    monkeypatch.setattr(stop_signals, "os", SimpleNamespace(_exit=exits.append))
    stopper.on_signal(signal.SIGINT, None)
    assert exits == [] and stopper.signum == signal.SIGINT
    stopper.on_signal(signal.SIGTERM, None)
    assert exits == [128 + signal.SIGTERM]
