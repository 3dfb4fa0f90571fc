"""Per-backend metrics: Prometheus text with vLLM's names, and a Python snapshot.

Each backend owns a ``CollectorRegistry`` (never the global one), so two
backends in one process never mix their numbers. Distributions for the
snapshot keep the most recent ``SAMPLE_CAP`` values each, so memory stays flat
however long a backend runs; the Prometheus histograms and every counter
cover the whole run.
"""

from __future__ import annotations

import math
import threading
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from .records import RequestRecord

__all__ = ["Distribution", "Metrics", "MetricsSnapshot", "PROMETHEUS_CONTENT_TYPE"]

PROMETHEUS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
SAMPLE_CAP = 50_000

# Buckets as vLLM defines them, so dashboards and routers read them alike.
_TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
                 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
_ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5,
                5.0, 7.5, 10.0, 20.0, 40.0, 80.0)
_REQUEST_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0,
                    50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)


@dataclass(frozen=True)
class Distribution:
    """Summary of a latency distribution, simulated seconds."""

    count: int
    mean: float
    p50: float
    p90: float
    p99: float
    max: float

    @classmethod
    def of(cls, values: Iterable[float]) -> Distribution:
        ordered = sorted(values)
        if not ordered:
            return cls(0, math.nan, math.nan, math.nan, math.nan, math.nan)
        return cls(len(ordered), sum(ordered) / len(ordered), _percentile(ordered, 50),
                   _percentile(ordered, 90), _percentile(ordered, 99), ordered[-1])

    def __repr__(self) -> str:
        if self.count == 0:
            return "Distribution(count=0)"
        return (f"Distribution(count={self.count}, mean={self.mean:.6g}, p50={self.p50:.6g}, "
                f"p90={self.p90:.6g}, p99={self.p99:.6g}, max={self.max:.6g})")


