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
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from werkzeug.datastructures import Headers

from ..api.base import NO_TARGET, WireAPI
from ..sim import SimError
from ..sim.request_log import RequestRecord
from ..sim.simulator import Simulator
from .job_registry import JobRegistry

__all__ = ["BatchItem", "BatchJob", "BatchJobs"]

CONCURRENCY = 2  # items in the engine at once, over every job: interactive traffic keeps the other slots


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
    """A batch: its items, its state (``in_progress``, ``cancelling``, ``ended``), its times and the API key
    that made it (``owner``; None when the backend checks no keys)."""

    id: str
    items: list[BatchItem]
    extra: dict[str, Any] = field(default_factory=dict)  # what the API echoes back (endpoint, metadata...)
    owner: str | None = None
    input_bytes: int = 0  # the requests' size as received: what the registry's byte bound counts
    state: str = "in_progress"
    created_at: float = field(default_factory=time.time)
    ended_at: float | None = None
    cancel_requested_at: float | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _cursor: int = 0  # the next item to start: items before it have started (or were cancelled)
    _running: int = 0  # items started and not yet done

    @property
    def over(self) -> bool:
        return self.state == "ended"

    @property
    def size_bytes(self) -> int:
        """About what it keeps: its requests (their answers are of the same order, at most ``max_tokens``)."""
        return self.input_bytes

    @property
    def cancelled(self) -> bool:
        """Whether a cancel was asked (its waiting items will not run)."""
        return self.state != "in_progress"

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
        """The next item to run (marked started), or None: every item started, or the job cancelled (its
        waiting items are then marked cancelled). Ends the job when nothing is left running."""
        with self._lock:
            item = None
            if self.state == "cancelling":
                for waiting in self.items[self._cursor:]:
                    waiting.started = waiting.cancelled = True
                self._cursor = len(self.items)
            elif self._cursor < len(self.items):
                item = self.items[self._cursor]
                self._cursor += 1
                item.started = True
                self._running += 1
            self._end_if_done()
            return item

    def _done(self) -> None:
        """An item of this job is over (run, failed or cancelled)."""
        with self._lock:
            self._running -= 1
            self._end_if_done()

    def _end_if_done(self) -> None:
        if self.state != "ended" and self._running == 0 and (self._cursor == len(self.items)
                                                             or self.state == "cancelling"):
            if self.state == "cancelling":  # none running, none to start: what was left is cancelled
                for waiting in self.items[self._cursor:]:
                    waiting.started = waiting.cancelled = True
                self._cursor = len(self.items)
            self.state, self.ended_at = "ended", time.time()


class BatchJobs(JobRegistry[BatchJob]):
    """The batch jobs of one backend, by id, run by at most ``CONCURRENCY`` threads shared by every job.

    The workers take the jobs' items in turn (one item of each job with items left, round robin), so a
    large batch does not hold back a small one, and exit when no job has an item left: a thousand batches
    cost two threads, none once they are done. An item that finds the engine's queue full waits for a
    place (:meth:`~..sim.runtime.Runtime.wait_for_room`), never polling; a cancel or a reset ends the wait.
    """

    def __init__(self, simulator: Simulator) -> None:
        super().__init__()
        self.simulator = simulator
        self._work_lock = threading.Lock()
        self._queue: deque[BatchJob] = deque()  # jobs that may have items to start, in turn
        self._workers = 0
        self._epoch = 0  # bumped by clear(): an item of an older epoch is neither run nor logged

    def start(self, job: BatchJob) -> BatchJob:
        # kept: at most MAX_KEPT_JOBS, and finished ones past max_stored_file_bytes of inputs go, oldest first
        self.add(job, self.simulator.config.max_stored_file_bytes)
        with self._work_lock:
            self._queue.append(job)
            while self._workers < min(CONCURRENCY, len(job.items)):  # a lone batch runs two items at once too
                self._workers += 1
                threading.Thread(target=self._work, args=(self._epoch,), name="llmsim-batch", daemon=True).start()
        if not job.items:
            job._next()  # nothing to run: it ends now
        return job

    def clear(self) -> None:
        """Cancel every job (a reset): waiting items end now, running ones with the engine's reset."""
        with self._work_lock:
            self._epoch += 1
            self._queue.clear()
        super().clear()
        self.simulator.runtime.wake_waiters()

    def _take(self, epoch: int) -> tuple[BatchJob, BatchItem] | None:
        """The next item to run, taking the jobs in turn; None when no job has one (the worker then exits)."""
        with self._work_lock:
            while self._queue and epoch == self._epoch:
                job = self._queue.popleft()
                item = job._next()
                if item is not None:
                    self._queue.append(job)  # its next item after the other jobs' turns
                    return job, item
            self._workers -= 1
            return None

    def _work(self, epoch: int) -> None:
        while (taken := self._take(epoch)) is not None:
            job, item = taken
            try:
                self._run(job, item, epoch)
            finally:
                job._done()

    def _run(self, job: BatchJob, item: BatchItem, epoch: int) -> None:
        """One item through the simulator, as a non-streamed request of its API, logged like one."""
        simulator, api = self.simulator, item.api

        def given_up() -> bool:
            return job.cancelled or epoch != self._epoch

        record = RequestRecord(method="POST", path=item.path, headers=Headers(), body=item.body, route=item.path,
                               api=api.name)
        item.request_id = api.new_request_id()
        record.request_id = item.request_id
        try:
            request = api.parse(item.body, NO_TARGET)
            request.stream = False
            request.api = api.name
            request.credential = job.owner  # the key's own limits apply to its batches
            record.model = request.model
            while True:
                try:
                    generation = simulator.start(request)
                    break
                except SimError as error:
                    if error.code != "queue_full":
                        raise
                    # behind interactive traffic: wait for a place in the queue, never fail
                    if not simulator.runtime.wait_for_room(error.details.get("sequences", 1), given_up):
                        item.cancelled = True
                        return
        except SimError as error:
            item.error, item.status = error, error.status
            record.status, record.error = error.status, error.fields()
            if epoch == self._epoch:
                simulator.finish(record)
            return
        generation.feed.wait()
        if epoch != self._epoch:  # reset while it ran: the engine ended it, and the new backend never saw it
            simulator.runtime.release(generation.feed)
            item.cancelled = True
            return
        record.status = 200
        simulator.finish(record, generation)
        response_id = f"{api.id_prefix}{item.request_id.removeprefix('req_')[:24]}"
        item.answer = api.response_body(generation, response_id)
        item.status = 200
