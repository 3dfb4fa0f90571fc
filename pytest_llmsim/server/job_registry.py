"""The jobs a backend keeps by id (background responses, batches): bounded, never dropping a running one."""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Generic, Protocol, TypeVar

__all__ = ["Job", "JobRegistry"]

MAX_KEPT_JOBS = 1_000  # finished jobs kept for readers that come back, newest first


class Job(Protocol):
    """What the registry needs of a job."""

    @property
    def id(self) -> str: ...

    @property
    def over(self) -> bool: ...

    def cancel(self) -> None: ...


J = TypeVar("J", bound=Job)


class JobRegistry(Generic[J]):
    """Jobs by id, oldest first; past ``max_kept``, the oldest finished ones go. ``clear()`` cancels all."""

    def __init__(self, max_kept: int = MAX_KEPT_JOBS) -> None:
        self.max_kept = max_kept
        self._lock = threading.Lock()
        self._jobs: OrderedDict[str, J] = OrderedDict()

    def add(self, job: J) -> None:
        with self._lock:
            self._jobs[job.id] = job
            while len(self._jobs) > self.max_kept:
                oldest = next(iter(self._jobs))
                if not self._jobs[oldest].over:
                    break
                del self._jobs[oldest]

    def get(self, job_id: str) -> J | None:
        with self._lock:
            return self._jobs.get(job_id)

    def delete(self, job_id: str) -> bool:
        with self._lock:
            return self._jobs.pop(job_id, None) is not None

    def all(self) -> list[J]:
        with self._lock:
            return list(self._jobs.values())

    def clear(self) -> None:
        with self._lock:
            jobs = list(self._jobs.values())
            self._jobs.clear()
        for job in jobs:
            job.cancel()