def _percentile(ordered: list[float], pct: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    position = (len(ordered) - 1) * pct / 100.0
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


@dataclass(frozen=True)
class MetricsSnapshot:
    """The backend's numbers at one instant (counts since the last reset)."""

    requests_total: int
    requests_by_status: dict[int, int]
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    cache_hit_rate: float
    cancelled: int
    max_running: int
    ttft: Distribution
    itl: Distribution
    e2e: Distribution
    queue_time: Distribution

    def __repr__(self) -> str:
        statuses = ", ".join(f"{k}: {v}" for k, v in sorted(self.requests_by_status.items()))
        return (
            f"MetricsSnapshot(requests_total={self.requests_total}, "
            f"requests_by_status={{{statuses}}}, prompt_tokens={self.prompt_tokens}, "
            f"completion_tokens={self.completion_tokens}, cached_tokens={self.cached_tokens}, "
            f"cache_hit_rate={self.cache_hit_rate:.3f}, cancelled={self.cancelled}, "
            f"max_running={self.max_running}, ttft={self.ttft!r}, itl={self.itl!r}, "
            f"e2e={self.e2e!r}, queue_time={self.queue_time!r})"
        )


class Metrics:
    """Counters and histograms of one backend; :meth:`observe` is the single way in."""

    def __init__(self, model: str) -> None:
        self.model = model
        self.registry = CollectorRegistry(auto_describe=True)
        self._lock = threading.Lock()
        labels = ["model_name"]
        reg = self.registry
        self._running = Gauge("vllm:num_requests_running", "Requests in the running batch",
                              labels, registry=reg)
        self._waiting = Gauge("vllm:num_requests_waiting", "Requests waiting for a batch slot",
                              labels, registry=reg)
        self._prompt_tokens = Counter("vllm:prompt_tokens", "Prefill tokens processed",
                                      labels, registry=reg)
        self._generation_tokens = Counter("vllm:generation_tokens", "Generation tokens produced",
                                          labels, registry=reg)
        self._cache_queries = Counter("vllm:prefix_cache_queries",
                                      "Prefix-cache queries, in tokens", labels, registry=reg)
        self._cache_hits = Counter("vllm:prefix_cache_hits", "Prefix-cache hits, in tokens",
                                   labels, registry=reg)
        self._success = Counter("vllm:request_success", "Requests finished, by finish reason",
                                [*labels, "finished_reason"], registry=reg)
        self._ttft = Histogram("vllm:time_to_first_token_seconds", "Time to first token",
                               labels, buckets=_TTFT_BUCKETS, registry=reg)
        self._itl = Histogram("vllm:inter_token_latency_seconds", "Inter-token latency",
                              labels, buckets=_ITL_BUCKETS, registry=reg)
        self._e2e = Histogram("vllm:e2e_request_latency_seconds", "End-to-end request latency",
                              labels, buckets=_REQUEST_BUCKETS, registry=reg)
        self._queue = Histogram("vllm:request_queue_time_seconds", "Time spent waiting",
                                labels, buckets=_REQUEST_BUCKETS, registry=reg)
        self._requests = Counter("llmsim:requests", "HTTP API requests by endpoint and status",
                                 [*labels, "endpoint", "status"], registry=reg)
        self._cancelled = Counter("llmsim:requests_cancelled",
                                  "Requests whose client went away before the end",
                                  labels, registry=reg)
        self._status_counts: dict[int, int] = {}
        self._totals = {"prompt": 0, "completion": 0, "cached": 0, "queried": 0, "cancelled": 0}
        self._samples: dict[str, deque[float]] = {
            name: deque(maxlen=SAMPLE_CAP) for name in ("ttft", "itl", "e2e", "queue_time")
        }

    def observe(self, record: RequestRecord, gaps: Iterable[float] = (),
                queried_tokens: int = 0) -> None:
        """Account for one finished API request (any status)."""
        model = self.model
        with self._lock:
            self._requests.labels(model, record.path, str(record.status)).inc()
            self._status_counts[record.status] = self._status_counts.get(record.status, 0) + 1
            if record.cancelled:
                self._cancelled.labels(model).inc()
                self._totals["cancelled"] += 1
            if record.prompt_tokens or record.completion_tokens:
                self._prompt_tokens.labels(model).inc(record.prompt_tokens)
                self._generation_tokens.labels(model).inc(record.completion_tokens)
                self._totals["prompt"] += record.prompt_tokens
                self._totals["completion"] += record.completion_tokens
            if queried_tokens:
                self._cache_queries.labels(model).inc(queried_tokens)
                self._cache_hits.labels(model).inc(record.cached_tokens)
                self._totals["queried"] += queried_tokens
                self._totals["cached"] += record.cached_tokens
            if record.ok:
                for reason in record.finish_reasons:
                    self._success.labels(model, reason or "abort").inc()
            self._sample("ttft", self._ttft, record.ttft)
            self._sample("e2e", self._e2e, record.e2e)
            self._sample("queue_time", self._queue, record.queue_time)
            itl_hist = self._itl.labels(model)
            itl_samples = self._samples["itl"]
            for gap in gaps:
                itl_hist.observe(gap)
                itl_samples.append(gap)

    def _sample(self, name: str, histogram: Histogram, value: float | None) -> None:
        if value is not None:
            histogram.labels(self.model).observe(value)
            self._samples[name].append(value)

    def render(self, running: int, waiting: int) -> bytes:
        """Prometheus text exposition, gauges set from the engine's state now."""
        self._running.labels(self.model).set(running)
        self._waiting.labels(self.model).set(waiting)
        return generate_latest(self.registry)

    def snapshot(self, max_running: int) -> MetricsSnapshot:
        """Python values of the same numbers."""
        with self._lock:
            totals = dict(self._totals)
            statuses = dict(self._status_counts)
            samples = {name: list(values) for name, values in self._samples.items()}
        queried = totals["queried"]
        return MetricsSnapshot(
            requests_total=sum(statuses.values()),
            requests_by_status=statuses,
            prompt_tokens=totals["prompt"],
            completion_tokens=totals["completion"],
            cached_tokens=totals["cached"],
            cache_hit_rate=totals["cached"] / queried if queried else 0.0,
            cancelled=totals["cancelled"],
            max_running=max_running,
            ttft=Distribution.of(samples["ttft"]),
            itl=Distribution.of(samples["itl"]),
            e2e=Distribution.of(samples["e2e"]),
            queue_time=Distribution.of(samples["queue_time"]),
        )

