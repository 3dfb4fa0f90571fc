"""Fault injection: what goes wrong, and for which requests.

A :class:`Fault` is a *kind* (what happens) plus conditions (when). The
:class:`FaultInjector` picks at most one fault per request, deterministically:
the same seed and the same request order give the same faults.

Selection, for the request that is the backend's ``n``-th (1-based):

1. a request carrying the header ``x-llmsim-fault: <kind>`` gets that kind,
   with the parameters of the first added fault of that kind, else defaults;
2. otherwise the first added fault whose conditions all hold: ``nth``
   (``n`` equals it), ``times`` (the fault's first N matches only), ``rate``
   (a seeded draw per request index), ``prompt`` (a regex found in the
   prompt text), ``model`` (the request's model), and ``header_only`` faults
   never match here; a fault with a ``route`` applies only to requests to that
   route template (``/v1/messages``; ``/health``, ``/v1/models`` and other
   routes that generate nothing get only HTTP errors, drops, stalls and
   empty answers, and count their own hits for ``nth``/``times``/``rate``).
"""

from __future__ import annotations

import hashlib
import threading
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from werkzeug.datastructures import Headers

from .fault_effects import EFFECTS, Fail, FaultEffect
from .patterns import Pattern, PatternError, compile_pattern
from .request import SimError

__all__ = ["FAULT_HEADER", "FAULT_KINDS", "GENERATION_FAULT_KINDS", "Fault", "FaultError", "FaultInjector",
           "FaultState", "declare_routes_without_generation", "fault_kinds"]

FAULT_HEADER = "X-Llmsim-Fault"  # as werkzeug spells header names
# Request headers: werkzeug's case-insensitive Headers, or a plain mapping (tests).
HeaderLookup = Headers | Mapping[str, str]

#: Every fault kind, in the documented order.
FAULT_KINDS: tuple[str, ...] = tuple(EFFECTS)
#: The kinds that act on a generation request: all but those that act only on a session's handshake.
GENERATION_FAULT_KINDS: tuple[str, ...] = tuple(kind for kind, effect in EFFECTS.items() if not effect.handshake_only)
_WHEN_PARAMS = ("times", "nth", "rate", "prompt", "model", "key", "replica", "header_only", "route")


def fault_kinds() -> dict[str, dict[str, Any]]:
    """Each kind, in the documented order, with what it takes: ``{"rate_limit": {"params": [...],
    "when": [...], "types": {"retry_after": "number", ...}}}`` (``when``: the conditions every kind takes;
    ``types``: each name's JSON type, from :class:`Fault`'s fields, so a form needs no list of its own)."""
    types = _param_types()
    return {kind: {"params": list(effect.params), "when": list(_WHEN_PARAMS),
                   "types": {name: types[name] for name in (*effect.params, *_WHEN_PARAMS)}}
            for kind, effect in EFFECTS.items()}


def _param_types() -> dict[str, str]:
    """Each of :class:`Fault`'s fields' JSON type: ``integer``, ``number``, ``boolean`` or ``string``."""
    names = {int: "integer", float: "number", bool: "boolean", str: "string"}
    out = {}
    for name, hint in typing.get_type_hints(Fault).items():
        kinds = [arg for arg in typing.get_args(hint) if arg is not type(None)] or [hint]
        out[name] = names.get(kinds[0], "string")
    return out

# Route templates that generate nothing (health checks, model discovery): the
# server's route table declares them, so only the kinds that apply there are
# accepted on them (see :func:`declare_routes_without_generation`).
_ROUTES_WITHOUT_GENERATION: set[str] = set()


def declare_routes_without_generation(templates: Iterable[str]) -> None:
    """Tell fault checking which route templates generate nothing (the server's route table does)."""
    _ROUTES_WITHOUT_GENERATION.update(templates)


def kinds_for_routes_without_generation() -> tuple[str, ...]:
    """The kinds that apply on a route that generates nothing."""
    return tuple(kind for kind, effect in EFFECTS.items() if effect.on_routes_without_generation)


class FaultError(ValueError):
    """A fault was specified wrongly; the message says which part."""


