"""A request inside the engine, as the adapters render it: its planned outputs, sequences and outcome.

Protocol-blind: each wire API reads the same :class:`Generation` (texts, tool calls, usage, logprobs,
vectors) and renders it in its own shape. What the model says was planned before (``content``); the
few content services an answer needs later (logprobs, vectors) come in as objects set by the simulator.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Protocol

from .fault_effects import EFFECTS
from .request import GenerationRequest, RateLimitStatus
from .request_log import RequestRecord
from .sequence import SeqState, SimSequence
from .token_feed import TokenFeed
from .tokens import PlannedOutput

__all__ = ["CLIENT_CLOSED_REQUEST", "Generation", "LogprobTable", "Outcome", "TokenLogprob", "ending"]


@dataclass(frozen=True, slots=True)
class TokenLogprob:
    """One token's simulated logprob and the ``top`` most likely tokens at its place (chosen first)."""

    token: str
    bytes: list[int]
    logprob: float
    top: list[tuple[str, list[int], float]]


class LogprobTable(Protocol):
    """Where a generation's logprobs come from (``content.logprobs.LogprobSource``)."""

    def at(self, choice: int, position: int, token: int, top: int) -> TokenLogprob:
        """The logprob of ``token`` at ``position`` of choice ``choice``, with ``top`` likeliest tokens."""


# One unit vector for a prompt's token ids: (ids, size, dimensions, seed) -> vector.
Embedder = Callable[[Sequence[int], int, "int | None", int], list[float]]


# A client that hangs up before its answer is complete is logged with this
# status, as nginx logs it: the client closed the request, no response was seen.
CLIENT_CLOSED_REQUEST = 499


class Outcome(Enum):
    """How a request that reached the engine ended, from the client's side."""

    COMPLETE = "complete"  # the client was sent the whole answer
    CLIENT_GONE = "client_gone"  # the client hung up first: status 499, cancelled
    CUT_BY_FAULT = "cut_by_fault"  # the server ended it on purpose (a fault)


MAX_CUT_ANSWER = 4096  # characters of a cut-short answer kept in its record


def ending(record: RequestRecord, outcome: Outcome) -> str:
    """How ``record``'s request ended for its client (see :attr:`RequestRecord.ended`)."""
    if record.status == 0:
        return "dropped"
    if record.cancelled or outcome is Outcome.CLIENT_GONE:
        return "client gone"
    if outcome is Outcome.CUT_BY_FAULT:
        effect = EFFECTS.get(record.fault or "")
        return effect.ending if effect is not None else "cut"
    return "error" if record.status >= 400 else "completed"


