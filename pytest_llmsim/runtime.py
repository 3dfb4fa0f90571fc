"""Drives the virtual-time engine against the wall clock.

Simulated time runs ``speed`` times faster than wall time from an anchor
(``virtual = v0 + (monotonic() - w0) * speed``); with ``speed = inf`` there is
no waiting at all and the engine runs every event as soon as it can.

Threads. One engine thread sleeps until the wall time of the next engine
event and runs everything then due. A handler thread that submits work runs
the events already due itself (so an instantaneous backend never hands a
request across threads). Events reach handlers through a :class:`Ticket`, a
``SimpleQueue`` per HTTP request; a handler that falls behind finds several
tokens waiting and writes them together, so lateness never accumulates: token
times are fixed by the engine's schedule, not by the handler's pace.
"""

from __future__ import annotations

import math
import queue
import random
import threading
import time
from collections.abc import Callable, Iterator, Sequence

from .config import SimConfig
from .engine import Engine, SeqState, SimSequence

__all__ = ["ClientGone", "Runtime", "Ticket"]

# The engine thread runs every event due within this many wall seconds in one
# pass: with hundreds of streams whose steps interleave, waking once per event
# costs more than the half millisecond a token may leave early.
WAKE_SLACK = 0.0005

# How often a handler waiting for tokens checks whether its client hung up.
CLIENT_CHECK_INTERVAL = 0.05

TOKEN = "token"
FINISH = "finish"
# Sequences still inside the engine (arrival scheduled, queued or in the batch).
IN_ENGINE = (SeqState.PENDING, SeqState.WAITING, SeqState.RUNNING)


class Ticket:
    """A handler's view of its sequences (one per choice) while they run."""

    __slots__ = ("accepted", "direct", "events", "open_count", "sequences")

    def __init__(self, sequences: Sequence[SimSequence]) -> None:
        self.sequences = list(sequences)
        # Optional fast path: called with (sequence, tokens emitted) by whichever
        # thread runs the engine; True means the tokens went out, no event needed.
        self.direct: Callable[[SimSequence, int], bool] | None = None
        # (kind, sequence, tokens emitted so far): the count travels with the
        # event because the engine may have moved on by the time it is read.
        self.events: queue.SimpleQueue[tuple[str, SimSequence, int]] = queue.SimpleQueue()
        self.accepted = True
        self.open_count = len(self.sequences)

    def batches(self, client_gone: Callable[[], bool] | None = None
                ) -> Iterator[list[tuple[str, SimSequence, int]]]:
        """Block for the next events, yielding everything already due at once.

        While nothing is due, ``client_gone`` is asked every
        ``CLIENT_CHECK_INTERVAL`` wall seconds; when it says so,
        :class:`ClientGone` is raised (the caller cancels the request).
        """
        events = self.events
        while self.open_count:
            if client_gone is None:
                first = events.get()
            else:
                while True:
                    try:
                        first = events.get(timeout=CLIENT_CHECK_INTERVAL)
                        break
                    except queue.Empty:
                        if client_gone():
                            raise ClientGone from None
            batch = [first]
            while True:
                try:
                    batch.append(events.get_nowait())
                except queue.Empty:
                    break
            self.open_count -= sum(1 for event in batch if event[0] == FINISH)
            yield batch

    def wait(self, client_gone: Callable[[], bool] | None = None) -> None:
        """Block until every sequence has left the engine (or raise :class:`ClientGone`)."""
        for _ in self.batches(client_gone):
            pass


class ClientGone(Exception):
    """The client closed its connection while its request was waiting for tokens."""


class _TicketListener:
    """Engine listener that forwards events to the owning ticket's queue."""

    def on_token(self, seq: SimSequence, now: float) -> None:
        ticket = seq.owner
        direct = ticket.direct
        if direct is not None and direct(seq, seq.emitted):
            return
        ticket.events.put((TOKEN, seq, seq.emitted))

    def on_finish(self, seq: SimSequence, now: float) -> None:
        seq.owner.events.put((FINISH, seq, seq.emitted))


