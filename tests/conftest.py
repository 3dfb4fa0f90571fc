"""Shared test set-up: the pytester plugin, and SDK clients closed after each test (and LiteLLM's at the end)."""

from __future__ import annotations

import asyncio
import inspect
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


@pytest.fixture(scope="session", autouse=True)
def _close_litellm_clients() -> Iterator[None]:
    """LiteLLM keeps the clients it makes, per backend URL, in a module-level cache and never closes
    them; every test's backend is a new URL, so at exit their pooled sockets were reported unclosed
    (8 ResourceWarnings per run). Closed when the session ends."""
    yield
    litellm = sys.modules.get("litellm")
    if litellm is None:
        return
    cache = litellm.in_memory_llm_clients_cache
    for client in list(cache.cache_dict.values()):
        close = getattr(client, "close", None) or getattr(client, "aclose", None)
        if close is None:
            continue
        try:
            result = close()
            if inspect.isawaitable(result):
                asyncio.run(result)
        except Exception:  # a client whose loop is gone: nothing left to close
            pass
    cache.flush_cache()
