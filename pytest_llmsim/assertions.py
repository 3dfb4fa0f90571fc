"""Assertion helpers over what a backend collected.

Each helper fails with a message that says what was expected, what was seen,
and which requests are relevant, so a failure explains itself without a
debugger. Mixed into :class:`~pytest_llmsim.backend.LLMBackend`.
"""

from __future__ import annotations

from collections.abc import Sequence

from .sim.metrics import Distribution, MetricsSnapshot
from .sim.request_log import RequestRecord
from .verdicts import VERDICT_KINDS, Verdict, assert_behaved, judge

__all__ = ["BackendAssertions"]

_SHOWN_REQUESTS = 10


def _listing(records: Sequence[RequestRecord], title: str) -> str:
    if not records:
        return f"\n{title}: none"
    lines = [f"  [{i}] {r.summary()}" for i, r in enumerate(records[-_SHOWN_REQUESTS:])]
    more = f" (last {_SHOWN_REQUESTS} of {len(records)})" if len(records) > _SHOWN_REQUESTS else ""
    return f"\n{title}{more}:\n" + "\n".join(lines)


class BackendAssertions:
    """``assert_*`` helpers; the host class provides ``metrics`` and ``requests``.

    ``trace_path``, set by the plugin under ``--llmsim-trace``, is where this
    backend's trace is written when the test ends; failures name it.
    """

    trace_path: str | None = None

    def _listing(self, records: Sequence[RequestRecord], title: str) -> str:
        where = f"\nbackend timeline: {self.trace_path} (and .svg; written when the test ends)" \
            if self.trace_path else ""
        return _listing(records, title) + where

    @property
    def metrics(self) -> MetricsSnapshot:
        raise NotImplementedError

    @property
    def requests(self) -> list[RequestRecord]:
        raise NotImplementedError

    def assert_requests(self, count: int | None = None, *, path: str | None = None,
                        status: int | None = None, model: str | None = None) -> list[RequestRecord]:
        """Assert how many logged requests match all the given filters; returns them."""
        records = self.requests
        matching = [r for r in records
                    if (path is None or r.path == path) and (status is None or r.status == status)
                    and (model is None or r.model == model)]
        if count is not None and len(matching) != count:
            filters = ", ".join(f"{k}={v!r}" for k, v in
                                (("path", path), ("status", status), ("model", model)) if v is not None)
            raise AssertionError(
                f"expected {count} request(s){' with ' + filters if filters else ''}, "
                f"saw {len(matching)}" + self._listing(records, "requests received"))
        return matching

    def assert_no_errors(self) -> None:
        """Assert every request got a 2xx answer and none was cancelled."""
        bad = [r for r in self.requests if not r.ok]
        if bad:
            raise AssertionError(f"expected no failed or cancelled requests, saw {len(bad)}"
                                 + self._listing(bad, "failed or cancelled requests"))

    def assert_cache_hit_rate(self, *, at_least: float | None = None,
                              at_most: float | None = None) -> None:
        """Assert the prefix-cache hit rate (cached / prompt tokens queried) is in range."""
        m = self.metrics
        rate = m.cache_hit_rate
        if (at_least is not None and rate < at_least) or (at_most is not None and rate > at_most):
            bounds = " and ".join(f"{name} {value:.3f}" for name, value in
                                  (("at least", at_least), ("at most", at_most)) if value is not None)
            raise AssertionError(
                f"expected a prefix-cache hit rate {bounds}, saw {rate:.3f} "
                f"({m.cached_tokens} cached of the prompt tokens queried)"
                + self._listing(self.requests, "requests received"))

    def assert_ttft(self, *, p50_at_most: float | None = None, p90_at_most: float | None = None,
                    p99_at_most: float | None = None, max_at_most: float | None = None) -> None:
        """Assert time-to-first-token percentiles (simulated seconds) are within bounds."""
        self._assert_distribution("ttft", self.metrics.ttft, p50=p50_at_most, p90=p90_at_most,
                                  p99=p99_at_most, max=max_at_most)

    def assert_itl(self, *, p50_at_most: float | None = None, p90_at_most: float | None = None,
                   p99_at_most: float | None = None, max_at_most: float | None = None) -> None:
        """Assert inter-token latency percentiles (simulated seconds) are within bounds."""
        self._assert_distribution("itl", self.metrics.itl, p50=p50_at_most, p90=p90_at_most,
                                  p99=p99_at_most, max=max_at_most)

    def _assert_distribution(self, name: str, dist: Distribution, **limits: float | None) -> None:
        if dist.count == 0:
            raise AssertionError(f"expected {name} samples, saw none" + self._listing(self.requests, "requests"))
        over = [(stat, getattr(dist, stat), limit) for stat, limit in limits.items()
                if limit is not None and getattr(dist, stat) > limit]
        if over:
            detail = "; ".join(f"{name} {stat} at most {limit:.6g}s, saw {seen:.6g}s"
                               for stat, seen, limit in over)
            slowest = sorted((r for r in self.requests if getattr(r, name, None) is not None),
                             key=lambda r: getattr(r, name), reverse=True)
            raise AssertionError(f"expected {detail} ({dist!r})"
                                 + self._listing(slowest[:_SHOWN_REQUESTS], f"slowest requests by {name}"))

    def verdicts(self, backoff_floor: float = 0.1) -> list[Verdict]:
        """How the client behaved, judged from the request log: a :class:`~pytest_llmsim.verdicts.Verdict` per
        kind (``ignored_retry_after``, ``retried_without_backoff``, ``retried_non_retryable``,
        ``accepted_truncated_stream``), each ``ok`` or with the requests involved. ``backoff_floor``: wall
        seconds a retry must wait at least after the failure's answer."""
        return judge(self.requests, backoff_floor)

    def assert_client_behaved(self, *kinds: str, backoff_floor: float = 0.1) -> None:
        """Fail listing each offence of ``kinds`` (all verdicts by default) with the requests involved."""
        assert_behaved(self.requests, kinds or VERDICT_KINDS, backoff_floor)
