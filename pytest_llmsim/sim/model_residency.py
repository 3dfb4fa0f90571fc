"""Which models are loaded, for servers that load a model on demand (Ollama's model residency).

A cold model takes ``load_seconds`` of simulated time before its first
request can run; requests that arrive while it loads wait for the same
load. A loaded model stays loaded while requests use it and for its
``keep_alive`` after the last one ends (0: unloaded at once; infinite:
never), as Ollama keeps it. At most ``MAX_LOADED_MODELS`` are kept: a new
one past it unloads the idle model loaded longest ago, as Ollama does when
``OLLAMA_MAX_LOADED_MODELS`` is reached (a model in use is never unloaded).
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass

__all__ = ["MAX_LOADED_MODELS", "LoadedModel", "ModelResidency"]

MAX_LOADED_MODELS = 1_000  # far above a real server's, and a bound on what a client's model names can fill


@dataclass(slots=True)
class LoadedModel:
    """A model in memory (or loading): when it is ready, how many requests use it, when it expires."""

    name: str
    ready_at: float
    keep_alive: float
    in_use: int = 0
    expires_at: float = math.inf  # while in use, never

    def loaded_at(self, now: float) -> bool:
        return self.in_use > 0 or self.expires_at > now


class ModelResidency:
    """The loaded models of one backend, in simulated time; safe from handler threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._models: dict[str, LoadedModel] = {}

    def acquire(self, name: str, now: float, load_seconds: float, keep_alive: float) -> float:
        """A request for ``name`` starts at ``now``: the simulated seconds it waits for the model to load
        (0 when it is loaded). Pair with :meth:`release` when the request is over."""
        with self._lock:
            model = self._models.get(name)
            if model is None or not model.loaded_at(now):
                self._models.pop(name, None)
                self._make_room(now)
                model = self._models[name] = LoadedModel(name, now + load_seconds, keep_alive)
            model.in_use += 1
            model.keep_alive = keep_alive  # the latest request's keep_alive sets the timer, as in Ollama
            model.expires_at = math.inf
            return max(0.0, model.ready_at - now)

    def _make_room(self, now: float) -> None:
        """Forget the models unloaded by ``now``; past the bound, unload the idle one loaded longest ago."""
        if len(self._models) < MAX_LOADED_MODELS:
            return
        for gone in [name for name, model in self._models.items() if not model.loaded_at(now)]:
            del self._models[gone]
        if len(self._models) >= MAX_LOADED_MODELS:
            idle = next((name for name, model in self._models.items() if model.in_use == 0), None)
            if idle is not None:
                del self._models[idle]

    def release(self, name: str, now: float) -> None:
        """A request for ``name`` ended at ``now``: the last one starts the model's keep-alive timer."""
        with self._lock:
            model = self._models.get(name)
            if model is None or model.in_use == 0:
                return
            model.in_use -= 1
            if model.in_use == 0:
                model.expires_at = max(now, model.ready_at) + model.keep_alive

    def loaded(self, now: float) -> list[LoadedModel]:
        """The models loaded (or loading) at ``now``, in the order they were loaded."""
        with self._lock:
            return [model for model in self._models.values() if model.loaded_at(now)]

    def clear(self) -> None:
        with self._lock:
            self._models.clear()