@dataclass(slots=True)
class Generation:
    """A request inside the engine: its outputs, sequences and feed."""

    request: GenerationRequest
    prompt_lengths: list[int]
    outputs: list[PlannedOutput]
    sequences: list[SimSequence]
    feed: TokenFeed
    echo_prefixes: list[str]
    epoch: int
    rate_limit: RateLimitStatus | None
    marked_prompt_tokens: int | None = None  # tokens of the prefix the request marked cacheable
    logprob_source: LogprobTable | None = None  # set when the request asks for logprobs
    embedding_size: int = 0  # the backend's vector length, for embedding requests
    seed: int = 0
    embedder: Embedder | None = None  # set for embedding requests
    load_time: float = 0.0  # simulated seconds it waited for its model to load, before the engine
    max_tokens: int = 0  # the largest answer any of its prompts may have (the request's max_tokens, or the default)
    # Wall seconds each write of tokens left after they were due (one sample per write, capped).
    emit_lags: list[float] = field(default_factory=list)

    def texts(self) -> list[str]:
        """Each choice's whole answer (with the echoed prompt in front, when asked)."""
        if len(self.outputs) == 1:
            return [self.echo_prefixes[0] + self.outputs[0].text]
        return [prefix + output.text for prefix, output in zip(self.echo_prefixes, self.outputs)]

    @property
    def prompt_tokens(self) -> int:
        lengths = self.prompt_lengths
        return lengths[0] if len(lengths) == 1 else sum(lengths)

    def embeddings(self) -> list[list[float]]:
        """One unit vector per prompt of an embedding request (see :mod:`pytest_llmsim.content.embeddings`)."""
        size, dimensions = self.embedding_size, self.request.dimensions
        assert self.embedder is not None, "not an embedding request"
        return [self.embedder(seq.prompt_tokens, size, dimensions, self.seed) for seq in self.sequences]

    def logprobs(self, index: int, start: int, end: int) -> list[TokenLogprob]:
        """Simulated logprobs of choice ``index``'s tokens ``start`` to ``end`` (the request asked for them)."""
        source, top = self.logprob_source, self.request.logprobs
        assert source is not None and top is not None, "the request did not ask for logprobs"
        tokens = self.outputs[index].tokens[start:end]
        return [source.at(index, start + i, token, top) for i, token in enumerate(tokens)]

    # The counts below take the usual answer, one sequence, without a sum or a slice.

    @property
    def completion_tokens(self) -> int:
        seqs = self.sequences
        return seqs[0].emitted if len(seqs) == 1 else sum(seq.emitted for seq in seqs)

    @property
    def reported_completion_tokens(self) -> int:
        """What the answer's usage says it sent: ``completion_tokens``, unless a ``bad_usage`` fault misreports it
        (the log and the metrics keep the true count)."""
        factor = self.request.usage_factor
        return self.completion_tokens if factor == 1.0 else round(self.completion_tokens * factor)

    @property
    def longest_sequence(self) -> int:
        """The most tokens one of its sequences produced (vLLM's ``request_max_num_generation_tokens``)."""
        seqs = self.sequences
        return seqs[0].emitted if len(seqs) == 1 else max(seq.emitted for seq in seqs)

    @property
    def cached_tokens(self) -> int:
        seqs = self.sequences
        return seqs[0].cached_tokens if len(seqs) == 1 else sum(seq.cached_tokens for seq in self._first_choices())

    @property
    def queried_tokens(self) -> int:
        seqs = self.sequences
        if len(seqs) == 1:
            return len(seqs[0].prompt_tokens)
        return sum(len(seq.prompt_tokens) for seq in self._first_choices())

    def finish_reason(self, index: int) -> str | None:
        seq = self.sequences[index]
        return self.outputs[index].finish_reason if seq.state is SeqState.FINISHED else None

    def _first_choices(self) -> list[SimSequence]:
        return self.sequences[::self.request.n]

    def fill(self, record: RequestRecord, outcome: Outcome, delivered: int | None) -> None:
        """Copy token counts, the outcome and simulated timings into the log record.

        ``delivered``: tokens the client was sent, when the answer was not
        complete (all of them otherwise).
        """
        seqs = self.sequences
        record.prompt_tokens = self.prompt_tokens
        record.generated_tokens = self.completion_tokens
        record.completion_tokens = record.generated_tokens if delivered is None else delivered
        record.cached_tokens = self.cached_tokens
        record.ignored_fields = self.request.ignored_fields
        record.max_tokens, record.n = self.max_tokens, self.request.n
        record.cancelled = outcome is Outcome.CLIENT_GONE
        if record.cancelled:
            record.status = CLIENT_CLOSED_REQUEST
        if outcome is Outcome.COMPLETE:
            record.finish_reasons = [self.finish_reason(i) for i in range(len(seqs))]
        else:  # the client saw no ending, whatever the engine got to
            record.finish_reasons = [None] * len(seqs)
            if delivered and self.request.stream:  # what it was sent, for the verdicts on the client
                output = self.outputs[0]
                record.cut_answer = "".join(output.pieces[output.answer_start:delivered])[:MAX_CUT_ANSWER]
        # The client waited for the model to load too: it is in TTFT and e2e (not in queue_time).
        load = self.load_time
        record.load_time = load or None
        if len(seqs) == 1:  # the usual request: one sequence, its own figures (no lists to build)
            seq = seqs[0]
            ttft, end, record.queue_time = seq.ttft, seq.e2e, seq.queue_time
            record.ttft = None if ttft is None else ttft + load
            record.e2e = None if end is None else end + load
            gap_count = seq.gaps.count
            record.itl = seq.gaps.total() / gap_count if gap_count else None
            return
        ttfts = [t for t in (s.ttft for s in seqs) if t is not None]
        record.ttft = min(ttfts) + load if ttfts else None
        ends = [t for t in (s.e2e for s in seqs) if t is not None]
        record.e2e = max(ends) + load if ends else None
        queued = [t for t in (s.queue_time for s in seqs) if t is not None]
        record.queue_time = max(queued) if queued else None
        gap_count = sum(seq.gaps.count for seq in seqs)
        record.itl = sum(seq.gaps.total() for seq in seqs) / gap_count if gap_count else None

    def gap_runs(self) -> list[tuple[float, int]]:
        """Every inter-token gap of every choice, as ``(gap, repeat count)`` runs."""
        if len(self.sequences) == 1:
            return self.sequences[0].gaps.runs()
        return [run for seq in self.sequences for run in seq.gaps.runs()]


