"""Scenarios: a backend's latency, faults and rate limits changing on a schedule in simulated time.

An adaptive router (LiteLLM's latency-based routing, Bifrost's adaptive balancing, P2C with PeakEWMA) is tested
against an upstream whose latency moves: it must pick the fast backend, notice a ramp, leave on a spike and come
back after the recovery. A :class:`Scenario` is a list of :class:`Phase` objects, each a span of simulated seconds
counted from when the scenario was set:

- ``step(at, ttft=0.5)``: from ``at`` on (until ``end`` if given), the value is set;
- ``ramp(start, end, itl=(0.02, 0.2))``: the value moves linearly from the first number to the second between
  ``start`` and ``end``, and holds the second after;
- ``spike(at, seconds, ttft=2.0)``: the value for ``seconds``, then back to what it was (the recovery);
- ``window(start, end, fault=Fault("rate_limit"), rpm=10)``: a fault, or rate limits of their own, active only in
  the span (latency values may be set in a window too).

``ttft``, ``itl`` and ``prefill_per_token`` are set absolutely (a number, or percentiles as a setting takes them;
a ramp takes two numbers); ``factor`` multiplies all three (a ramp's too: ``factor=(1, 10)``). Where phases
overlap, the one declared later wins for each value. A phase is aimed by ``model``, ``route`` (a route
template), ``key`` (an API key the request presents) and ``replica`` (a fleet's replica number), as faults are.
A sequence's value is read when its step is planned: a stream running through a spike slows down in it.

Phases with latency need the sequence scheduler (``scheduler = "sequence"``, the default: ``ttft``, ``itl``,
``prefill_per_token``); faults and limits apply with either. A base ``itl`` of 0 (every token at once) stays 0.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

from .faults import Fault, FaultError
from .percentiles import Percentiles
from .ratelimit import RateLimiter
from .setting_checks import latency as latency_setting

__all__ = ["LATENCY_NAMES", "PHASE_SHAPES", "LatencyShape", "Phase", "Scenario", "ScenarioError",
           "phase_from_mapping", "ramp", "spike", "step", "window"]

#: The latency values a phase sets.
LATENCY_NAMES = ("ttft", "itl", "prefill_per_token")
#: How a phase's span and values are read.
PHASE_SHAPES = ("step", "ramp", "spike", "window")
#: Phases in one scenario at most (every request reads them).
MAX_PHASES = 256

Value = float | tuple[float, float]


class ScenarioError(ValueError):
    """A scenario or phase was given wrongly; the message names the part."""


@dataclass(frozen=True)
class Phase:
    """One span of a scenario: when (``start``, ``end`` in simulated seconds from the scenario's start; ``end``
    None: for ever), what changes, and which requests it is aimed at (see the module's docstring)."""

    shape: str
    start: float
    end: float | None = None
    ttft: Value | None = None
    itl: Value | None = None
    prefill_per_token: Value | None = None
    factor: Value | None = None
    fault: Fault | None = None
    rpm: int | None = None
    tpm: int | None = None
    model: str | None = None
    route: str | None = None
    key: str | None = None
    replica: int | None = None

    def __post_init__(self) -> None:
        self._check()

    def _check(self) -> None:
        def bad(message: str) -> ScenarioError:
            return ScenarioError(f"{self.shape} phase at {self.start:g} s: {message}")

        if self.shape not in PHASE_SHAPES:
            raise ScenarioError(f"unknown phase shape {self.shape!r}; accepted: {', '.join(PHASE_SHAPES)}")
        if not _finite(self.start) or self.start < 0:
            raise bad("start must be seconds >= 0")
        if self.end is not None and (not _finite(self.end) or self.end <= self.start):
            raise bad(f"end ({self.end!r}) must be a number of seconds after start")
        if self.shape in ("ramp", "spike", "window") and self.end is None:
            raise bad("needs an end (a ramp's end, a spike's seconds, a window's end)")
        for name in (*LATENCY_NAMES, "factor"):
            value = getattr(self, name)
            if value is None:
                continue
            if self.shape == "ramp":
                if not (isinstance(value, tuple) and len(value) == 2 and all(_number(v) and v >= 0 for v in value)):
                    raise bad(f"a ramp's {name} is two numbers >= 0, from and to (got {value!r})")
            elif isinstance(value, tuple) or not isinstance(value, float):
                raise bad(f"{name} is one value (only a ramp takes two)")
            elif name == "factor" and value <= 0:
                raise bad("factor must be > 0")
        for name in ("rpm", "tpm"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise bad(f"{name} must be an integer >= 1")
        if self.replica is not None and (not isinstance(self.replica, int) or self.replica < 1):
            raise bad("replica must be an integer >= 1")
        if (self.fault is not None or self.rpm is not None or self.tpm is not None) and self.shape == "ramp":
            raise bad("a ramp moves latency; faults and rate limits are set in a window, step or spike")
        if not self.changes:
            raise bad("changes nothing: give ttft, itl, prefill_per_token, factor, a fault, rpm or tpm")

    @property
    def changes(self) -> bool:
        """Whether the phase sets anything."""
        return any(getattr(self, name) is not None for name in (*LATENCY_NAMES, "factor", "fault", "rpm", "tpm"))

    @property
    def shapes_latency(self) -> bool:
        return any(getattr(self, name) is not None for name in (*LATENCY_NAMES, "factor"))

    def active(self, t: float) -> bool:
        """Whether the phase acts at ``t`` (seconds from the scenario's start); a ramp holds its end value after."""
        if t < self.start:
            return False
        return self.shape == "ramp" or self.end is None or t < self.end

    def value(self, name: str, t: float) -> float | None:
        """The phase's ``name`` at ``t`` (None: the phase does not set it, or is not active then)."""
        value = getattr(self, name)
        if value is None or not self.active(t):
            return None
        if self.shape != "ramp":
            return value  # type: ignore[no-any-return]
        first, last = value
        assert self.end is not None
        share = min(1.0, (t - self.start) / (self.end - self.start))
        return float(first + (last - first) * share)

    def aims_at(self, model: str | None, route: str | None, keys: Callable[[], Sequence[str]],
                replica: int) -> bool:
        """Whether a request to ``route`` for ``model``, presenting ``keys``, on ``replica`` is aimed at."""
        return ((self.model is None or self.model == model) and (self.route is None or self.route == route)
                and (self.replica is None or self.replica == replica)
                and (self.key is None or self.key in keys()))

    def as_mapping(self) -> dict[str, Any]:
        """The phase as the control API and ``--config`` take it (``at`` for a step's or spike's start)."""
        out: dict[str, Any] = {"shape": self.shape, "start": self.start}
        if self.end is not None:
            out["end"] = self.end
        for item in fields(self)[3:]:
            value = getattr(self, item.name)
            if value is None:
                continue
            if item.name == "fault":
                value = {"kind": value.kind, **_fault_params(value)}
            elif isinstance(value, Percentiles):
                value = value.as_mapping()
            elif isinstance(value, tuple):
                value = list(value)
            out[item.name] = value
        return out


def _fault_params(fault: Fault) -> dict[str, Any]:
    default = Fault(fault.kind)
    return {item.name: getattr(fault, item.name) for item in fields(fault)[1:]
            if getattr(fault, item.name) != getattr(default, item.name)}


def _finite(value: Any) -> bool:
    return _number(value) and math.isfinite(value)


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _values(shape: str, given: Mapping[str, Any]) -> dict[str, Any]:
    """A phase's latency values as the :class:`Phase` keeps them: floats, percentiles, or (from, to) pairs."""
    out: dict[str, Any] = {}
    for name, value in given.items():
        if value is None:
            continue
        if name not in (*LATENCY_NAMES, "factor"):
            out[name] = value
        elif shape == "ramp" or isinstance(value, (tuple, list)):
            if not isinstance(value, (tuple, list)) or not all(_number(v) for v in value):
                raise ScenarioError(f"{shape} phase: {name} must be two numbers, from and to (got {value!r})")
            out[name] = tuple(float(v) for v in value)
        elif name == "factor":
            if not _finite(value):
                raise ScenarioError(f"{shape} phase: factor must be a number (got {value!r})")
            out[name] = float(value)
        else:
            try:
                out[name] = latency_setting(name, value)
            except ValueError as error:
                raise ScenarioError(f"{shape} phase: {error}") from None
    return out


def step(at: float, *, end: float | None = None, **changes: Any) -> Phase:
    """From ``at`` on (until ``end``), the values given: ``step(10, ttft=0.5)``."""
    return Phase("step", at, end, **_values("step", changes))


def ramp(start: float, end: float, **changes: Any) -> Phase:
    """Each value moves linearly from its first number to its second between ``start`` and ``end``, and holds
    the second after: ``ramp(20, 30, itl=(0.02, 0.2))``."""
    return Phase("ramp", start, end, **_values("ramp", changes))


def spike(at: float, seconds: float, **changes: Any) -> Phase:
    """The values for ``seconds`` from ``at``, then back: ``spike(40, 5, ttft=2.0)``."""
    return Phase("spike", at, at + seconds, **_values("spike", changes))


def window(start: float, end: float, **changes: Any) -> Phase:
    """A fault or rate limits (or latency) active from ``start`` to ``end``:
    ``window(50, 60, fault=Fault("rate_limit", retry_after=1))``, ``window(0, 30, rpm=5)``."""
    return Phase("window", start, end, **_values("window", changes))


_PHASE_KEYS = {"shape", "at", "start", "end", "seconds", *LATENCY_NAMES, "factor", "fault", "rpm", "tpm", "model",
               "route", "key", "replica"}


def phase_from_mapping(given: Mapping[str, Any]) -> Phase:
    """A phase from its JSON or TOML form: ``{"shape": "spike", "at": 40, "seconds": 5, "ttft": 2.0}``;
    ``fault`` is ``{"kind": ..., parameters...}``. Raises :class:`ScenarioError` naming what is wrong."""
    if not isinstance(given, Mapping):
        raise ScenarioError(f"a phase is a table (an object), not {type(given).__name__}")
    unknown = sorted(set(given) - _PHASE_KEYS)
    if unknown:
        raise ScenarioError(f"phase: unknown key {unknown[0]!r}; accepted: {', '.join(sorted(_PHASE_KEYS))}")
    shape = given.get("shape", "step")
    start = given.get("at", given.get("start"))
    if not _number(start):
        raise ScenarioError(f"{shape} phase: 'at' (or 'start') must be seconds (got {start!r})")
    end = given.get("end")
    if given.get("seconds") is not None:
        if not _number(given["seconds"]) or given["seconds"] <= 0:
            raise ScenarioError(f"{shape} phase: 'seconds' must be a number > 0")
        end = start + given["seconds"]
    changes = {name: given[name] for name in (*LATENCY_NAMES, "factor", "rpm", "tpm", "model", "route", "key",
                                             "replica") if name in given}
    fault = given.get("fault")
    if fault is not None:
        if isinstance(fault, str):
            fault = {"kind": fault}
        if not isinstance(fault, Mapping) or "kind" not in fault:
            raise ScenarioError(f"{shape} phase: 'fault' is a kind or a table with 'kind' and its parameters")
        try:
            changes["fault"] = Fault.build(fault["kind"], **{k: v for k, v in fault.items() if k != "kind"})
        except (FaultError, TypeError) as error:
            raise ScenarioError(f"{shape} phase: {error}") from None
    try:
        return Phase(str(shape), float(start), None if end is None else float(end), **_values(str(shape), changes))
    except TypeError as error:
        raise ScenarioError(f"{shape} phase: {error}") from None


class LatencyShape:
    """The latency phases aimed at one request, read on the engine's clock (``origin``: the scenario's start)."""

    __slots__ = ("_origin", "_phases")

    def __init__(self, phases: tuple[Phase, ...], origin: float) -> None:
        self._phases = phases
        self._origin = origin

    def at(self, name: str, now: float, base: float) -> float:
        """``name``'s value at engine time ``now``: the last active phase's that sets it, else ``base``;
        times the last active ``factor``."""
        t = now - self._origin
        value: float = base
        factor = None
        for phase in self._phases:
            set_here = phase.value(name, t)
            if set_here is not None:
                value = set_here
            scale = phase.value("factor", t)
            if scale is not None:
                factor = scale
        return value if factor is None else _scaled(value, factor)


def _short(value: Any) -> str:
    if isinstance(value, Percentiles):
        return "/".join(f"{seconds:g}" for _, seconds in value.points)
    if isinstance(value, tuple):
        return "->".join(f"{item:g}" for item in value)
    return f"{value:g}"


def _scaled(value: float, factor: float) -> float:
    if isinstance(value, Percentiles):
        return Percentiles(tuple((p, seconds * factor) for p, seconds in value.points))
    return value * factor


@dataclass
class Scenario:
    """A backend's phases, started at engine time ``origin``, with each limiting phase's own rate limiter."""

    phases: tuple[Phase, ...]
    origin: float
    limiters: dict[int, RateLimiter] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if len(self.phases) > MAX_PHASES:
            raise ScenarioError(f"a scenario has at most {MAX_PHASES} phases (got {len(self.phases)})")
        for index, phase in enumerate(self.phases):
            if phase.rpm is not None or phase.tpm is not None:
                self.limiters[index] = RateLimiter(phase.rpm, phase.tpm)

    @property
    def shapes_latency(self) -> bool:
        return any(phase.shapes_latency for phase in self.phases)

    def latency_for(self, model: str | None, route: str | None, keys: Callable[[], Sequence[str]],
                    replica: int) -> LatencyShape | None:
        """The latency phases aimed at a request (None: none is)."""
        aimed = tuple(phase for phase in self.phases
                      if phase.shapes_latency and phase.aims_at(model, route, keys, replica))
        return LatencyShape(aimed, self.origin) if aimed else None

    def limiters_for(self, now: float, model: str | None, route: str | None, keys: Callable[[], Sequence[str]],
                     replica: int) -> list[RateLimiter]:
        """The rate limiters of the phases active at engine time ``now`` and aimed at the request."""
        t = now - self.origin
        return [self.limiters[index] for index in self.limiters
                if self.phases[index].active(t) and self.phases[index].aims_at(model, route, keys, replica)]

    def faults(self) -> Iterable[tuple[Fault, float, float]]:
        """Each phase's fault, aimed as the phase is, with its span in engine time."""
        for phase in self.phases:
            if phase.fault is None:
                continue
            aim = {name: getattr(phase, name) for name in ("model", "route", "key", "replica")
                   if getattr(phase, name) is not None and getattr(phase.fault, name) is None}
            end = math.inf if phase.end is None else self.origin + phase.end
            yield replace(phase.fault, **aim), self.origin + phase.start, end

    def spans(self) -> list[tuple[str, float, float]]:
        """Each phase as (a short name, its start, its end) in engine time, for the SVG timeline."""
        out = []
        for phase in self.phases:
            what = ", ".join(f"{name}={_short(getattr(phase, name))}"
                             for name in (*LATENCY_NAMES, "factor", "rpm", "tpm") if getattr(phase, name) is not None)
            if phase.fault is not None:
                what = ", ".join(filter(None, (what, phase.fault.kind)))
            end = math.inf if phase.end is None or phase.shape == "ramp" else self.origin + phase.end
            out.append((f"{phase.shape} {what}", self.origin + phase.start, end))
        return out

    def describe(self, now: float) -> dict[str, Any]:
        """The scenario as the control API and the live page show it: its phases, which are active, and the
        seconds since it started."""
        t = now - self.origin
        return {"elapsed": round(t, 6), "phases": [{**phase.as_mapping(), "active": phase.active(t)}
                                                   for phase in self.phases]}
