"""Shared test set-up: the pytester plugin, and SDK clients closed after each test."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pytest

pytest_plugins = ["pytester"]


@pytest.fixture(autouse=True)
def _close_sdk_clients(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Tests make SDK clients freely; their kept-alive connections are closed after each test
    (left to the GC, every pooled socket would raise a ResourceWarning somewhere later)."""
    created: list[Any] = []
    for cls in (openai.OpenAI, anthropic.Anthropic):
        original = cls.__init__

        def init(self: Any, *args: Any, _original: Any = original, **kwargs: Any) -> None:
            _original(self, *args, **kwargs)
            caller = sys._getframe(1).f_globals.get("__name__", "")
            if not caller.startswith("litellm"):  # a gateway's clients are the gateway's to manage
                created.append(self)

        monkeypatch.setattr(cls, "__init__", init)
    yield
    for client in created:
        client.close()
