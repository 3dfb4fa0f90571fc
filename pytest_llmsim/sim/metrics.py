"""Per-backend metrics: Prometheus text with vLLM's names, and a Python snapshot.

The numbers live in plain Python state under one lock (cheap to update on the
request path); a custom collector hands them to prometheus_client, which
writes the exposition text. Each backend has its own ``CollectorRegistry``
(never the global one), so two backends in one process never mix numbers.

Distributions for the snapshot keep the most recent ``SAMPLE_CAP`` values
each, so memory stays flat however long a backend runs; the Prometheus
histograms and every counter cover the whole run (since the last reset).
"""

from __future__ import annotations

import threading
import time
from array import array
from bisect import bisect_left
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TypeAlias

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric

from .histogram import BucketCounts, Distribution, Histogram
from .request_log import RequestRecord

__all__ = ["PROMETHEUS_CONTENT_TYPE", "Distribution", "LLMSimLagWarning", "Metrics", "MetricsSnapshot"]

PROMETHEUS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# Buckets as vLLM defines them, so dashboards and routers read them alike.
_TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
                 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
_ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5,
                5.0, 7.5, 10.0, 20.0, 40.0, 80.0)
_LAG_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
_REQUEST_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0,
                    50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)

# (snapshot name, Prometheus name, help, buckets)
_HISTOGRAMS = (
    ("ttft", "vllm:time_to_first_token_seconds", "Time to first token, queueing included", _TTFT_BUCKETS),
    ("itl", "vllm:inter_token_latency_seconds", "Time between consecutive output tokens", _ITL_BUCKETS),
    ("e2e", "vllm:e2e_request_latency_seconds", "End-to-end request latency", _REQUEST_BUCKETS),
    ("queue_time", "vllm:request_queue_time_seconds", "Time spent waiting for a batch slot",
     _REQUEST_BUCKETS),
    ("emit_lag", "llmsim:emit_lag_seconds",
     "Wall seconds tokens left the server after they were due (the simulator falling behind)", _LAG_BUCKETS),
)
# 1, 2, 5, 10, 20, 50, ... as vLLM builds its token-count buckets (it stops at max_model_len; here at a million)
_TOKEN_BUCKETS = tuple(float(m * 10**e) for e in range(7) for m in (1, 2, 5))[:-2]
# Only in /metrics (no Python snapshot): vLLM's request phases and sizes, bucket counts without samples.
_PHASE_HISTOGRAMS = (
    ("prefill", "vllm:request_prefill_time_seconds", "Time in the prefill phase: from leaving the queue to the "
     "first token", _REQUEST_BUCKETS),
    ("decode", "vllm:request_decode_time_seconds", "Time in the decode phase: after the first token",
     _REQUEST_BUCKETS),
    ("inference", "vllm:request_inference_time_seconds", "Time running: prefill and decode", _REQUEST_BUCKETS),
    ("prompt_tokens", "vllm:request_prompt_tokens", "Prompt tokens of each request", _TOKEN_BUCKETS),
    ("generation_tokens", "vllm:request_generation_tokens", "Generation tokens of each request", _TOKEN_BUCKETS),
    ("max_tokens", "vllm:request_params_max_tokens", "The max_tokens of each request (or the default)",
     _TOKEN_BUCKETS),
    ("n", "vllm:request_params_n", "The n of each request", (1.0, 2.0, 5.0, 10.0, 20.0)),
    ("max_generation_tokens", "vllm:request_max_num_generation_tokens",
     "The most generation tokens of one sequence of each request", _TOKEN_BUCKETS),
)
# (key in totals, Prometheus name without _total, help)
_COUNTERS = (
    ("prompt", "vllm:prompt_tokens", "Prefill tokens processed"),
    ("generated", "vllm:generation_tokens", "Generation tokens produced"),
    ("completion", "llmsim:completion_tokens", "Generated tokens the clients were sent"),
    ("queried", "vllm:prefix_cache_queries", "Prefix-cache queries, in tokens"),
    ("cached", "vllm:prefix_cache_hits", "Prefix-cache hits, in tokens"),
    ("cancelled", "llmsim:requests_cancelled", "Requests whose client went away before the end"),
    ("ignored_fields", "llmsim:ignored_fields", "Request fields no API defines, accepted with no effect"),
)


