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

    @property
    def size_bytes(self) -> int: ...

    def cancel(self) -> None: ...


J = TypeVar("J", bound=Job)


class JobRegistry(Generic[J]):
    """Jobs by id, oldest first; past ``max_kept``, the oldest finished ones go. ``clear()`` cancels all."""

    def __init__(self, max_kept: int = MAX_KEPT_JOBS) -> None:
        self.max_kept = max_kept
        self._lock = threading.Lock()
        self._jobs: OrderedDict[str, J] = OrderedDict()

    def add(self, job: J, max_bytes: int | None = None) -> None:
        """Keep ``job``; past ``max_kept`` jobs, or ``max_bytes`` of what they hold, the oldest finished go."""
        with self._lock:
            self._jobs[job.id] = job
            held = sum(kept.size_bytes for kept in self._jobs.values()) if max_bytes is not None else 0
            while len(self._jobs) > self.max_kept or (max_bytes is not None and held > max_bytes):
                oldest = next(iter(self._jobs))
                if not self._jobs[oldest].over or oldest == job.id:
                    break
                held -= self._jobs.pop(oldest).size_bytes

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
