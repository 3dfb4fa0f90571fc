"""Batch jobs (OpenAI's Batch API, Anthropic's Message Batches): many requests run behind interactive traffic.

A job holds its items (an id the client chose, the wire API, the parsed
body) and runs them through the same simulator as any request, a few at a
time, so interactive requests keep their batch slots; each ends as the body
and status its API would have answered, or an error. Everything finishes in
simulated time (``--llmsim-speed`` scales it). The APIs' own shapes (batch
objects, result lines) are in :mod:`..api.openai_batches` and
:mod:`..api.anthropic_batches`; this module only runs and keeps jobs.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

from werkzeug.datastructures import Headers

from ..api.base import NO_TARGET, WireAPI
from ..sim import SimError
from ..sim.request_log import RequestRecord
from ..sim.simulator import Simulator
from .job_registry import JobRegistry

__all__ = ["BatchItem", "BatchJob", "BatchJobs"]

CONCURRENCY = 2  # items of one job in the engine at once: interactive traffic keeps the other slots


@dataclass
class BatchItem:
    """One request of a batch and, once run, what it got (``status`` 0: not run; ``cancelled``)."""

    custom_id: str
    api: WireAPI
    body: Any
    path: str
    status: int = 0
    answer: dict[str, Any] | None = None
    error: SimError | None = None
    request_id: str = ""
    started: bool = False
    cancelled: bool = False


@dataclass
class BatchJob:
    """A batch: its items, its state (``in_progress``, ``cancelling``, ``ended``) and its times."""

    id: str
    items: list[BatchItem]
    extra: dict[str, Any] = field(default_factory=dict)  # what the API echoes back (endpoint, metadata...)
    state: str = "in_progress"
    created_at: float = field(default_factory=time.time)
    ended_at: float | None = None
    cancel_requested_at: float | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def over(self) -> bool:
        return self.state == "ended"

    def counts(self) -> tuple[int, int, int, int]:
        """(still to run, succeeded, failed, cancelled)."""
        succeeded = sum(1 for item in self.items if item.status == 200)
        failed = sum(1 for item in self.items if item.status not in (0, 200))
        cancelled = sum(1 for item in self.items if item.cancelled)
        return len(self.items) - succeeded - failed - cancelled, succeeded, failed, cancelled

    def cancel(self) -> None:
        with self._lock:
            if self.state == "in_progress":
                self.state = "cancelling"
                self.cancel_requested_at = time.time()

    def _next(self) -> BatchItem | None:
        with self._lock:
            waiting = [item for item in self.items if not item.started]
            if self.state == "cancelling":
                for item in waiting:
                    item.started = item.cancelled = True
                return None
            if waiting:
                waiting[0].started = True
                return waiting[0]
            return None


class BatchJobs(JobRegistry[BatchJob]):
    """The batch jobs of one backend, by id; each runs on its own threads until its items are done."""

    def __init__(self, simulator: Simulator) -> None:
        super().__init__()
        self.simulator = simulator

    def start(self, job: BatchJob) -> BatchJob:
        self.add(job)
        count = min(CONCURRENCY, max(1, len(job.items)))
        remaining = [count]
        lock = threading.Lock()

        def run() -> None:
            while (item := job._next()) is not None:
                self._run(item)
            with lock:  # the last worker to finish ends the job
                remaining[0] -= 1
                last = remaining[0] == 0
            if last:
                job.state, job.ended_at = "ended", time.time()

        for _ in range(count):
            threading.Thread(target=run, name=f"llmsim-batch-{job.id}", daemon=True).start()
        return job

    def _run(self, item: BatchItem) -> None:
        """One item through the simulator, as a non-streamed request of its API, logged like one."""
        simulator, api = self.simulator, item.api
        record = RequestRecord(method="POST", path=item.path, headers=Headers(), body=item.body, route=item.path,
                               api=api.name)
        new_id = getattr(api, "new_request_id", None)
        item.request_id = new_id() if new_id is not None else ""
        record.request_id = item.request_id
        try:
            request = api.parse(item.body, NO_TARGET)
            request.stream = False
            request.api = api.name
            record.model = request.model
            while True:
                try:
                    generation = simulator.start(request)
                    break
                except SimError as error:
                    if error.code != "queue_full":
                        raise
                    time.sleep(0.01)  # behind interactive traffic: wait for room in the queue, never fail
        except SimError as error:
            item.error, item.status = error, error.status
            record.status, record.error = error.status, error.fields()
            simulator.finish(record)
            return
        generation.ticket.wait()
        record.status = 200
        simulator.finish(record, generation)
        response_id = f"{api.id_prefix}{item.request_id.removeprefix('req_')[:24]}"
        item.answer = api.response_body(generation, response_id)
        item.status = 200
