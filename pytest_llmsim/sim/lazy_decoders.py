"""Lazy decoders: the step-cost engine's decoders advanced only when visited, for a listener that wants no tokens.

A decoder that emits on every step gains one token per step, at the step's end: nothing about it needs a
decision until it emits its last token or, with a bounded KV cache, finds its blocks full before a token
(it may have to preempt another). Such a decoder is lazy: its ``emitted``, ``last_step`` and
``last_token_at`` stay as they were when it joined and are brought forward only when it is visited (it
is due, it leaves the batch, or something reads it), and the engine walks only the lazy decoders due at a
step. The context the lazy decoders attend is ``base + len(lazy_decoders) * through``, ``base`` summing
prompt + emitted - last_step, which advancing leaves as it is. The calibration, which runs thousands of
simulated sweeps, wants no tokens; the HTTP runtime does, and never has lazy decoders.

With a bounded cache a lazy decoder takes a new block every ``block_size`` steps, at the steps of one phase
(``step % block_size``, ``SimSequence.block_phase``): each phase's decoders are kept together, so a step of
lazy decoders alone takes its phase's blocks in one sum where the cache has them all (nobody can then find it
full, so their turns do not matter: the step stays quiet), and its decoders are visited, in their turn, only
in a step that is walked. A decoder's ``kv_private`` and ``kv_boundary`` catch up with the blocks it took
when it is next visited; the ledger's ``used`` is right at every step.
"""

from __future__ import annotations

import sys
from heapq import heappop, heappush

from .kv_blocks import KVBlocks
from .sequence import SimSequence

__all__ = ["LazyDecoders"]


