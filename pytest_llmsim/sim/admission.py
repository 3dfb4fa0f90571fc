"""Whether a request may start, and what is done to it: its API key, its number and fault, the backend's
capacity and the rate limits (the backend's and its key's)."""

from __future__ import annotations

import itertools
from collections.abc import Callable

from .config import SimConfig
from .faults import Fault, FaultInjector, HeaderLookup
from .ratelimit import KeyLimiters, RateLimiter
from .request import GenerationRequest, RateLimitStatus
from .request_limits import charged_tokens, check_capacity, queue_full
from .runtime import Runtime
from .scenario import Phase, Scenario, ScenarioError
from .secrets import accepted_key, presented_credentials

__all__ = ["Admission"]


class Admission:
    """One backend's door: the checks a request passes before the engine sees it (see :meth:`admit`)."""

    def __init__(self, config: SimConfig, runtime: Runtime, replica: int = 1) -> None:
        self.runtime = runtime
        self.faults = FaultInjector(config.seed, replica, runtime.virtual_now)
        self.scenario: Scenario | None = None
        self._limiter = RateLimiter(config.rpm, config.tpm)
        self._key_limiters = KeyLimiters()
        self._request_numbers = itertools.count(1)

    def reset(self, config: SimConfig) -> None:
        """No faults, no scenario, fresh limits, numbering from 1 again."""
        self.faults = FaultInjector(config.seed, self.faults.replica, self.runtime.virtual_now)
        self.scenario = None
        self._limiter = RateLimiter(config.rpm, config.tpm)
        self._key_limiters = KeyLimiters()
        self._request_numbers = itertools.count(1)

    def apply(self, old: SimConfig, new: SimConfig) -> None:
        """Settings ``new`` from now on: a changed limit starts afresh."""
        if (new.rpm, new.tpm) != (old.rpm, old.tpm):
            self._limiter = RateLimiter(new.rpm, new.tpm)
        if new.api_keys != old.api_keys:
            self._key_limiters = KeyLimiters()
        self.faults.seed = new.seed

    @staticmethod
    def check_credentials(config: SimConfig, headers: HeaderLookup, query_string: str = "") -> str | None:
        """With ``required_api_key`` or ``api_keys`` set: the key the request presents, or a refusal
        (:func:`.secrets.accepted_key`). None when any key will do."""
        keys = [key for key, _, _ in config.api_keys]
        return accepted_key([*keys, config.required_api_key] if config.required_api_key else keys, headers,
                            query_string)

    def set_scenario(self, config: SimConfig, phases: tuple[Phase, ...]) -> Scenario | None:
        """Replace the scenario (its faults with it) by ``phases``, starting now; none: no scenario."""
        if config.scheduler != "sequence" and any(phase.shapes_latency for phase in phases):
            raise ScenarioError("latency phases shape the sequence scheduler's ttft, itl and prefill_per_token; "
                                f"with scheduler {config.scheduler!r} a scenario sets faults and rate limits only")
        scenario = Scenario(phases, self.runtime.virtual_now()) if phases else None
        if self.scenario is not None:
            self.faults.remove_owned(self.scenario)
        if scenario is not None:
            for fault, start, end in scenario.faults():
                self.faults.add(fault, (start, end), owner=scenario)
        self.scenario = scenario
        return scenario

    def count_request(self) -> int:
        """Number the arriving generation request (1-based), for ``nth`` and ``rate`` faults."""
        return next(self._request_numbers)

    def pick_fault(self, number: int, headers: HeaderLookup, request: GenerationRequest, route: str | None,
                   query_string: str, prompt_text: Callable[[], str]) -> Fault | None:
        """The fault that applies to request ``number``, if any (``prompt_text`` is read only when a fault
        matches on the prompt)."""

        def keys() -> list[str]:  # only read when a fault or phase is aimed by key
            return presented_credentials(headers, query_string)[0]

        scenario = self.scenario
        if scenario is not None:  # the phases aimed at this request
            replica = self.faults.replica
            request.latency_shape = scenario.latency_for(request.model, route, keys, replica)
            request.scenario_limiters = tuple(scenario.limiters_for(self.runtime.virtual_now(), request.model,
                                                                    route, keys, replica))
        return self.faults.select(number, headers, request.model, prompt_text, route, keys)

    def admit(self, config: SimConfig, request: GenerationRequest, prompts: list[list[int]],
              budgets: list[int]) -> RateLimitStatus | None:
        """Refuse a request the backend has no room for (its queue is full) or the rate limits do not let in
        (raises :class:`~.request.SimError`); else the limits' state after it, for the API's headers."""
        sequence_count = check_capacity(request, prompts, config)
        if not self.runtime.can_admit(sequence_count):
            raise queue_full(config, sequence_count)
        rate_limit = None
        runtime = self.runtime
        if self._limiter.active:
            rate_limit = self._limiter.admit(runtime.virtual_now(), charged_tokens(request, prompts, budgets),
                                             runtime.to_wall)
        key_limiter = self._key_limiters.get(request.credential, config.api_keys)
        if key_limiter is not None:  # the key's own limits: a throttled key does not hold back the others
            rate_limit = key_limiter.admit(runtime.virtual_now(), charged_tokens(request, prompts, budgets),
                                           runtime.to_wall)
        for limiter in request.scenario_limiters:  # a scenario's window of limits of its own
            rate_limit = limiter.admit(runtime.virtual_now(), charged_tokens(request, prompts, budgets),
                                       runtime.to_wall)
        return rate_limit
