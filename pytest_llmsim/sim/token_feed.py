"""A request's view of its sequences while they run: the engine posts, the handler reads.

The runtime's listener (:class:`TokenFeedListener`) forwards each sequence's
tokens and finish to the feed that owns it, from whichever thread runs the
engine; the HTTP handler reads them as batches, or has the engine write a
stream's tokens itself (``TokenFeed.direct``). BoundedCache apart from the runtime, which
owns the engine, its clock and its thread.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterator, Sequence

from .sequence import SimSequence

__all__ = ["CLIENT_CHECK_INTERVAL", "FINISH", "QUIET_CHECK_INTERVAL", "TOKEN", "ClientGone", "TokenFeed",
           "TokenFeedListener", "hold"]

# How often a handler waiting for tokens checks whether its client hung up.
CLIENT_CHECK_INTERVAL = 0.05
# How often instead while the engine writes its stream's tokens itself (``TokenFeed.direct``) and those writes go
# out: a send to a client that is gone fails and wakes the handler, so each look is mostly a wasted wake-up (20
# a second per stream at the interval above: a fifth of the loop core's busy time at 64 streams). 1 s, not 0.5:
# a sub-second stream then never wakes its handler mid-way; at 1,024 closed-loop streams of 0.5 s that halved
# TTFT p50 under --io loop (docs/performance.md). It bounds how late a hang-up in a pause of such a stream is seen.
QUIET_CHECK_INTERVAL = 1.0

TOKEN = "token"
FINISH = "finish"


class TokenFeed:
    """A handler's view of its sequences (one per choice) while they run.

    The engine posts to it; the handler reads. Posts are coalesced: the
    feed keeps only each sequence's latest state, so a handler that falls
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


class TokenFeedListener:
    """Engine listener that forwards events to the owning feed."""

    def on_token(self, seq: SimSequence, now: float) -> None:
        feed = seq.owner
        if feed is None or not feed.wants_tokens:  # released, or only the finish matters
            return
        direct = feed.direct
        if direct is not None and direct(seq, seq.emitted, now):
            return
        feed.post(TOKEN, seq, seq.emitted, now)

    def on_finish(self, seq: SimSequence, now: float) -> None:
        if seq.owner is not None:
            seq.owner.post(FINISH, seq, seq.emitted, now)


def hold(seconds: float, wake: threading.Event, client_gone: Callable[[], bool] | None = None) -> bool:
    """Wait ``seconds`` of wall time, or until ``wake`` is set (False either way); True, early, when
    ``client_gone`` (asked every ``CLIENT_CHECK_INTERVAL``) says the client hung up."""
    deadline = time.monotonic() + seconds
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        if wake.wait(left if client_gone is None else min(left, CLIENT_CHECK_INTERVAL)):
            return False
        if client_gone is not None and client_gone():
            return True