class LazyDecoders:
    """The lazy decoders, the steps they are due at, and the step they are current to once advanced."""

    def __init__(self, kv: KVBlocks) -> None:
        self.kv = kv
        self.through = -1  # the latest step every lazy decoder has emitted in ...
        self.through_end = 0.0  # ... and when it ended
        self._members: dict[SimSequence, None] = {}
        self._base = 0
        self._due: dict[int, list[SimSequence]] = {}
        self._due_steps: list[int] = []  # a heap of _due's steps (some already visited)
        # With a bounded cache, the lazy decoders that take a block at the steps of each phase (step % block_size)
        self.phases: list[dict[SimSequence, None]] = [{} for _ in range(kv.block_size)]

    def __contains__(self, seq: SimSequence) -> bool:
        return seq in self._members

    def __len__(self) -> int:
        return len(self._members)

    def members(self) -> list[SimSequence]:
        return list(self._members)

    def context(self) -> int:
        """The tokens the lazy decoders attend at step ``through``: their prompts and what they emitted."""
        return self._base + len(self._members) * self.through

    def join(self, seq: SimSequence) -> None:
        """``seq``, current to step ``through``, is lazy from the next step on."""
        self._members[seq] = None
        self._base += len(seq.prompt_tokens) + seq.emitted - seq.last_step
        self._book(seq)

    def _book(self, seq: SimSequence) -> None:
        """The step the lazy decoder ``seq`` (current to its ``last_step``) is due at next, and its blocks' phase."""
        # Due at its last token; with a bounded KV cache also before the token that finds its blocks full (it may
        # have to preempt), unless that is within a block's steps: it then takes a block at every step of a phase.
        # Unbounded, a new block needs no decision: advance() counts them.
        last, left = seq.last_step, seq.output_length - seq.emitted
        due = last + (left if left > 1 else 1)
        phase = -1
        kv = self.kv
        if kv.capacity is not None:
            room = seq.kv_boundary - seq.emitted
            nearer = last + 1 + (room if room > 0 else 0)
            if nearer < due:
                if nearer - last <= kv.block_size:  # (a reservation's room may be longer: due then)
                    phase = nearer % kv.block_size
                else:
                    due = nearer
        if seq.block_phase != phase:
            if seq.block_phase >= 0:
                del self.phases[seq.block_phase][seq]
            if phase >= 0:
                self.phases[phase][seq] = None
            seq.block_phase = phase
        if seq.due_step == due:
            return  # booked already (a visit for a block in its phase)
        seq.due_step = due
        if due in self._due:
            self._due[due].append(seq)
        else:
            self._due[due] = [seq]
            heappush(self._due_steps, due)

    def emit_in_place(self, seq: SimSequence, step: int, end: float) -> bool:
        """Visit the lazy decoder ``seq``, due at ``step`` (ending at ``end``) or taking a block in it, in its turn in
        the batch: unless it is at its last token or needs a KV block none is free for, it takes the block it
        needs and emits the step's token without leaving (True); else it stays lazy, advanced to the step
        before (False: the caller makes it eager and walks it)."""
        if seq.emitted + self.through - seq.last_step + 1 >= seq.output_length:
            return False  # it finishes
        self.advance(seq)  # to step ``through``, the one before (in a phase: the blocks its quiet steps took)
        if seq.emitted >= seq.kv_boundary and self.kv.free < 1:
            return False  # it preempts another (its advance is as a visit would have done it)
        self._emit(seq, seq.emitted, step, end)
        return True

    def emit_all_in_place(self, step: int, end: float) -> bool:
        """In a quiet step (``step``, ending at ``end``: lazy decoders alone, nothing finishes or is admitted in it;
        every lazy decoder has emitted through the step before), where every lazy decoder due at it is due only
        for a new KV block and the cache has one for each and for the step's phase, each takes it and emits the
        step's token in place, and the phase's blocks are taken (True); none can then find the cache full, so
        their turns do not matter. Else nothing changes but ``through`` (False: the step is walked, in turn)."""
        self.through = through = step - 1
        booked = self._due.get(step)
        seqs = [seq for seq in dict.fromkeys(booked) if seq.due_step == step] if booked else []
        advanced, needing = [], 0
        for seq in seqs:
            emitted = seq.emitted + through - seq.last_step
            if emitted + 1 >= seq.output_length:
                return False  # it finishes: the listener hears of it
            needing += emitted >= seq.kv_boundary
            advanced.append(emitted)
        kv = self.kv
        taking = len(self.phases[step % kv.block_size]) if kv.capacity is not None else 0
        if needing + taking > kv.free:
            return False
        self._due.pop(step, None)
        kv.used += taking
        for seq, emitted in zip(seqs, advanced):
            self._emit(seq, emitted, step, end)
        return True

    def _emit(self, seq: SimSequence, emitted: int, step: int, end: float) -> None:
        """The lazy decoder ``seq`` (``emitted`` tokens at step ``through``) emits step ``step``'s token (ending at
        ``end``) in place, taking a new KV block first where its blocks are full (the caller saw one free)."""
        if emitted >= seq.kv_boundary:
            self.kv.grow(seq)
        seq.emitted = emitted + 1  # with last_step, one more: ``_base`` stays as it is
        seq.last_step = step
        seq.last_token_at = end
        self._book(seq)

    def leave(self, seq: SimSequence) -> None:
        """``seq`` is lazy no more: advanced to step ``through`` (the engine visits it every step from now)."""
        self.advance(seq)
        del self._members[seq]
        self._base -= len(seq.prompt_tokens) + seq.emitted - seq.last_step
        seq.due_step = -1
        if seq.block_phase >= 0:
            del self.phases[seq.block_phase][seq]
            seq.block_phase = -1

    def advance(self, seq: SimSequence) -> None:
        """Bring the lazy decoder ``seq``'s own fields to step ``through``, its KV blocks too."""
        before, last = seq.emitted, seq.emitted + self.through - seq.last_step - 1  # emitted before each token
        seq.emitted = last + 1
        seq.last_step = self.through
        seq.last_token_at = self.through_end
        # The new blocks the walk would have taken: one before each token that found its blocks full. Unbounded,
        # counted here; bounded, taken in their steps already (in its phase: the ledger's, not yet its own). A
        # first token, from the prefill, takes none.
        block_size, boundary, grown = self.kv.block_size, seq.kv_boundary, 0
        if boundary >= before:  # a block at the boundary and every block_size tokens after it
            if last >= boundary:
                grown = (last - boundary) // block_size + 1
                boundary += grown * block_size
        else:
            at = before
            while at <= last:
                grown += 1
                boundary += block_size
                at = max(at + 1, boundary)
        if grown:
            if self.kv.capacity is None:
                self.kv.used += grown
            seq.kv_private += grown
            seq.kv_boundary = boundary

    def advance_all(self) -> None:
        for seq in self._members:
            self.advance(seq)

    def due_at(self, step: int) -> list[SimSequence]:
        """The lazy decoders due at ``step`` or taking a block in it (once each; those that left since are not)."""
        due = self._due.pop(step, None)
        found = [seq for seq in dict.fromkeys(due) if seq.due_step == step] if due else []
        if self.kv.capacity is not None:
            taking = self.phases[step % self.kv.block_size]
            if taking:
                found += [seq for seq in taking if seq.due_step != step]
        return found

    def next_due(self) -> int:
        """The first step a lazy decoder may be due at (a large number if none)."""
        steps, due = self._due_steps, self._due
        while steps and steps[0] not in due:
            heappop(steps)
        return steps[0] if steps else sys.maxsize