class Runtime:
    """Owns the engine, its clock and its thread."""

    def __init__(self, config: SimConfig) -> None:
        self._cond = threading.Condition()
        self._stopping = False
        self._listener = _TicketListener()
        self._live: set[Ticket] = set()
        self.config = config
        self.engine = self._new_engine(config)
        self._anchor_virtual = 0.0
        self._anchor_wall = time.monotonic()
        self._wake_at = math.inf  # virtual time the engine thread sleeps until
        self._thread = threading.Thread(target=self._loop, name="llmsim-engine", daemon=True)
        self._thread.start()

    def _new_engine(self, config: SimConfig) -> Engine:
        return Engine(config, self._listener, random.Random(f"latency:{config.seed}"))

    # --- clock ---

    @property
    def speed(self) -> float:
        return self.config.speed

    def virtual_now(self) -> float:
        """Simulated time now (never behind the engine's clock)."""
        if math.isinf(self.config.speed):
            return self.engine.now
        elapsed = (time.monotonic() - self._anchor_wall) * self.config.speed
        return max(self.engine.now, self._anchor_virtual + elapsed)

    def to_wall(self, sim_seconds: float) -> float:
        """Wall seconds that ``sim_seconds`` of simulated time take."""
        return 0.0 if math.isinf(self.config.speed) else sim_seconds / self.config.speed

    def _virtual_at(self, wall: float | None, now: float) -> float:
        """Virtual time of a past wall instant, never before this engine began."""
        if wall is None or math.isinf(self.config.speed):
            return now
        virtual = self._anchor_virtual + (wall - self._anchor_wall) * self.config.speed
        return min(now, max(self._anchor_virtual, virtual))

    def _wall_time_of(self, virtual: float) -> float:
        return self._anchor_wall + (virtual - self._anchor_virtual) / self.config.speed

    # --- work ---

    def submit(self, sequences: Sequence[SimSequence], arrived_at: float | None = None) -> Ticket:
        """Start the sequences of one request; ``ticket.accepted`` is False if the queue was full.

        ``arrived_at`` is the ``time.monotonic()`` at which the request reached
        the server (the kernel's receive time of its first bytes, or when its
        connection was accepted); the engine back-dates the arrival to then,
        so handler-thread scheduling delay is not latency.
        """
        ticket = Ticket(sequences)
        with self._cond:
            if self._stopping:  # a request racing the shutdown: answer busy, never hang
                ticket.accepted = False
                ticket.open_count = 0
                return ticket
            engine = self.engine
            now = self.virtual_now()
            engine.advance(now)
            at = self._virtual_at(arrived_at, now)
            for seq in sequences:
                seq.owner = ticket
                if not engine.submit(seq, at):
                    ticket.accepted = False
            if not ticket.accepted:
                for seq in sequences:
                    engine.cancel(seq)
            self._live.add(ticket)
            self._run_due()
            self._wake_if_needed()
        return ticket

    def cancel(self, ticket: Ticket) -> None:
        """The client went away: free the ticket's slots (at each sequence's next step)."""
        with self._cond:
            for seq in ticket.sequences:
                if seq.state in IN_ENGINE:
                    self.engine.cancel(seq)
            self._run_due()
            self._wake_if_needed()

    def release(self, ticket: Ticket) -> None:
        """Forget a ticket whose handler is done with it."""
        with self._cond:
            self._live.discard(ticket)

    def _wake_if_needed(self) -> None:
        """Wake the engine thread only if work is now due before it would wake anyway."""
        due = self.engine.next_event_time()
        if due is not None and due < self._wake_at:
            self._cond.notify()

    def _run_due(self, slack: float = 0.0) -> None:
        """Run the events due now, or within ``slack`` wall seconds from now."""
        if math.isinf(self.config.speed):
            self.engine.advance(math.inf)
        else:
            self.engine.advance(self.virtual_now() + slack * self.config.speed)

    def update(self, config: SimConfig) -> None:
        """Apply new settings from now on, keeping the cache, the batch and the clock."""
        with self._cond:
            now = self.virtual_now()
            self.engine.advance(now)
            self._anchor_virtual, self._anchor_wall = now, time.monotonic()
            self.config = config
            self.engine.reconfigure(config)
            self._cond.notify()

    def reset(self, config: SimConfig) -> None:
        """Start afresh with ``config``: new engine, cache and clock.

        Requests still in flight from before are finished as cancelled, so
        their handlers end instead of hanging.
        """
        with self._cond:
            for ticket in list(self._live):
                for seq in ticket.sequences:
                    if seq.state in IN_ENGINE:
                        seq.state = SeqState.CANCELLED
                        seq.cancel_requested = True
                        ticket.events.put((FINISH, seq, seq.emitted))
            self._live.clear()
            self.config = config
            self.engine = self._new_engine(config)
            self._anchor_virtual = 0.0
            self._anchor_wall = time.monotonic()
            self._cond.notify()

    @property
    def in_flight(self) -> int:
        """Requests submitted and not yet released by their handlers."""
        with self._cond:
            return len(self._live)

    def running_and_waiting(self) -> tuple[int, int]:
        with self._cond:
            return self.engine.running_count, self.engine.waiting_count

    def max_running(self) -> int:
        with self._cond:
            return self.engine.max_running

    def stop(self) -> None:
        """Stop the engine thread (in-flight requests are finished as cancelled)."""
        self.reset(self.config)
        with self._cond:
            self._stopping = True
            self._cond.notify()
        self._thread.join()

    def _loop(self) -> None:
        with self._cond:
            while not self._stopping:
                due = self.engine.next_event_time()
                if due is None:
                    self._wake_at = math.inf
                    self._cond.wait()
                    continue
                if not math.isinf(self.config.speed):
                    delay = self._wall_time_of(due) - time.monotonic() - WAKE_SLACK
                    if delay > 0:
                        self._wake_at = due
                        self._cond.wait(delay)
                        continue
                self._wake_at = -math.inf  # busy: running events now
                self._run_due(WAKE_SLACK)
