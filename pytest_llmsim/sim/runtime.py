"""Drives the virtual-time engine against the wall clock.

Simulated time runs ``speed`` times faster than wall time from an anchor (``virtual = v0 + (monotonic() - w0)
* speed``); with ``speed = inf`` there is no waiting at all and the engine runs every event as soon as it can.

Threads. One engine thread sleeps until the wall time of the next engine event and runs everything then due. A
handler thread that submits work runs the events already due itself (so an instantaneous backend never hands a
request across threads). Events reach handlers through a :class:`Ticket` per HTTP request; a handler that falls
behind finds several tokens waiting and writes them together, so lateness never accumulates: token times are
fixed by the engine's schedule, not by the handler's pace.
"""

from __future__ import annotations

import math
import queue
import random
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence

from .config import ConfigError, SimConfig
from .engine import Engine, SeqState, SimSequence
from .step_engine import StepEngine

__all__ = ["ClientGone", "Runtime", "Ticket"]

# The engine thread runs every event due within this many wall seconds in one
# pass: with hundreds of streams whose steps interleave, waking once per event
# costs more than the half millisecond a token may leave early.
WAKE_SLACK = 0.0005

# How often a handler waiting for tokens checks whether its client hung up.
CLIENT_CHECK_INTERVAL = 0.05
# How often instead while the engine writes its stream's tokens itself (``Ticket.direct``) and those writes go
# out: a send to a client that is gone fails and wakes the handler, so each look is mostly a wasted wake-up (20
# a second per stream at the interval above: a fifth of the loop core's busy time at 64 streams). 1 s, not 0.5:
# a sub-second stream then never wakes its handler mid-way; at 1,024 closed-loop streams of 0.5 s that halved
# TTFT p50 under --io loop (docs/performance.md). It bounds how late a hang-up in a pause of such a stream is seen.
QUIET_CHECK_INTERVAL = 1.0

# Most engine events run under the lock in one go; a larger backlog (thousands of sequences due at one instant)
# is worked off in slices with the lock let go between them, so other requests are never stalled behind it.
SLICE_EVENTS = 2048
MAX_ENGINE_ERRORS = 8  # engine defects kept for check(); more are dropped

TOKEN = "token"
FINISH = "finish"
# Sequences still inside the engine (arrival scheduled, queued or in the batch).
IN_ENGINE = (SeqState.PENDING, SeqState.WAITING, SeqState.RUNNING)


class Ticket:
    """A handler's view of its sequences (one per choice) while they run.

    The engine posts to it; the handler reads. Posts are coalesced: the
    ticket keeps only each sequence's latest state, so a handler that falls
    behind (a client that does not read) finds one entry per choice waiting,
    never a backlog that grows with every token.
    """

    __slots__ = ("_finished", "_lock", "_pending", "_wake", "accepted", "direct", "direct_writes", "open_count",
                 "sequences", "wants_tokens")

    def __init__(self, sequences: Sequence[SimSequence], wants_tokens: bool = True) -> None:
        self.sequences = list(sequences)
        # Optional fast path: called with (sequence, tokens emitted, virtual time) by
        # whichever thread runs the engine; True means the tokens went out, no post needed.
        self.direct: Callable[[SimSequence, int, float], bool] | None = None
        self.direct_writes = 0  # sends ``direct``'s writer made (it counts them, under the runtime's lock)
        # False for answers sent whole: only the finish wakes the handler.
        self.wants_tokens = wants_tokens
        self._lock = threading.Lock()
        # sequence -> (kind, tokens emitted, virtual time its oldest unread news was due)
        self._pending: dict[SimSequence, tuple[str, int, float]] = {}
        # One item per time _pending turns non-empty, so the reader sleeps in C; made when one first waits.
        self._wake: queue.SimpleQueue[None] | None = None
        self.accepted = True
        self.open_count = len(self.sequences)
        # Sequences whose finish was posted; the engine posts a sequence's finish once, after its last change.
        self._finished = 0

    def post(self, kind: str, seq: SimSequence, emitted: int, due: float) -> None:
        """Record that ``seq`` has emitted ``emitted`` tokens by virtual time ``due`` (and finished,
        for ``FINISH``). The earliest ``due`` not yet read is kept: how late the reader is."""
        with self._lock:
            pending = self._pending
            was_empty = not pending
            earlier = pending.get(seq)
            pending[seq] = (kind, emitted, due if earlier is None else earlier[2])
            if kind == FINISH:
                self._finished += 1
            wake = self._wake
        if was_empty and wake is not None:
            wake.put(None)

    def _waker(self) -> queue.SimpleQueue[None]:
        """The reader's wake-up queue, made on its first wait with one item if news is already pending."""
        with self._lock:
            if self._wake is None:
                self._wake = queue.SimpleQueue()
                if self._pending:
                    self._wake.put(None)
            return self._wake

    def batches(self, client_gone: Callable[[], bool] | None = None
                ) -> Iterator[list[tuple[str, SimSequence, int, float]]]:
        """Block for news, yielding ``(kind, sequence, tokens emitted, due)`` for each sequence that moved
        (``due``: the virtual time its oldest news in the batch was due).

        ``client_gone`` is asked at least every ``CLIENT_CHECK_INTERVAL`` wall
        seconds, whether or not tokens are arriving (every ``QUIET_CHECK_INTERVAL``
        while ``direct``'s sends go out: a failed one wakes the reader); when it
        says so, :class:`ClientGone` is raised (the caller cancels the request).
        """
        wake = self._waker()
        next_check = time.monotonic() + CLIENT_CHECK_INTERVAL
        seen_writes = self.direct_writes
        while self.open_count:
            if client_gone is None:
                wake.get()
            else:
                timeout = CLIENT_CHECK_INTERVAL
                while True:
                    try:
                        wake.get(timeout=timeout)
                        break
                    except queue.Empty:
                        if self.direct_writes != seen_writes:  # the engine's writes go out: wait longer
                            seen_writes = self.direct_writes
                            timeout = QUIET_CHECK_INTERVAL
                            continue
                        timeout = CLIENT_CHECK_INTERVAL
                        next_check = time.monotonic() + CLIENT_CHECK_INTERVAL
                        if client_gone():
                            raise ClientGone from None
            # A wake-up taken is news read, before anything else: left unread, the engine's next post
            # would find the news non-empty, wake nobody, and a later wait() would block for ever.
            with self._lock:
                pending, self._pending = self._pending, {}
            batch = [(kind, seq, emitted, due) for seq, (kind, emitted, due) in pending.items()]
            self.open_count -= sum(1 for event in batch if event[0] == FINISH)
            if client_gone is not None:
                now = time.monotonic()
                if now >= next_check:
                    next_check = now + CLIENT_CHECK_INTERVAL
                    if client_gone():
                        raise ClientGone
            if batch:
                yield batch

    @property
    def over(self) -> bool:
        """Whether every sequence's finish has been posted: the engine will not touch them again."""
        return self._finished == len(self.sequences)

    def wait(self, client_gone: Callable[[], bool] | None = None) -> None:
        """Block until every sequence has left the engine (or raise :class:`ClientGone`)."""
        if self.over:  # already (an instantaneous backend): nothing to wait for
            return
        for _ in self.batches(client_gone):
            pass


