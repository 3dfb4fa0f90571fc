"""KV-cache blocks held by the running batch: what load-aware routers and admission control key on.

A running sequence holds the blocks of its prompt and of the tokens it has
generated (``ceil(tokens / block_size)``). Full prompt blocks are shared: two
sequences with the same prefix hold its blocks once (counted by reference,
by their chained hashes, as vLLM's block pool does); the rest is private.

With a capacity (``kv_cache_blocks``), the engine asks this ledger before
admitting a sequence (it waits, head of the queue first, until its prompt
fits) and before each decode step that starts a new block (when none is free,
the most recently admitted sequence is preempted: its blocks are freed and
it waits to be recomputed, as vLLM's V1 scheduler does). Without one,
nothing is refused, and :func:`usage_of` reports what the batch holds.

With ``reserve_max_tokens`` (``kv_reserve_max_tokens``), a sequence takes the blocks of its prompt and of its
whole answer's budget (the request's max_tokens, ``SimSequence.reserve_tokens``) when admitted, as TGI's router
and TensorRT-LLM's GUARANTEED_NO_EVICT scheduler allocate: it waits until all of them fit, never needs another
block while it runs, and so is never preempted.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .sequence import SimSequence

__all__ = ["KVBlocks", "blocks_held", "usage_of"]


def blocks_held(seq: SimSequence, block_size: int, tokens: int | None = None) -> tuple[list[int], int]:
    """``(shared prompt block hashes, private block count)`` of ``seq`` holding ``tokens`` tokens
    (default: its prompt, what it generated, and room for the token it computes next)."""
    if tokens is None:
        tokens = len(seq.prompt_tokens) + seq.emitted + 1
    shared = list(seq.block_hashes or ())
    return shared, max(0, math.ceil(tokens / block_size) - len(shared))


def usage_of(running: Iterable[SimSequence], block_size: int) -> int:
    """Blocks the running sequences hold now, shared prompt blocks once (what the ledger's ``used`` tracks
    step by step; this recounts it, for checks)."""
    shared: set[int] = set()
    private = 0
    for seq in running:
        hashes, own = blocks_held(seq, block_size)
        shared.update(hashes)
        private += own
    return len(shared) + private


class KVBlocks:
    """The ledger of a KV cache of ``capacity`` blocks (None: unbounded)."""

    def __init__(self, capacity: int | None, block_size: int, reserve_max_tokens: bool = False) -> None:
        self.capacity = capacity
        self.block_size = block_size
        self.reserve_max_tokens = reserve_max_tokens
        self.used = 0
        # a prompt block held by any sequence, and the references past the first of one held by several: set
        # operations in C over a 5,000-token prompt's ~300 blocks, where a count per block was a Python loop
        # (a prompt's chained hashes are distinct, so a set holds each once)
        self._held: set[int] = set()
        self._extra_refs: dict[int, int] = {}

    @property
    def free(self) -> float:
        return math.inf if self.capacity is None else self.capacity - self.used

    def _admitted_tokens(self, seq: SimSequence) -> int:
        """The tokens ``seq`` holds blocks for from its admission: its prompt, what it generated and room for one
        more token, or, reserving, for the rest of its answer's budget too."""
        tokens = seq.emitted + 1
        if self.reserve_max_tokens:
            tokens = max(tokens, seq.reserve_tokens or seq.output_length)
        return len(seq.prompt_tokens) + tokens

    def admission_need(self, seq: SimSequence) -> int:
        """New blocks ``seq`` takes when admitted (see :meth:`_admitted_tokens`), less prompt blocks already held."""
        shared, private = blocks_held(seq, self.block_size, self._admitted_tokens(seq))
        return len(shared) - len(self._held.intersection(shared)) + private

    def take(self, seq: SimSequence) -> None:
        """``seq`` is admitted: it holds its blocks from now on."""
        shared, private = blocks_held(seq, self.block_size, self._admitted_tokens(seq))
        already = self._held.intersection(shared) if shared else set()
        for block_hash in already:
            self._extra_refs[block_hash] = self._extra_refs.get(block_hash, 0) + 1
        if shared:
            self._held.update(shared)
        seq.kv_private = private
        seq.kv_shared = len(shared)
        self.used += len(shared) - len(already) + private
        self._set_boundary(seq)

    def grow(self, seq: SimSequence) -> None:
        seq.kv_private += 1
        self.used += 1
        seq.kv_boundary += self.block_size  # (_set_boundary's: a block more held; a visit per block calls this)

    def _set_boundary(self, seq: SimSequence) -> None:
        held_tokens = (seq.kv_shared + seq.kv_private) * self.block_size
        seq.kv_boundary = held_tokens - len(seq.prompt_tokens) - 1

    def release(self, seq: SimSequence) -> None:
        """``seq`` left the batch (finished, cancelled or preempted): its blocks are free."""
        hashes = seq.block_hashes
        if hashes:
            still_held = self._extra_refs.keys() & hashes if self._extra_refs else set()  # others hold these too
            for block_hash in still_held:
                count = self._extra_refs[block_hash] - 1
                if count:
                    self._extra_refs[block_hash] = count
                else:
                    del self._extra_refs[block_hash]
            before = len(self._held)
            self._held.difference_update(hashes if not still_held else set(hashes) - still_held)
            self.used -= before - len(self._held)
        self.used -= seq.kv_private
        seq.kv_private = 0
