"""Drives the virtual-time engine against the wall clock.

Simulated time runs ``speed`` times faster than wall time from an anchor (``virtual = v0 + (monotonic() - w0)
* speed``); with ``speed = inf`` there is no waiting at all and the engine runs every event as soon as it can.

Threads. One engine thread sleeps until the wall time of the next engine event and runs everything then due. A
handler thread that submits work runs the events already due itself (so an instantaneous backend never hands a
request across threads). Events reach handlers through a :class:`TokenFeed` per HTTP request; a handler that falls
behind finds several tokens waiting and writes them together, so lateness never accumulates: token times are
fixed by the engine's schedule, not by the handler's pace.
"""

from __future__ import annotations

import math
import random
import threading
import time
import traceback
from collections.abc import Callable, Sequence

from .config import ConfigError, SimConfig
from .engine import Engine, SeqState, SimSequence
from .histogram import BucketCounts
from .step_engine import StepEngine
from .token_feed import FINISH, TokenFeed, TokenFeedListener

__all__ = ["Runtime"]

# The engine thread runs every event due within this many wall seconds in one
# pass: with hundreds of streams whose steps interleave, waking once per event
# costs more than the half millisecond a token may leave early.
WAKE_SLACK = 0.0005

# Most engine events run under the lock in one go; a larger backlog (thousands of sequences due at one instant)
# is worked off in slices with the lock let go between them, so other requests are never stalled behind it.
SLICE_EVENTS = 2048
MAX_ENGINE_ERRORS = 8  # engine defects kept for check(); more are dropped

# Sequences still inside the engine (arrival scheduled, queued or in the batch).
IN_ENGINE = (SeqState.PENDING, SeqState.WAITING, SeqState.RUNNING)


