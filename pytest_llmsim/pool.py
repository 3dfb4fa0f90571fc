"""BackendPool: named backends that outlive a test, for gateways started once per module or session.

A gateway that takes seconds to start (a LiteLLM proxy in front of a primary
and a fallback) is started by a module- or session-scoped fixture, so its
backends must live as long. The plugin resets every backend of a pool before
each test that uses the pool (settings, then the test's markers, empty
state), records report rows and runs the teardown check after it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from .backend import LLMBackend
from .sim.config import SimConfig

__all__ = ["BackendPool"]


class BackendPool:
    """Named :class:`LLMBackend` s sharing one lifetime; ``pool.get("primary", model="a")``."""

    def __init__(self, base: SimConfig, host: str = "127.0.0.1", scope: str = "session") -> None:
        self._base = base
        self._host = host
        self.scope = scope
        self._backends: dict[str, tuple[LLMBackend, dict[str, Any]]] = {}

    def get(self, name: str, **settings: Any) -> LLMBackend:
        """The backend called ``name``, started on its own port the first time it is asked for.

        ``settings`` are its own on top of ``llmsim_config`` (markers of each
        test come on top of both); asking again with different settings is an
        error, since a gateway already points at the backend as it is.
        """
        if name in self._backends:
            backend, created = self._backends[name]
            if settings and settings != created:
                raise ValueError(f"{self.scope} backend {name!r} exists with settings {created!r}; "
                                 f"asked again with {settings!r}: configure() it in the test instead")
            return backend
        backend = LLMBackend(self._base.replace(**settings), host=self._host).start()
        self._backends[name] = (backend, dict(settings))
        return backend

    def __getitem__(self, name: str) -> LLMBackend:
        try:
            return self._backends[name][0]
        except KeyError:
            started = ", ".join(self._backends) or "none"
            raise KeyError(f"no {self.scope} backend {name!r}; started: {started}") from None

    def __contains__(self, name: object) -> bool:
        return name in self._backends

    def __iter__(self) -> Iterator[LLMBackend]:
        return iter([backend for backend, _ in self._backends.values()])

    def __len__(self) -> int:
        return len(self._backends)

    def prepare(self, markers: dict[str, Any], arm: Callable[[LLMBackend], None]) -> None:
        """Before a test: each backend back to the test's markers plus its own settings, empty state,
        then armed by ``arm`` (the test's faults and scripted replies, as every other backend is).

        As with ``llm_backend_factory``, a backend's explicit settings win over markers.
        """
        for backend, created in self._backends.values():
            backend.reset(self._base.replace(**{**markers, **created}))
            arm(backend)

    def stop(self) -> None:
        """Stop every backend (the pool's scope is over)."""
        for backend, _ in self._backends.values():
            backend.stop()
        self._backends.clear()