@dataclass(frozen=True)
class Fault:
    """One fault: ``kind`` plus its parameters and the conditions it applies under.

    What: ``status``/``message``/``retry_after`` (HTTP errors; ``retry_after``
    in wall seconds, sent as ``Retry-After`` and ``retry-after-ms``),
    ``after_tokens`` (mid-stream kinds and ``stall``), ``seconds`` (``stall``,
    wall seconds: client timeouts are wall-clock; ``expire_session``: the session's length), ``factor``
    (``slow``), ``side`` (``content_filter``: ``prompt`` or ``completion``), ``mode`` (``bad_encoding``: ``lie``
    or ``truncate``), ``breaks`` (``bad_tool_call``: ``arguments``, ``schema``, ``name`` or ``id``); ``status``
    is the close code for ``close_session``.
    When: ``times``, ``nth``, ``rate``, ``prompt``, ``model``, ``key`` (the API key a generation request
    presents, in any of the places the APIs take one), ``replica`` (only replica N of ``llmsim serve --replicas``;
    a lone backend is replica 1), ``header_only``.
    """

    kind: str
    status: int | None = None
    message: str | None = None
    retry_after: float | None = None
    after_tokens: int = 0
    seconds: float = 1.0
    factor: float = 2.0
    side: str = "prompt"
    mode: str = "lie"
    breaks: str = "arguments"
    times: int | None = None
    nth: int | None = None
    rate: float | None = None
    prompt: str | None = None
    model: str | None = None
    key: str | None = None
    replica: int | None = None
    header_only: bool = False
    route: str | None = None

    @classmethod
    def build(cls, kind: str, **params: Any) -> Fault:
        """Validate ``kind`` and ``params``; raises :class:`FaultError` naming the culprit."""
        if kind not in EFFECTS:  # every kind with an effect (the built-in FAULT_KINDS and any registered)
            raise FaultError(f"unknown fault kind {kind!r}; accepted: {', '.join(EFFECTS)}")
        accepted = (*EFFECTS[kind].params, *_WHEN_PARAMS)
        unknown = sorted(set(params) - set(accepted))
        if unknown:
            raise FaultError(f"fault {kind!r}: unknown parameter {unknown[0]!r}; accepted: {', '.join(accepted)}")
        fault = cls(kind, **params)
        fault._check()
        return fault

    def _check(self) -> None:
        def bad(name: str, expected: str) -> FaultError:
            return FaultError(f"fault {self.kind!r}: invalid {name}={getattr(self, name)!r} ({expected})")

        problem = self.effect.check(self)
        if problem is not None:
            raise bad(*problem)
        for name in ("after_tokens", "times", "nth", "replica"):
            value = getattr(self, name)
            low = 0 if name == "after_tokens" else 1
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < low):
                raise bad(name, f"expected an integer >= {low}")
        if self.key is not None and (not isinstance(self.key, str) or not self.key):
            raise bad("key", "expected an API key (a non-empty string)")
        if self.rate is not None and not 0.0 <= self.rate <= 1.0:
            raise bad("rate", "expected a number from 0 to 1")
        if self.retry_after is not None and self.retry_after < 0:
            raise bad("retry_after", "expected seconds >= 0")
        if self.seconds < 0:
            raise bad("seconds", "expected seconds >= 0")
        if self.factor <= 0:
            raise bad("factor", "expected a number > 0")
        if self.route is not None:
            if not isinstance(self.route, str) or not self.route.startswith("/"):
                raise bad("route", "expected a route template such as '/health' or '/v1/models/{id}'")
            if self.route in _ROUTES_WITHOUT_GENERATION and not self.effect.on_routes_without_generation:
                kinds = ", ".join(kinds_for_routes_without_generation())
                raise bad("route", f"{self.route} generates nothing; there only {kinds} apply")
        if self.effect.handshake_only and (self.prompt is not None or self.model is not None):
            raise bad("prompt" if self.prompt is not None else "model",
                      "a handshake has no prompt or model: aim it by route, key, replica, nth, times or rate")
        if self.prompt is not None:
            try:
                compile_pattern(self.prompt)
            except PatternError as error:
                raise bad("prompt", str(error)) from None

    @property
    def effect(self) -> FaultEffect:
        """What this fault's kind does to an answer (see :mod:`pytest_llmsim.sim.fault_effects`)."""
        return EFFECTS[self.kind]

    def error(self) -> SimError:
        """The error answer of an HTTP-error fault (the answer it gives before any generation)."""
        action = self.effect.on_request(self)
        if not isinstance(action, Fail):
            raise FaultError(f"fault {self.kind!r} answers with no HTTP error")
        return action.error


