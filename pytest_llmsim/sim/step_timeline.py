"""The step-cost engine's timeline: each step's gap, shared by the sequences that decode in consecutive steps.

Step ``k``'s gap (its end less the previous step's end) is at ``gaps[k - first]``. A sequence that decodes in
consecutive steps has these gaps as its own: they are handed to it in one piece when its run ends (a finish,
a preemption, a skipped step), not added one call per token. Handed over as a copy (``Gaps.extend``), the steps
older than every pending run can be dropped now and then (:meth:`StepTimeline.trim`); where the listener reads
the gaps only after the run (``shares_step_timeline``: the calibration's), as a range of the timeline
(``Gaps.share``), and the timeline is kept whole: as many numbers as steps, no more than the copies would be.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterable

from .range_sums import RangeSums
from .sequence import SimSequence

__all__ = ["StepTimeline"]


class StepTimeline:
    """Every step's gap since ``first`` (see the module's docstring)."""

    __slots__ = ("first", "gaps", "last_end", "shared", "sums")

    def __init__(self, shared: bool = False) -> None:
        self.gaps = array("d")
        self.first = 0  # the step number of gaps[0]
        self.last_end = 0.0  # when the latest step ended
        self.shared = shared  # runs handed over as ranges: never trimmed
        self.sums = RangeSums(self.gaps) if shared else None  # their exact sums (a trimmed array has none)

    def end_step(self, now: float) -> int:
        """A step ended at ``now``: its gap is recorded; returns its number."""
        step = self.first + len(self.gaps)
        self.gaps.append(now - self.last_end)
        self.last_end = now
        return step

    def hand_over(self, seq: SimSequence) -> None:
        """Give ``seq`` the gaps of its run of consecutive steps (after ``run_from``, to ``last_step``)."""
        if seq.last_step > seq.run_from >= 0:
            start, end = seq.run_from + 1 - self.first, seq.last_step + 1 - self.first
            if self.sums is not None:
                seq.gaps.share(self.sums, start, end)
            else:
                seq.gaps.extend(self.gaps[start:end])
        seq.run_from = seq.last_step

    def trim(self, running: Iterable[SimSequence], bring_current: Callable[[], None]) -> None:
        """Drop the steps no pending run of the ``running`` sequences starts before (none where shared); where
        there may be some, ``bring_current`` first brings the runs' starts up to date (the lazy decoders')."""
        if self.shared:
            return
        bring_current()
        keep_from = min((seq.run_from for seq in running if seq.last_step > seq.run_from >= 0),
                        default=self.first + len(self.gaps) - 1)
        drop = keep_from + 1 - self.first
        if drop > 0:
            del self.gaps[:drop]
            self.first += drop
