"""What one request's fault does at each point of its answer, asked of the fault's effect once.

The request's lifecycle (``server/request_life.py``) makes the plan when it
picks the fault and carries out its actions; nothing else reads the effect.
"""

from __future__ import annotations

from dataclasses import dataclass

from .fault_actions import (
    BadEncoding,
    Close,
    Drop,
    Empty,
    ErrorEvent,
    Fail,
    Filter,
    Garble,
    Malformed,
    RequestChange,
    Slow,
    Stall,
    Truncate,
)
from .faults import Fault

__all__ = ["FaultPlan"]


@dataclass(frozen=True, slots=True)
class FaultPlan:
    """A fault's actions (see :mod:`.fault_effects`): ``on_request``, ``before_headers``, ``cut_at`` /
    ``at_cut`` (a stream, after that many token events) and ``at_end`` (a whole answer)."""

    kind: str
    on_request: Fail | Drop | Slow | Filter | BadEncoding | RequestChange | None
    before_headers: Stall | Empty | None
    cut_at: int | None
    at_cut: Malformed | ErrorEvent | Stall | Drop | Truncate | Garble | Close | None
    at_end: Fail | Drop | Empty | Malformed | Close | None

    @classmethod
    def of(cls, fault: Fault, stream: bool) -> FaultPlan:
        """The plan of ``fault`` for an answer that is streamed (``stream``) or whole."""
        effect = fault.effect
        return cls(fault.kind, effect.on_request(fault), effect.before_headers(fault, stream), effect.cut_at(fault),
                   effect.at_cut(fault), effect.at_end(fault))