@dataclass
class _Armed:
    fault: Fault
    matched: int = 0
    pattern: Pattern | None = field(default=None)
    window: tuple[float, float] | None = None  # a scenario's: active from..until, in engine time
    owner: object = None  # what armed it (a scenario), to take its faults out together


@dataclass(frozen=True)
class FaultState:
    """An added fault, how many requests it has hit, and whether it is spent (its ``times`` all used)."""

    fault: Fault
    hits: int
    spent: bool


class FaultInjector:
    """The faults added to one backend, and the choice of one per request."""

    def __init__(self, seed: int, replica: int = 1, clock: Callable[[], float] = lambda: 0.0) -> None:
        self._lock = threading.Lock()
        self._clock = clock  # the engine's time, for faults armed for a span of it (a scenario's)
        self._armed: list[_Armed] = []
        self._route_hits: dict[str, int] = {}
        self.seed = seed
        self.replica = replica  # which replica of a fleet this backend is: faults aimed at another skip it
        self.injected: dict[str, int] = {}

    def add(self, fault: Fault, window: tuple[float, float] | None = None, owner: object = None) -> Fault:
        """Arm ``fault`` (for ``window``, a span of engine time, if given; ``owner``: what
        :meth:`remove_owned` takes out with it)."""
        with self._lock:
            pattern = compile_pattern(fault.prompt) if fault.prompt is not None else None
            self._armed.append(_Armed(fault, pattern=pattern, window=window, owner=owner))
        return fault

    def remove_owned(self, owner: object) -> None:
        """Take out the faults ``owner`` armed (a scenario replaced or cleared)."""
        with self._lock:
            self._armed = [armed for armed in self._armed if armed.owner is not owner]

    def _out_of_window(self, armed: _Armed) -> bool:
        window = armed.window
        if window is None:
            return False
        now = self._clock()
        return not window[0] <= now < window[1]

    def clear(self) -> None:
        """Disarm the faults added one by one (a scenario's stay with it)."""
        with self._lock:
            self._armed = [armed for armed in self._armed if armed.owner is not None]

    @property
    def faults(self) -> list[Fault]:
        """The faults still armed (a spent ``times`` fault is no longer tried), in the order they are tried."""
        return [state.fault for state in self.states() if not state.spent]

    def states(self) -> list[FaultState]:
        """Every fault added since the last clear, with its hits and whether it is spent."""
        with self._lock:
            return [FaultState(armed.fault, armed.matched, armed.fault.times is not None
                               and armed.matched >= armed.fault.times) for armed in self._armed]

    def select(self, n: int, headers: HeaderLookup, model: str | None,
               prompt_text: Callable[[], str], route: str | None = None,
               keys: Callable[[], list[str]] = list) -> Fault | None:
        """The fault generation request number ``n`` (on route template ``route``) gets, if any (and count it).
        ``keys`` gives the API keys the request presents (asked only of a fault aimed by ``key``)."""
        if not self._armed and not headers.get(FAULT_HEADER):  # the usual case: no lock to take
            return None
        with self._lock:
            chosen = self._choose(n, headers, model, prompt_text, route, keys)
            if chosen is not None:
                self.injected[chosen.kind] = self.injected.get(chosen.kind, 0) + 1
            return chosen

    def targets(self, route: str) -> bool:
        """Whether an armed fault names ``route`` (requests to it are then logged and counted)."""
        with self._lock:
            return any(armed.fault.route == route for armed in self._armed)

    def select_route(self, route: str) -> Fault | None:
        """The fault a request to a route that generates nothing gets: only faults naming the route,
        their ``nth``/``times``/``rate`` counting that route's hits."""
        with self._lock:
            hit = self._route_hits[route] = self._route_hits.get(route, 0) + 1
            return self._first_by_hit(hit, lambda fault: fault.route == route)

    def select_handshake(self, route: str, headers: HeaderLookup, key: str | None) -> Fault | None:
        """The fault a session's upgrade request to ``route`` gets: one of the kinds that act on a handshake,
        named by ``x-llmsim-fault`` or armed (aimed by route, key, replica; ``nth``/``times``/``rate`` counting
        that route's handshakes); ``key`` is the credential the handshake presented."""
        aimed = headers.get(FAULT_HEADER)
        if not self._armed and not aimed:
            return None
        with self._lock:
            if aimed and aimed.strip() in EFFECTS and EFFECTS[aimed.strip()].handshake_only:
                chosen = self._named(aimed.strip())
                self.injected[chosen.kind] = self.injected.get(chosen.kind, 0) + 1
                return chosen
            hit = self._route_hits[route] = self._route_hits.get(route, 0) + 1
            return self._first_by_hit(hit, lambda fault: (fault.effect.handshake_only and not fault.header_only
                                                          and fault.route in (None, route)
                                                          and fault.key in (None, key)))

    def _named(self, kind: str) -> Fault:
        """The fault an ``x-llmsim-fault`` header names: the first armed one of its kind's parameters (else the
        kind's defaults), without its conditions."""
        template = next((armed.fault for armed in self._armed if armed.fault.kind == kind), None)
        return replace(template, times=None, nth=None, rate=None) if template else Fault(kind)

    def _first_by_hit(self, hit: int, aimed: Callable[[Fault], bool]) -> Fault | None:
        """The first armed fault ``aimed`` takes whose ``times``, ``replica``, ``nth`` and ``rate`` give it hit
        number ``hit`` (of a route): counted as matched and injected (the lock held)."""
        for index, armed in enumerate(self._armed):
            fault = armed.fault
            if not aimed(fault) or (fault.times is not None and armed.matched >= fault.times):
                continue
            if fault.replica not in (None, self.replica) or fault.nth not in (None, hit):
                continue
            if self._out_of_window(armed):
                continue
            if fault.rate is not None and self._draw(index, hit) >= fault.rate:
                continue
            armed.matched += 1
            self.injected[fault.kind] = self.injected.get(fault.kind, 0) + 1
            return fault
        return None

    def _choose(self, n: int, headers: HeaderLookup, model: str | None,
                prompt_text: Callable[[], str], route: str | None, keys: Callable[[], list[str]]) -> Fault | None:
        aimed = headers.get(FAULT_HEADER)
        if aimed:
            kind = aimed.strip()
            if kind not in EFFECTS:
                raise SimError(400, f"Unknown fault kind in {FAULT_HEADER}: {kind!r}; accepted: "
                                    f"{', '.join(EFFECTS)}.", param=None, code="unknown_fault")
            return self._named(kind)
        if not self._armed:
            return None
        for index, armed in enumerate(self._armed):
            fault = armed.fault
            if fault.header_only or (fault.times is not None and armed.matched >= fault.times):
                continue
            if fault.effect.handshake_only:
                continue
            if fault.route is not None and fault.route != route:
                continue
            if fault.nth is not None and n != fault.nth:
                continue
            if fault.model is not None and model != fault.model:
                continue
            if fault.key is not None and fault.key not in keys():
                continue
            if fault.replica is not None and fault.replica != self.replica:
                continue
            if armed.pattern is not None and not armed.pattern.search(prompt_text()):
                continue
            if self._out_of_window(armed):
                continue
            if fault.rate is not None and self._draw(index, n) >= fault.rate:
                continue
            armed.matched += 1
            return fault
        return None

    def _draw(self, index: int, n: int) -> float:
        """A uniform number in [0, 1) fixed by (seed, fault, request number)."""
        digest = hashlib.blake2b(f"{self.seed}:{index}:{n}".encode(), digest_size=8).digest()
        return int.from_bytes(digest, "big") / 2**64
