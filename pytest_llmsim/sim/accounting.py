"""What a backend keeps of each request once it is over: the metrics, the request log, the trace and the live
page's history, and the readings taken from them (a snapshot, Prometheus text)."""

from __future__ import annotations

import time
from collections.abc import Callable

from .config import SimConfig
from .generation import Generation, Outcome, ending
from .load_history import LoadHistory
from .metrics import Metrics, MetricsSnapshot
from .request import GenerationRequest
from .request_log import RequestLog, RequestRecord
from .runtime import Runtime
from .trace import TraceRecorder

__all__ = ["MAX_LAG_SAMPLES", "Accounting"]

MAX_LAG_SAMPLES = 4096  # emit-lag samples kept per request (one per write of tokens)


class Accounting:
    """One backend's accounts, safe to use from handler threads; :meth:`reset` empties them."""

    def __init__(self, config: SimConfig, runtime: Runtime) -> None:
        self.runtime = runtime
        self.trace = TraceRecorder(config.max_trace_requests)
        self.history = LoadHistory()  # the live page's charts: kept whether a page is open or not
        self.metrics = Metrics(config.model)
        self.log = RequestLog(config.max_log_entries, config.max_log_bytes)
        self._in_progress: set[int] = set()  # ids of finished requests' records not yet in the metrics and log
        # Called after each request's accounting (llmsim serve paces garbage collection with it).
        self.after_request: Callable[[], None] | None = None

    def reset(self, config: SimConfig) -> None:
        """Empty every account (the settings ``config``'s)."""
        self.metrics = Metrics(config.model)
        self.log = RequestLog(config.max_log_entries, config.max_log_bytes)
        self.trace.clear(config.max_trace_requests)
        self.history.clear()

    def apply(self, old: SimConfig, new: SimConfig) -> None:
        """The bounds and names of settings ``new`` (the accounts kept so far stay)."""
        if new.model != old.model:
            self.metrics.model = new.model
        if new.max_trace_requests != old.max_trace_requests:
            self.trace.clear(new.max_trace_requests)
        if (new.max_log_entries, new.max_log_bytes) != (old.max_log_entries, old.max_log_bytes):
            self.log.max_entries, self.log.max_bytes = new.max_log_entries, new.max_log_bytes

    @property
    def busy(self) -> bool:
        """Whether a request that is over is being accounted now."""
        return bool(self._in_progress)

    def counts_changed(self, now: float, running: int, waiting: int) -> None:
        """The engine's batch or queue changed (under the runtime's lock): the trace and the history note it."""
        self.trace.sample(now, running, waiting)
        self.history.counts(now, running, waiting)

    def note_lag(self, generation: Generation, due: float) -> None:
        """Tokens due at virtual time ``due`` just went out: keep how late (wall seconds)."""
        late = self.runtime.lateness(due)
        if late is not None and len(generation.emit_lags) < MAX_LAG_SAMPLES:
            generation.emit_lags.append(max(0.0, late))

    def finish(self, record: RequestRecord, generation: Generation | None, outcome: Outcome, delivered: int | None,
               epoch: int, release_model: Callable[[GenerationRequest], None]) -> None:
        """Account for a request that is over (see :meth:`~.simulator.Simulator.finish`): a generation of an
        earlier ``epoch`` (started before a reset) is only released; ``release_model`` frees its model."""
        gaps: list[tuple[float, int]] = []
        lags: list[float] = []
        queried = longest = 0
        # Released first (released after the accounting, 16 connections served 15 % fewer requests/s:
        # benchmarks/throughput.py); wait_idle() also waits for the accounting, through busy.
        self._in_progress.add(id(record))  # set.add/discard are atomic: no lock on the hot path
        try:
            if generation is not None:
                self.runtime.release(generation.feed)
                if generation.epoch != epoch:
                    return  # started before a reset: belongs to an earlier test
                release_model(generation.request)
                generation.fill(record, outcome, delivered)
                gaps = generation.gap_runs()
                queried = generation.queried_tokens
                lags = generation.emit_lags
                longest = generation.longest_sequence
            record.ended = ending(record, outcome)
            record.finished = time.monotonic()
            self.metrics.observe(record, gaps, queried, lags, longest)
            self.history.request_ended()
            self.log.append(record)
            if self.trace.enabled:
                self.trace.request(record, generation.sequences if generation is not None else [],
                                   self.runtime.virtual_now())
        finally:
            self._in_progress.discard(id(record))
        if self.after_request is not None:
            self.after_request()

    def snapshot(self) -> MetricsSnapshot:
        """The metrics now, with the engine's present load."""
        runtime = self.runtime
        running, waiting = runtime.running_and_waiting()
        return self.metrics.snapshot(runtime.max_running(), runtime.kv_state()[1], running, waiting)

    def prometheus_text(self, config: SimConfig, adapters_loaded: bool,
                        sessions: tuple[int, int, float, float] = (0, 0, 0.0, 0.0)) -> bytes:
        """``GET /metrics``: the metrics as vLLM's Prometheus text, with the engine's present load (``sessions``:
        open, opened, audio seconds in and out)."""
        runtime = self.runtime
        running, waiting = runtime.running_and_waiting()
        lora = None
        if adapters_loaded:
            active, queued = runtime.adapters()
            lora = (active, queued, config.max_loras)
        used, preemptions = runtime.kv_state()
        capacity = config.kv_cache_blocks or config.cache_capacity_blocks
        return self.metrics.render(running, waiting, lora, (min(used / capacity, 1.0) if capacity else 0.0,
                                                            preemptions), (config.block_size, capacity),
                                   runtime.step_tokens(), sessions)
