"""Waiting in tests on what a server does in its own time (a batch that runs, a job that ends)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def wait_for(poll: Callable[[], Any], done: Callable[[Any], bool], seconds: float = 10.0) -> Any:
    """``poll()`` until ``done`` says its value is the one awaited, or ``seconds`` of wall time pass (room for a
    machine ten times slower: the caller asserts on the value); the last value."""
    deadline = time.monotonic() + seconds
    value = poll()
    while not done(value) and time.monotonic() < deadline:
        time.sleep(0.01)
        value = poll()
    return value