class LLMSimLagWarning(UserWarning):
    """The simulator fell behind its own schedule: client-side latencies include its lateness."""


@dataclass(frozen=True)
class MetricsSnapshot:
    """The backend's numbers at one instant (counts since the last reset)."""

    requests_total: int
    requests_by_status: dict[int, int]
    prompt_tokens: int
    completion_tokens: int
    generated_tokens: int
    cached_tokens: int
    cache_hit_rate: float
    cancelled: int
    max_running: int
    faults: dict[str, int]
    ttft: Distribution
    itl: Distribution
    e2e: Distribution
    queue_time: Distribution
    emit_lag: Distribution
    preemptions: int = 0  # sequences sent back to wait because the KV cache was full (kv_cache_blocks)
    running: int = 0  # sequences in the running batch at the snapshot's instant
    waiting: int = 0  # sequences waiting for a batch slot at that instant
    sessions_open: int = 0  # WebSocket sessions open at that instant (their responses count as requests)
    sessions_total: int = 0  # sessions opened since the last reset
    session_audio_input_seconds: float = 0.0  # audio the sessions took in (committed), simulated seconds
    session_audio_output_seconds: float = 0.0  # speech they were sent, simulated seconds

    def __repr__(self) -> str:
        statuses = ", ".join(f"{k}: {v}" for k, v in sorted(self.requests_by_status.items()))
        return (
            f"MetricsSnapshot(requests_total={self.requests_total}, "
            f"requests_by_status={{{statuses}}}, prompt_tokens={self.prompt_tokens}, "
            f"completion_tokens={self.completion_tokens}, generated_tokens={self.generated_tokens}, "
            f"cached_tokens={self.cached_tokens}, "
            f"cache_hit_rate={self.cache_hit_rate:.3f}, cancelled={self.cancelled}, "
            f"max_running={self.max_running}, faults={self.faults!r}, ttft={self.ttft!r}, itl={self.itl!r}, "
            f"e2e={self.e2e!r}, queue_time={self.queue_time!r}, emit_lag={self.emit_lag!r}, "
            f"preemptions={self.preemptions}, running={self.running}, waiting={self.waiting})"
        )


# Per histogram name: the histogram (one model name) or None (merged), its count then, and its summary or samples.
_RecentSamples: TypeAlias = "dict[str, tuple[Histogram | None, int, Distribution | array[float] | list[float]]]"

ENGINE = "0"  # the ``engine`` label value: vLLM numbers its engine cores from 0


class _ModelStats:
    """Everything counted for one ``model_name`` label value."""

    def __init__(self) -> None:
        self.totals = dict.fromkeys((key for key, _, _ in _COUNTERS), 0)
        self.histograms = {name: Histogram(buckets) for name, _, _, buckets in _HISTOGRAMS}
        self.phases = {name: BucketCounts(buckets) for name, _, _, buckets in _PHASE_HISTOGRAMS}
        self._phase_list = tuple(self.phases.values())  # in _PHASE_HISTOGRAMS' order
        self.requests: dict[tuple[str, int], int] = {}
        self.success: dict[str, int] = {}
        self.faults: dict[str, int] = {}

    def observe_phases(self, values: tuple[float, float, float, int, int, int, int, int]) -> None:
        """One request's prefill, decode and inference time, prompt and generation tokens, max_tokens, n and
        its longest sequence (one call: eight method calls per request cost ~1.5 % of a non-streamed one)."""
        for counts, value in zip(self._phase_list, values):
            counts.counts[bisect_left(counts.bounds, value)] += 1
            counts.total += value