class ClientGone(Exception):
    """The client closed its connection while its request was waiting for tokens."""


class _TicketListener:
    """Engine listener that forwards events to the owning ticket."""

    def on_token(self, seq: SimSequence, now: float) -> None:
        ticket = seq.owner
        if ticket is None or not ticket.wants_tokens:  # released, or only the finish matters
            return
        direct = ticket.direct
        if direct is not None and direct(seq, seq.emitted, now):
            return
        ticket.post(TOKEN, seq, seq.emitted, now)

    def on_finish(self, seq: SimSequence, now: float) -> None:
        if seq.owner is not None:
            seq.owner.post(FINISH, seq, seq.emitted, now)


class Runtime:
    """Owns the engine, its clock and its thread."""

    def __init__(self, config: SimConfig, on_counts: Callable[[float, int, int], None] | None = None) -> None:
        self._cond = threading.Condition()
        self._stopping = False
        self._listener = _TicketListener()
        self._on_counts = on_counts  # every engine tells it when its batch or queue changes
        self.errors: list[Exception] = []  # what the engine raised (a defect), for check()
        self._live: set[Ticket] = set()
        self.config = config
        self.engine = self._new_engine(config)
        self._anchor_virtual = 0.0
        self._anchor_wall = time.monotonic()
        self._wake_at = math.inf  # virtual time the engine thread sleeps until
        self._thread = threading.Thread(target=self._loop, name="llmsim-engine", daemon=True)
        self._thread.start()

    def _new_engine(self, config: SimConfig) -> Engine:
        kind = StepEngine if config.scheduler == "step" else Engine
        engine = kind(config, self._listener, random.Random(f"latency:{config.seed}"))
        engine.on_counts = self._on_counts
        return engine

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

    def lateness(self, due: float) -> float | None:
        """Wall seconds since virtual time ``due`` came (``time.monotonic()`` now minus its wall time);
        None at infinite speed, where nothing is ever due at a wall time."""
        if math.isinf(self.config.speed):
            return None
        return time.monotonic() - self._wall_time_of(due)

    # --- work ---

    def can_admit(self, count: int) -> bool:
        """Whether ``count`` more sequences would find a batch slot or a queue place now.

        Checked before a request's outputs are planned, so an oversized
        request costs nothing before its 503; :meth:`submit` checks again.
        """
        engine, config = self.engine, self.config  # no lock: a hint, submit() decides
        free = max(0, config.max_batch_size - engine.running_count)
        return count <= free + max(0, config.max_waiting - engine.waiting_count)

    def submit(self, sequences: Sequence[SimSequence], arrived_at: float | None = None,
               wants_tokens: bool = True, delay: float = 0.0) -> Ticket:
        """Start the sequences of one request; ``ticket.accepted`` is False if the queue was full.

        ``arrived_at`` is the ``time.monotonic()`` at which the request reached
        the server (the kernel's receive time of its first bytes, or when its
        connection was accepted); the engine back-dates the arrival to then,
        so handler-thread scheduling delay is not latency. ``wants_tokens``
        False means the handler only needs to hear when the request is over.
        ``delay``: simulated seconds before the sequences reach the engine
        (a model still loading).
        """
        ticket = Ticket(sequences, wants_tokens)
        with self._cond:
            if self._stopping:  # a request racing the shutdown: answer busy, never hang
                ticket.accepted = False
                ticket.open_count = 0
                return ticket
            engine = self.engine
            now = self.virtual_now()
            # A backlog left over (a slice budget) makes the arrival a scheduled event instead.
            engine.advance(now, SLICE_EVENTS)
            at = self._virtual_at(arrived_at, now) + delay
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
        """The client went away: its sequences leave the engine now and free their slots."""
        with self._cond:
            for seq in ticket.sequences:
                if seq.state in IN_ENGINE:
                    self.engine.cancel(seq)
            self._run_due()
            self._wake_if_needed()

    def release(self, ticket: Ticket) -> None:
        """Forget a ticket whose handler is done with it."""
        # Under the lock even when the engine is done with the ticket (set.discard alone would be atomic):
        # while the engine thread writes a slice of stream tokens, finishing handlers then wait here, off
        # the GIL, instead of taking it from the engine at each of its sends. Lock-free, 256 closed-loop
        # streams' gap p99 went from 1.7x to 3.2x the ITL (benchmarks/closed_loop_streams.py, threads).
        with self._cond:
            self._live.discard(ticket)
            for seq in ticket.sequences:  # unlink, so both go at once, not at the next GC
                seq.owner = None

    def _wake_if_needed(self) -> None:
        """Wake the engine thread only if work is now due before it would wake anyway."""
        due = self.engine.next_event_time()
        if due is not None and due < self._wake_at:
            self._cond.notify()

    def _run_due(self, slack: float = 0.0) -> bool:
        """Run the events due now, or within ``slack`` wall seconds from now, one slice at most.

        Returns False when due events are left for the engine thread: no
        caller holds the lock for more than ``SLICE_EVENTS`` events, however
        many sequences fall due at one instant.
        """
        to = math.inf if math.isinf(self.config.speed) else self.virtual_now() + slack * self.config.speed
        try:
            return self.engine.advance(to, SLICE_EVENTS)
        except Exception as error:  # a defect in the engine: never let it strand the requests in flight
            self._fail(error)
            return True

    def _fail(self, error: Exception) -> None:
        """The engine raised: keep the error (``check()`` raises it), end every request in flight as a
        reset does (their handlers return), and go on with a fresh engine on the same clock and cache."""
        if len(self.errors) < MAX_ENGINE_ERRORS:
            traceback.clear_frames(error.__traceback__)
            self.errors.append(error)
        old = self.engine
        for ticket in list(self._live):
            for seq in ticket.sequences:
                if seq.state in IN_ENGINE:
                    seq.state = SeqState.CANCELLED
                    ticket.post(FINISH, seq, seq.emitted, old.now)
        self._live.clear()
        self.engine = self._new_engine(self.config)
        self.engine.now, self.engine.cache = old.now, old.cache

    def update(self, config: SimConfig) -> None:
        """Apply new settings from now on, keeping the cache, the batch and the clock."""
        with self._cond:
            now = self.virtual_now()
            self.engine.advance(now)
            self._anchor_virtual, self._anchor_wall = now, time.monotonic()
            if config.scheduler != self.config.scheduler:  # another engine kind, on the same clock and cache
                if self.engine.running_count or self.engine.waiting_count or self.engine.next_event_time() is not None:
                    raise ConfigError("the scheduler can change only while the backend is idle "
                                      "(no request in flight); or set it with reset()")
                engine = self._new_engine(config)
                engine.now, engine.cache = self.engine.now, self.engine.cache
                self.engine = engine
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
                        ticket.post(FINISH, seq, seq.emitted, self.engine.now)
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

    def adapters(self) -> tuple[list[str], list[str]]:
        """LoRA adapters of the running batch and of the waiting queue."""
        with self._cond:
            return self.engine.adapters()

    def kv_state(self) -> tuple[int, int]:
        """KV-cache blocks held by the batch now, and preemptions since the last reset."""
        with self._cond:
            return self.engine.kv.used, self.engine.preemptions

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

    @property
    def stopped(self) -> bool:
        return self._stopping

    def restart(self) -> None:
        """Run again after :meth:`stop`, with a fresh engine and clock."""
        if not self._stopping:
            return
        self._thread.join()
        self.reset(self.config)
        self._stopping = False
        self._wake_at = math.inf
        self._thread = threading.Thread(target=self._loop, name="llmsim-engine", daemon=True)
        self._thread.start()

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
                if not self._run_due(WAKE_SLACK):
                    # More is due: let handlers and submitters in between slices.
                    self._cond.release()
                    time.sleep(0)
                    self._cond.acquire()
