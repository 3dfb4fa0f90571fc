"""Simulated rate limits: requests and tokens per minute, protocol-blind.

A sliding window of 60 simulated seconds. A request is charged its prompt
tokens plus its ``max_tokens`` (as OpenAI estimates it). Inside the limits the
request carries a :class:`RateLimitStatus`, which its API renders as headers
(OpenAI's ``x-ratelimit-*``, Anthropic's ``anthropic-ratelimit-*``); past them
it gets a 429 whose ``Retry-After`` is the time until enough of the window has
expired, converted to wall seconds by the speed factor.
"""

from __future__ import annotations

import math
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from .request import RateLimitStatus, SimError

__all__ = ["KeyLimiters", "RateLimiter", "format_duration", "openai_rate_limit_headers"]

WINDOW = 60.0


def format_duration(seconds: float) -> str:
    """OpenAI's reset format: ``20ms``, ``1.5s``, ``6m0s``."""
    if seconds < 1.0:
        return f"{max(0, round(seconds * 1000))}ms"
    if seconds < 60.0:
        return f"{seconds:.3g}s"
    minutes, rest = divmod(seconds, 60.0)
    return f"{int(minutes)}m{rest:.0f}s"


@dataclass(frozen=True)
class _Limits:
    rpm: int | None
    tpm: int | None


class RateLimiter:
    """Counts what each window admitted; thread-safe."""

    def __init__(self, rpm: int | None, tpm: int | None) -> None:
        self.limits = _Limits(rpm, tpm)
        self._lock = threading.Lock()
        self._admitted: deque[tuple[float, int]] = deque()  # (simulated time, tokens charged)

    @property
    def active(self) -> bool:
        return self.limits.rpm is not None or self.limits.tpm is not None

    def admit(self, now: float, tokens: int, to_wall: Callable[[float], float]) -> RateLimitStatus:
        """Charge a request at simulated time ``now``; the limits' state, or a 429 ``SimError``."""
        rpm, tpm = self.limits.rpm, self.limits.tpm
        with self._lock:
            window = self._admitted
            while window and window[0][0] <= now - WINDOW:
                window.popleft()
            used_tokens = sum(charged for _, charged in window)
            wait = 0.0
            if rpm is not None and len(window) + 1 > rpm:
                wait = max(wait, window[len(window) - rpm][0] + WINDOW - now)
            if tpm is not None and used_tokens + tokens > tpm:
                wait = max(wait, self._token_wait(now, used_tokens + tokens - tpm))
            if wait > 0 or (tpm is not None and tokens > tpm):
                which = "requests" if rpm is not None and len(window) + 1 > rpm else "tokens"
                wall = to_wall(wait)
                raise SimError(429, f"Rate limit reached for {which} per minute (simulated: "
                                    f"rpm={rpm}, tpm={tpm}). Please try again in {format_duration(wall)}.",
                               type=which, code="rate_limit_exceeded",
                               headers={"Retry-After": str(max(1, math.ceil(wall))),
                                        "retry-after-ms": str(max(1, math.ceil(wall * 1000)))},
                               rate_limit=self._status(now, len(window), used_tokens, to_wall))
            window.append((now, tokens))
            return self._status(now, len(window), used_tokens + tokens, to_wall)

    def _token_wait(self, now: float, excess: int) -> float:
        freed = 0
        for when, charged in self._admitted:
            freed += charged
            if freed >= excess:
                return when + WINDOW - now
        return WINDOW

    def _status(self, now: float, requests: int, tokens: int,
                to_wall: Callable[[float], float]) -> RateLimitStatus:
        rpm, tpm = self.limits.rpm, self.limits.tpm
        reset = to_wall(self._admitted[0][0] + WINDOW - now) if self._admitted else 0.0
        return RateLimitStatus(rpm, tpm, max(0, (rpm or 0) - requests), max(0, (tpm or 0) - tokens), reset)


def openai_rate_limit_headers(status: RateLimitStatus) -> dict[str, str]:
    """OpenAI's ``x-ratelimit-*`` headers (resets as ``20ms``, ``1.5s``, ``6m0s``)."""
    headers: dict[str, str] = {}
    if status.rpm is not None:
        headers["x-ratelimit-limit-requests"] = str(status.rpm)
        headers["x-ratelimit-remaining-requests"] = str(status.requests_remaining)
        headers["x-ratelimit-reset-requests"] = format_duration(status.reset)
    if status.tpm is not None:
        headers["x-ratelimit-limit-tokens"] = str(status.tpm)
        headers["x-ratelimit-remaining-tokens"] = str(status.tokens_remaining)
        headers["x-ratelimit-reset-tokens"] = format_duration(status.reset)
    return headers


class KeyLimiters:
    """The rate limiters of the ``api_keys`` keys with limits of their own, made on each key's first request."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._limiters: dict[str, RateLimiter] = {}

    def get(self, key: str | None, keys: tuple[tuple[str, int | None, int | None], ...]) -> RateLimiter | None:
        if key is None:
            return None
        with self._lock:
            limiter = self._limiters.get(key)
            if limiter is None:
                limits = next(((rpm, tpm) for name, rpm, tpm in keys if name == key), (None, None))
                if limits == (None, None):
                    return None
                limiter = self._limiters[key] = RateLimiter(*limits)
            return limiter