class Metrics:
    """One backend's counters and histograms; :meth:`observe` is the single way in."""

    def __init__(self, model: str) -> None:
        self.model = model
        self._lock = threading.Lock()
        self._stats: dict[str, _ModelStats] = {}
        self._gauges = (0, 0)
        self._lora: tuple[list[str], list[str], int] | None = None
        self._kv = (0.0, 0)  # KV-cache usage (0 to 1) and preemptions, from the engine at render time
        self._cache: tuple[int, int] | None = None  # block size and blocks, at render time
        self._steps: BucketCounts | None = None  # tokens per engine step, from the engine at render time
        self._sessions = (0, 0, 0.0, 0.0)  # open, opened, audio seconds in and out: from the session log
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self)  # a Collector by shape: collect() yields families

    def _current(self) -> _ModelStats:
        stats = self._stats.get(self.model)
        if stats is None:
            stats = self._stats[self.model] = _ModelStats()
        return stats

    def observe(self, record: RequestRecord, gaps: list[tuple[float, int]] | None = None,
                queried_tokens: int = 0, lags: list[float] | None = None, longest: int = 0) -> None:
        """Account for one finished API request (any status); ``gaps`` as ``(gap, count)`` runs, ``longest`` the
        most tokens one of its sequences produced."""
        with self._lock:
            stats = self._stats.get(self.model) or self._current()
            key = (record.route, record.status)  # a route template: bounded label values
            requests = stats.requests
            requests[key] = requests.get(key, 0) + 1
            totals = stats.totals
            totals["prompt"] += record.prompt_tokens
            totals["generated"] += record.generated_tokens
            totals["completion"] += record.completion_tokens
            if queried_tokens:
                totals["queried"] += queried_tokens
                totals["cached"] += record.cached_tokens
            if record.cancelled:
                totals["cancelled"] += 1
            if record.ignored_fields:
                totals["ignored_fields"] += len(record.ignored_fields)
            if record.fault is not None:
                stats.faults[record.fault] = stats.faults.get(record.fault, 0) + 1
            if 200 <= record.status < 300 and not record.cancelled:  # record.ok
                success = stats.success
                for reason in record.finish_reasons:
                    reason = reason or "abort"
                    success[reason] = success.get(reason, 0) + 1
            histograms = stats.histograms
            ttft, e2e, queue_time = record.ttft, record.e2e, record.queue_time
            if ttft is not None:
                histograms["ttft"].observe(ttft)
            if e2e is not None:
                histograms["e2e"].observe(e2e)
            if queue_time is not None:
                histograms["queue_time"].observe(queue_time)
            if gaps:
                histograms["itl"].observe_runs(gaps)
            if ttft is not None and e2e is not None:  # a generation that ran: vLLM's phases and sizes
                waited = queue_time or 0.0
                stats.observe_phases((ttft - waited, e2e - ttft, e2e - waited, record.prompt_tokens,
                                      record.generated_tokens, record.max_tokens, record.n, longest))
            for lag in lags or ():
                histograms["emit_lag"].observe(lag)

    # --- Prometheus ---

    def collect(self) -> Iterator[Metric]:
        """prometheus_client Collector protocol: the families, built from our state."""
        with self._lock:
            running, waiting = self._gauges
            labels = ["engine", "model_name"]  # as vLLM V1 labels them; one engine here
            gauge_running = GaugeMetricFamily("vllm:num_requests_running", "Requests in the running batch",
                                              labels=labels)
            gauge_waiting = GaugeMetricFamily("vllm:num_requests_waiting",
                                              "Requests waiting for a batch slot", labels=labels)
            gauge_running.add_metric([ENGINE, self.model], running)
            gauge_waiting.add_metric([ENGINE, self.model], waiting)
            families: list[Metric] = [gauge_running, gauge_waiting]
            usage, preemptions = self._kv
            kv_usage = GaugeMetricFamily("vllm:kv_cache_usage_perc", "KV-cache usage; 1 means 100 percent",
                                         labels=labels)
            kv_usage.add_metric([ENGINE, self.model], usage)
            preempted = CounterMetricFamily("vllm:num_preemptions", "Cumulative number of preemptions",
                                            labels=labels)
            preempted.add_metric([ENGINE, self.model], preemptions)
            families += [kv_usage, preempted]
            if self._lora is not None:  # as vLLM: only when LoRA is on; the value is a timestamp
                active, queued, max_lora = self._lora
                info = GaugeMetricFamily("vllm:lora_requests_info", "Running stats on LoRA requests",
                                         labels=["running_lora_adapters", "waiting_lora_adapters", "max_lora"])
                info.add_metric([",".join(active), ",".join(queued), str(max_lora)], time.time())
                families.append(info)
            for key, name, doc in _COUNTERS:
                counter = CounterMetricFamily(name, doc, labels=labels)
                for model, stats in self._stats.items():
                    counter.add_metric([ENGINE, model], stats.totals[key])
                families.append(counter)
            success = CounterMetricFamily("vllm:request_success", "Requests finished, by finish reason",
                                          labels=[*labels, "finished_reason"])
            requests = CounterMetricFamily("llmsim:requests", "HTTP API requests by endpoint and status",
                                           labels=[*labels, "endpoint", "status"])
            faults = CounterMetricFamily("llmsim:faults_injected", "Faults injected, by kind",
                                         labels=[*labels, "kind"])
            for model, stats in self._stats.items():
                for reason, count in stats.success.items():
                    success.add_metric([ENGINE, model, reason], count)
                for (path, status), count in stats.requests.items():
                    requests.add_metric([ENGINE, model, path, str(status)], count)
                for kind, count in stats.faults.items():
                    faults.add_metric([ENGINE, model, kind], count)
            families += [success, requests, faults]
            for key, name, doc, _ in (*_HISTOGRAMS, *_PHASE_HISTOGRAMS):
                histogram = HistogramMetricFamily(name, doc, labels=labels)
                for model, stats in self._stats.items():
                    h = stats.histograms[key] if key in stats.histograms else stats.phases[key]
                    histogram.add_metric([ENGINE, model], h.cumulative(), sum_value=h.total)
                families.append(histogram)
            if self._cache is not None:  # as vLLM: the cache's configuration as labels, the value 1
                block_size, blocks = self._cache
                info = GaugeMetricFamily("vllm:cache_config_info", "Information of the LLMEngine CacheConfig",
                                         labels=["engine", "block_size", "cache_dtype", "enable_prefix_caching",
                                                 "num_gpu_blocks"])
                info.add_metric([ENGINE, str(block_size), "auto", "True", str(blocks)], 1.0)
                families.append(info)
            if self._steps is not None:  # vLLM's name ends in _total though it is a histogram
                steps = HistogramMetricFamily("vllm:iteration_tokens_total", "Tokens per engine step (step mode)",
                                              labels=labels)
                steps.add_metric([ENGINE, self.model], self._steps.cumulative(), sum_value=self._steps.total)
                families.append(steps)
            families += _session_families(*self._sessions)
        yield from families

    def render(self, running: int, waiting: int, lora: tuple[list[str], list[str], int] | None = None,
               kv: tuple[float, int] = (0.0, 0), cache: tuple[int, int] | None = None,
               steps: BucketCounts | None = None, sessions: tuple[int, int, float, float] = (0, 0, 0.0, 0.0)) -> bytes:
        """Prometheus text exposition, gauges set from the engine's state now.

        ``lora``: adapters running, adapters waiting and ``max_loras``, when the backend serves adapters;
        ``kv``: KV-cache usage (0 to 1) and preemptions so far; ``cache``: block size and blocks (the cache's
        configuration, ``vllm:cache_config_info``); ``steps``: the tokens of each engine step so far; ``sessions``:
        WebSocket sessions open and opened, and their audio seconds in and out.
        """
        with self._lock:
            self._gauges = (running, waiting)
            self._lora = lora
            self._kv = kv
            self._cache = cache
            self._steps = steps
            self._sessions = sessions
        return generate_latest(self.registry)

    # --- Python ---

    def histograms(self) -> dict[str, dict[str, object]]:
        """Each histogram's buckets (all model names together), as the Prometheus text has them:
        ``{"ttft": {"bounds": [...], "counts": [...], "count": n, "sum": s}, ...}``. ``counts`` are per
        bucket (not cumulative), one more than ``bounds`` (the last is +Inf). Cheap: no samples sorted."""
        with self._lock:
            out: dict[str, dict[str, object]] = {}
            for name, _, _, buckets in _HISTOGRAMS:
                counts = [0] * (len(buckets) + 1)
                total = 0.0
                for stats in self._stats.values():
                    histogram = stats.histograms[name]
                    counts = [a + b for a, b in zip(counts, histogram.counts)]
                    total += histogram.total
                out[name] = {"bounds": list(buckets), "counts": counts, "count": sum(counts), "sum": total}
            return out

    def _recent_samples(self) -> _RecentSamples:
        """Per histogram (called holding the lock): its summary if nothing was observed since it was made, else
        a copy of the recent samples to summarise outside the lock (sorting 50,000 costs milliseconds while
        requests keep being observed), with the histogram and its count to keep the summary on. With one model
        name (the usual case) a live page polling an idle backend sorts nothing."""
        out: _RecentSamples = {}
        for name, _, _, _ in _HISTOGRAMS:
            if len(self._stats) == 1:
                only = next(iter(self._stats.values())).histograms[name]
                out[name] = (only, only.observed, only.cached_summary() or only.samples.copy())
            else:
                merged: list[float] = []
                for stats in self._stats.values():
                    merged.extend(stats.histograms[name].samples)
                out[name] = (None, 0, merged)
        return out

    @staticmethod
    def _summarised(recent: _RecentSamples) -> dict[str, Distribution]:
        out = {}
        for name, (histogram, observed, samples) in recent.items():
            if isinstance(samples, Distribution):
                out[name] = samples
                continue
            out[name] = Distribution.of(samples)
            if histogram is not None:
                histogram.keep_summary(observed, out[name])
        return out

    def snapshot(self, max_running: int, preemptions: int = 0, running: int = 0,
                 waiting: int = 0) -> MetricsSnapshot:
        """Python values of the same numbers (all model names together)."""
        with self._lock:
            totals = dict.fromkeys((key for key, _, _ in _COUNTERS), 0)
            statuses: dict[int, int] = {}
            faults: dict[str, int] = {}
            for stats in self._stats.values():
                for key, value in stats.totals.items():
                    totals[key] += value
                for (_, status), count in stats.requests.items():
                    statuses[status] = statuses.get(status, 0) + count
                for kind, count in stats.faults.items():
                    faults[kind] = faults.get(kind, 0) + count
            recent = self._recent_samples()  # under the same lock: the counts and the samples agree
        distributions = self._summarised(recent)
        queried = totals["queried"]
        return MetricsSnapshot(
            requests_total=sum(statuses.values()),
            requests_by_status=statuses,
            prompt_tokens=totals["prompt"],
            completion_tokens=totals["completion"],
            generated_tokens=totals["generated"],
            cached_tokens=totals["cached"],
            cache_hit_rate=totals["cached"] / queried if queried else 0.0,
            cancelled=totals["cancelled"],
            max_running=max_running,
            faults=faults,
            ttft=distributions["ttft"],
            itl=distributions["itl"],
            e2e=distributions["e2e"],
            queue_time=distributions["queue_time"],
            emit_lag=distributions["emit_lag"],
            preemptions=preemptions,
            running=running,
            waiting=waiting,
        )


def _session_families(open_now: int, opened: int, heard: float, said: float) -> list[Metric]:
    """The WebSocket sessions' own numbers (their responses are requests, in the families above)."""
    open_gauge = GaugeMetricFamily("llmsim:sessions_open", "WebSocket sessions open now")
    open_gauge.add_metric([], open_now)
    total = CounterMetricFamily("llmsim:sessions", "WebSocket sessions opened")
    total.add_metric([], opened)
    audio = CounterMetricFamily("llmsim:session_audio_seconds", "Audio in sessions, simulated seconds: committed "
                                "input and generated speech", labels=["direction"])
    audio.add_metric(["input"], heard)
    audio.add_metric(["output"], said)
    return [open_gauge, total, audio]
