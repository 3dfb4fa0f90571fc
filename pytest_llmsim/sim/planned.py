"""What a choice will say, planned before it is generated: its tokens, their text, its tool calls.

:class:`PlannedOutput` is what the engine streams and the adapters render;
:class:`CyclicRun` lets a long filler answer be planned without building it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar, overload

__all__ = ["CyclicRun", "PlannedCall", "PlannedOutput", "filtered"]

T = TypeVar("T")


class CyclicRun(Sequence[T]):
    """``length`` items: ``first``, then ``cycle`` from ``offset`` on, wrapping as often as needed.

    A long filler answer is a slice of one seeded stream; this stands for it
    without building it, so an answer of any length costs only the part being
    read (``run[a:b]`` builds that part).
    """

    __slots__ = ("_cycle", "_first", "_length", "_offset")

    def __init__(self, first: T, cycle: list[T], offset: int, length: int) -> None:
        self._first = first
        self._cycle = cycle
        self._offset = offset % len(cycle)
        self._length = max(0, length)

    @property
    def period(self) -> int:
        """Items after the first repeat with this period."""
        return len(self._cycle)

    def __len__(self) -> int:
        return self._length

    @overload
    def __getitem__(self, index: int) -> T: ...

    @overload
    def __getitem__(self, index: slice) -> list[T]: ...

    def __getitem__(self, index: int | slice) -> T | list[T]:
        if isinstance(index, slice):
            start, stop, step = index.indices(self._length)
            if step != 1:
                return [self[i] for i in range(start, stop, step)]
            return self._slice(start, stop)
        if index < 0:
            index += self._length
        if not 0 <= index < self._length:
            raise IndexError("run index out of range")
        return self._first if index == 0 else self._cycle[(self._offset + index - 1) % len(self._cycle)]

    def _slice(self, start: int, stop: int) -> list[T]:
        out: list[T] = []
        if start >= stop:
            return out
        if start == 0:
            out.append(self._first)
            start = 1
        cycle, size = self._cycle, len(self._cycle)
        position = (self._offset + start - 1) % size
        remaining = stop - start
        while remaining > 0:
            count = min(remaining, size - position)
            out.extend(cycle[position:position + count])
            remaining -= count
            position = 0
        return out


@dataclass(frozen=True, slots=True)
class PlannedCall:
    """One tool call of an answer: tokens ``start`` to ``end`` of the answer are its arguments.

    ``key`` is unique per call; each API makes its ids from it (``call_…``,
    ``fc_…``, ``toolu_…``). ``arguments`` is the JSON text the client gets
    (a prefix of it when ``max_tokens`` cut the answer).
    """

    key: str
    name: str
    arguments: str
    start: int
    end: int


class PlannedOutput:
    """What one choice will say: its tokens, the text each adds, and why it ends.

    ``tokens`` and ``pieces`` are lists for short answers (scripted, echoed,
    cut at a stop string) and :class:`CyclicRun` views for filler, which is
    never materialised whole: slicing builds only the part being sent.
    An answer that calls tools has ``calls``: its tokens are the calls'
    arguments, one after another, and it has no text. A reasoning model's
    answer starts with ``reasoning`` tokens of thinking (generated, counted
    and timed like the rest; each API shows them its own way or not at all),
    then the answer proper. ``served`` are calls of tools the backend runs
    itself (a provider's server tools): they come after any reasoning, and
    the text after them is the answer, written once their results are in.
    """

    __slots__ = ("calls", "finish_reason", "pieces", "reasoning", "served", "stop_sequence", "tokens")

    def __init__(self, tokens: Sequence[int], pieces: Sequence[str], finish_reason: str,
                 stop_sequence: str | None = None, calls: tuple[PlannedCall, ...] = (), reasoning: int = 0,
                 served: tuple[PlannedCall, ...] = ()) -> None:
        self.tokens = tokens
        self.pieces = pieces
        self.finish_reason = finish_reason
        self.stop_sequence = stop_sequence  # the stop string that ended it, if one did
        self.calls = calls
        self.reasoning = reasoning
        self.served = served

    def call_at(self, position: int) -> tuple[int, PlannedCall]:
        """The call (and its index) whose arguments hold token ``position``."""
        for index, call in enumerate(self.calls):
            if call.start <= position < call.end:
                return index, call
        raise IndexError(f"token {position} belongs to no tool call")

    @property
    def length(self) -> int:
        """Tokens in the answer."""
        return len(self.tokens)

    @property
    def answer_start(self) -> int:
        """The position of the answer's first text token: after the reasoning and the served calls."""
        return self.served[-1].end if self.served else self.reasoning

    @property
    def text(self) -> str:
        """The answer's text, after any reasoning and served calls ("" for an answer that calls tools)."""
        return "" if self.calls else "".join(self.pieces[self.answer_start:len(self.pieces)])

    @property
    def reasoning_text(self) -> str:
        """The thinking before the answer ("" when there is none)."""
        return "".join(self.pieces[0:self.reasoning]) if self.reasoning else ""

    def with_reasoning(self, tokens: Sequence[int], pieces: Sequence[str]) -> PlannedOutput:
        """This answer after ``tokens`` of thinking (the calls move along with their tokens)."""
        shift = len(tokens)
        return PlannedOutput([*tokens, *self.tokens[0:len(self.tokens)]], [*pieces, *self.pieces[0:len(self.pieces)]],
                             self.finish_reason, self.stop_sequence, _shifted(self.calls, shift), shift,
                             _shifted(self.served, shift))

    def after_served(self, served: PlannedOutput) -> PlannedOutput:
        """This answer written after ``served``'s calls (server tools) and their results."""
        shift = served.length
        return PlannedOutput([*served.tokens, *self.tokens[0:len(self.tokens)]],
                             [*served.pieces, *self.pieces[0:len(self.pieces)]], self.finish_reason,
                             self.stop_sequence, _shifted(self.calls, shift), served=served.calls)


def _shifted(calls: tuple[PlannedCall, ...], shift: int) -> tuple[PlannedCall, ...]:
    return tuple(PlannedCall(c.key, c.name, c.arguments, c.start + shift, c.end + shift) for c in calls)


def filtered(output: PlannedOutput, after_tokens: int, reason: str) -> PlannedOutput:
    """``output`` stopped by a content filter after ``after_tokens`` tokens (no tool calls survive it)."""
    length = min(after_tokens, output.length)
    return PlannedOutput(list(output.tokens[0:length]), list(output.pieces[0:length]), reason,
                         reasoning=min(output.reasoning, length),
                         served=tuple(call for call in output.served if call.end <= length))
