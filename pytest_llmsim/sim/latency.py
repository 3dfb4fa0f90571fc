"""The cost model: how long prefill and decode steps take, in simulated seconds.

For a lone request with no jitter the numbers come out exactly as set::

    TTFT = ttft + prefill_per_token * uncached_prompt_tokens
    gap between tokens = itl

Under load every step (prefill included: it shares the accelerator) is
stretched by the load multiplier, which grows linearly with the number of
running sequences, from 1 for a lone sequence to ``load_factor`` for a full
batch::

    load(running) = 1 + (load_factor - 1) * (running - 1) / (max_batch_size - 1)

Jitter multiplies each interval by ``1 + jitter * N(0, 1)``, clamped to
``[max(0, 1 - 3 * jitter), 1 + 3 * jitter]``, drawn from a seeded generator so
a run can be replayed. A latency given by its percentiles
(:class:`~.percentiles.Percentiles`) is drawn from them instead, from the same
generator: ``ttft`` and ``prefill_per_token`` once per request, ``itl`` per
step; the load multiplier applies to what was drawn, as to a set value.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator

from .config import SimConfig
from .percentiles import Percentiles
from .scenario import LatencyShape

__all__ = ["LatencyModel"]


_TWO_PI = 2.0 * math.pi  # random.gauss's TWOPI


class LatencyModel:
    """Turns a :class:`SimConfig` into step durations."""

    __slots__ = ("_config", "_high", "_low", "constant_step", "rng")

    def __init__(self, config: SimConfig, rng: random.Random) -> None:
        self._config = config
        self.rng = rng
        self._low = max(0.0, 1.0 - 3.0 * config.jitter)
        self._high = 1.0 + 3.0 * config.jitter
        # Without jitter or load the decode step is a constant: the engine's fast path.
        self.constant_step: float | None = (
            config.itl if config.jitter == 0.0 and config.load_factor == 1.0
            and not isinstance(config.itl, Percentiles) else None)

    def load_multiplier(self, running: int) -> float:
        """Step-time multiplier with ``running`` sequences in the batch."""
        config = self._config
        if config.max_batch_size <= 1 or running <= 1:
            return 1.0
        busy = min(running, config.max_batch_size) - 1
        return 1.0 + (config.load_factor - 1.0) * busy / (config.max_batch_size - 1)

    def prefill_time(self, uncached_tokens: int, running: int, scale: float = 1.0,
                     shape: LatencyShape | None = None, now: float = 0.0) -> float:
        """Time from admission (at ``now``) to the first token; ``shape``: a scenario's phases for it."""
        config = self._config
        ttft, per_token = config.ttft, config.prefill_per_token
        if shape is not None:
            ttft, per_token = shape.at("ttft", now, ttft), shape.at("prefill_per_token", now, per_token)
        base = self._drawn(ttft) + self._drawn(per_token) * uncached_tokens
        return self._jittered(base * self.load_multiplier(running) * scale)

    def decode_step(self, running: int, scale: float = 1.0, shape: LatencyShape | None = None,
                    now: float = 0.0) -> float:
        """Time from one token of a sequence (emitted at ``now``) to its next."""
        itl = self._config.itl if shape is None else shape.at("itl", now, self._config.itl)
        return self._jittered(self._drawn(itl) * self.load_multiplier(running) * scale)

    def _drawn(self, latency: float) -> float:
        """A set latency, or one drawn from its percentiles."""
        return latency.draw(self.rng.random()) if isinstance(latency, Percentiles) else latency

    def jitter_factors(self) -> Iterator[float]:
        """The factors jittered values are multiplied by, drawn one per value in turn as :meth:`_jittered` draws
        them (``min(high, max(low, 1 + jitter * N(0, 1)))``), for a loop that jitters millions of steps (a
        long answer's prediction): ``random.gauss``'s Box-Muller inlined, keeping the generator's spare normal
        (``gauss_next``) as gauss does, so draws here and through gauss interleave. Only for a jitter above 0."""
        rng, jitter, low, high = self.rng, self._config.jitter, self._low, self._high
        uniform = rng.random
        while True:
            normal = rng.gauss_next  # type: ignore[attr-defined]  # (random.Random's, not in its stubs)
            rng.gauss_next = None  # type: ignore[attr-defined]
            if normal is None:
                angle = uniform() * _TWO_PI
                radius = math.sqrt(-2.0 * math.log(1.0 - uniform()))
                normal = math.cos(angle) * radius
                rng.gauss_next = math.sin(angle) * radius  # type: ignore[attr-defined]
            factor = 1.0 + jitter * normal
            factor = factor if factor > low else low  # min(high, max(low, factor)), without two calls
            yield factor if factor < high else high

    def _jittered(self, value: float) -> float:
        if self._config.jitter == 0.0 or value == 0.0:
            return value
        factor = 1.0 + self._config.jitter * self.rng.gauss(0.0, 1.0)
        return value * min(self._high, max(self._low, factor))