class Runtime:
    """Owns the engine, its clock and its thread."""

    def __init__(self, config: SimConfig, on_counts: Callable[[float, int, int], None] | None = None) -> None:
        # Entered as the lock itself (the condition's __enter__ is a Python call in front of it, per request)
        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)
        # Work that waits for a queue place (a batch's items) waits here, woken when the batch or queue changes
        # (never on _cond: a notify() meant for the engine thread must not wake it instead).
        self._room = threading.Condition(self._lock)
        self._room_waiters = 0
        self._stopping = False
        self._listener = TokenFeedListener()
        self._on_counts = on_counts  # every engine tells it when its batch or queue changes
        self.errors: list[Exception] = []  # what the engine raised (a defect), for check()
        self._live: set[TokenFeed] = set()
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
        engine.on_counts = self._counts_changed if self._room_waiters else self._on_counts
        return engine

    def _counts_changed(self, now: float, running: int, waiting: int) -> None:
        """The engine's listener while work waits for room (the engine calls ``_on_counts`` alone otherwise:
        a request's path pays for no waiter it does not have)."""
        if self._on_counts is not None:
            self._on_counts(now, running, waiting)
        self._room.notify_all()  # the engine runs under the lock

    def wait_for_room(self, count: int, give_up: Callable[[], bool], timeout: float = 1.0) -> bool:
        """Wait until ``count`` sequences would find a batch slot or a queue place (True), or until
        ``give_up()`` says so (False); it is asked whenever the batch or the queue changes, when
        :meth:`wake_waiters` is called, and every ``timeout`` wall seconds."""
        with self._lock:
            self._room_waiters += 1
            self.engine.on_counts = self._counts_changed
            try:
                while not self.can_admit(count):
                    if give_up() or self._stopping:
                        return False
                    self._room.wait(timeout)
                return True
            finally:
                self._room_waiters -= 1
                if not self._room_waiters:
                    self.engine.on_counts = self._on_counts

    def wake_waiters(self) -> None:
        """Have every :meth:`wait_for_room` ask its ``give_up`` again (a batch cancelled, a reset)."""
        with self._lock:
            self._room.notify_all()

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
               wants_tokens: bool = True, delay: float = 0.0) -> TokenFeed:
        """Start the sequences of one request; ``feed.accepted`` is False if the queue was full.

        ``arrived_at`` is the ``time.monotonic()`` at which the request reached
        the server (the kernel's receive time of its first bytes, or when its
        connection was accepted); the engine back-dates the arrival to then,
        so handler-thread scheduling delay is not latency. ``wants_tokens``
        False means the handler only needs to hear when the request is over.
        ``delay``: simulated seconds before the sequences reach the engine
        (a model still loading).
        """
        feed = TokenFeed(sequences, wants_tokens)
        with self._lock:
            if self._stopping:  # a request racing the shutdown: answer busy, never hang
                feed.accepted = False
                feed.open_count = 0
                return feed
            engine = self.engine
            now = self.virtual_now()
            # A backlog left over (a slice budget) makes the arrival a scheduled event instead.
            engine.advance(now, SLICE_EVENTS)
            at = self._virtual_at(arrived_at, now) + delay
            for seq in sequences:
                seq.owner = feed
                if not engine.submit(seq, at):
                    feed.accepted = False
            if not feed.accepted:
                for seq in sequences:
                    engine.cancel(seq)
            self._live.add(feed)
            self._run_due()
            self._wake_if_needed()
        return feed

    def cancel(self, feed: TokenFeed) -> None:
        """The client went away: its sequences leave the engine now and free their slots."""
        with self._lock:
            for seq in feed.sequences:
                if seq.state in IN_ENGINE:
                    self.engine.cancel(seq)
            self._run_due()
            self._wake_if_needed()

    def release(self, feed: TokenFeed) -> None:
        """Forget a feed whose handler is done with it."""
        # Under the lock even when the engine is done with the feed (set.discard alone would be atomic):
        # while the engine thread writes a slice of stream tokens, finishing handlers then wait here, off
        # the GIL, instead of taking it from the engine at each of its sends. Lock-free, 256 closed-loop
        # streams' gap p99 went from 1.7x to 3.2x the ITL (benchmarks/closed_loop_streams.py, threads).
        with self._lock:
            self._live.discard(feed)
            for seq in feed.sequences:  # unlink, so both go at once, not at the next GC
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
        for feed in list(self._live):
            for seq in feed.sequences:
                if seq.state in IN_ENGINE:
                    seq.state = SeqState.CANCELLED
                    feed.post(FINISH, seq, seq.emitted, old.now)
        self._live.clear()
        self.engine = self._new_engine(self.config)
        self.engine.now, self.engine.cache = old.now, old.cache

    def update(self, config: SimConfig) -> None:
        """Apply new settings from now on, keeping the cache, the batch and the clock."""
        with self._lock:
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
        with self._lock:
            for feed in list(self._live):
                for seq in feed.sequences:
                    if seq.state in IN_ENGINE:
                        seq.state = SeqState.CANCELLED
                        feed.post(FINISH, seq, seq.emitted, self.engine.now)
            self._live.clear()
            self.config = config
            self.engine = self._new_engine(config)
            self._anchor_virtual = 0.0
            self._anchor_wall = time.monotonic()
            self._cond.notify()
            self._room.notify_all()

    @property
    def in_flight(self) -> int:
        """Requests submitted and not yet released by their handlers."""
        with self._lock:
            return len(self._live)

    def running_and_waiting(self) -> tuple[int, int]:
        with self._lock:
            return self.engine.running_count, self.engine.waiting_count

    def adapters(self) -> tuple[list[str], list[str]]:
        """LoRA adapters of the running batch and of the waiting queue."""
        with self._lock:
            return self.engine.adapters()

    def kv_state(self) -> tuple[int, int]:
        """KV-cache blocks held by the batch now, and preemptions since the last reset."""
        with self._lock:
            return self.engine.kv.used, self.engine.preemptions

    def step_tokens(self) -> BucketCounts:
        """The tokens of each engine step since the last reset (a copy; the step scheduler's)."""
        with self._lock:
            return self.engine.step_tokens.copy()

    def max_running(self) -> int:
        with self._lock:
            return self.engine.max_running

    def stop(self) -> None:
        """Stop the engine thread (in-flight requests are finished as cancelled)."""
        self.reset(self.config)
        with self._lock:
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
        with self._lock:
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
