"""Generations that run with no client attached (the Responses API's ``background: true``).

The request is answered at once with the queued object; a thread drives the
generation through the engine as a stream would, keeping every event it
renders, numbered (``sequence_number``), so any number of readers can follow
it live or resume after an event (``GET ...?stream=true&starting_after=N``),
and a client that hangs up does not stop it. When it ends, the complete
answer is stored like any other (``GET /v1/responses/{id}``); a cancel ends
it early. HTTP-side only: the simulator sees an ordinary generation.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

from ..api.base import StreamRenderer, WireAPI
from ..sim.generation import Generation, Outcome
from ..sim.request_log import RequestRecord
from ..sim.sequence import SeqState
from ..sim.simulator import Simulator
from ..sim.token_feed import FINISH
from .job_registry import JobRegistry

__all__ = ["BackgroundJob", "BackgroundJobs"]


class BackgroundJob:
    """One background generation: its status, its events so far, and how to read them."""

    def __init__(self, simulator: Simulator, record: RequestRecord, generation: Generation, api: WireAPI,
                 response_id: str) -> None:
        self.simulator = simulator
        self.record = record
        self.generation = generation
        self.api = api
        self.response_id = response_id
        self.status = "queued"
        self.events: list[bytes] = []
        self.size_bytes = 0  # of the events kept: the registry's byte bound counts it
        self._ran = False  # its thread is done with it (a cancel sets the status before)
        self._cond = threading.Condition()

    @property
    def id(self) -> str:
        return self.response_id

    @property
    def over(self) -> bool:
        return self.status in ("completed", "incomplete", "cancelled", "failed")

    def body(self) -> dict[str, Any]:
        """The response object now: in progress (or queued), or the stored complete one."""
        if self.status in ("completed", "incomplete"):
            stored = self.simulator.conversations.get(self.response_id)
            if stored is not None:
                return stored.body
        pending: Callable[[Generation, str, str], dict[str, Any]] = self.api.pending_body
        return pending(self.generation, self.response_id, self.status)

    def start(self) -> None:
        threading.Thread(target=self._run, name=f"llmsim-background-{self.response_id}", daemon=True).start()

    def _keep(self, rendered: bytes) -> None:
        """Keep rendered bytes as whole events (an SSE event ends with a blank line; JSON has no raw newline)."""
        if not rendered:
            return
        with self._cond:
            self.events.extend(event + b"\n\n" for event in rendered.split(b"\n\n") if event)
            self.size_bytes += len(rendered)
            self._cond.notify_all()

    def _run(self) -> None:
        generation = self.generation
        renderer: StreamRenderer = self.api.stream(generation, self.response_id)
        outputs = generation.outputs
        sent = [0] * len(outputs)
        finished = True
        self.status = "in_progress"
        self._keep(renderer.opening(0))
        for batch in generation.feed.batches():
            for kind, seq, emitted, _ in batch:
                index = seq.index
                pieces = outputs[index].pieces[sent[index]:emitted]
                self._keep(b"".join(renderer.token(index, position, piece)
                                    for position, piece in enumerate(pieces, sent[index])))
                sent[index] = emitted
                if kind == FINISH:
                    finished = finished and seq.state is SeqState.FINISHED
        if finished and self.status != "cancelled":
            self._keep(renderer.finish(0) + renderer.closing())
            self.simulator.finish(self.record, generation)
            self.simulator.remember(self.response_id, generation, self.api.response_body(generation, self.response_id))
            incomplete = outputs[0].finish_reason == "length"
            self.status = "incomplete" if incomplete else "completed"
        else:
            self.simulator.finish(self.record, generation, Outcome.CUT_BY_FAULT, sum(sent))
            self.status = "cancelled"
        with self._cond:
            self._ran = True
            self._cond.notify_all()

    def cancel(self) -> None:
        """End it now (a no-op once it is over)."""
        if not self.over:
            self.status = "cancelled"
            self.simulator.cancel(self.generation)

    def wait(self) -> None:
        """Return once the job's thread has finished with it (a cancelled one: its generation has stopped)."""
        with self._cond:
            while not self._ran:
                self._cond.wait(0.5)

    def read(self, after: int = -1) -> Iterator[bytes]:
        """The events after event number ``after`` (-1: all), as they come, until the job is over."""
        position = after + 1
        while True:
            with self._cond:
                while position >= len(self.events) and not self.over:
                    self._cond.wait(0.5)
                batch = self.events[position:]
                over = self.over
            if batch:
                position += len(batch)
                yield b"".join(batch)
            elif over:
                return


class BackgroundJobs(JobRegistry[BackgroundJob]):
    """The background jobs of one backend, by response id."""
