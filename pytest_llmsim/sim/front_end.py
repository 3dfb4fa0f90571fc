"""The API server's turns in the step-cost mode: ``request_serial`` of its one event loop per request, in send order."""

from __future__ import annotations

import math
from bisect import bisect_right

__all__ = ["FrontEndTurns"]


class FrontEndTurns:
    """Each request's send and when its turn in the API server ends, by send time."""

    def __init__(self) -> None:
        self._sent: list[float] = []
        self._done: list[float] = []

    def turn(self, sent: float, serial: float) -> float:
        """When the API server is done with a request sent at ``sent``: its turn follows those sent before.

        Requests are handed over in send order in virtual time; over HTTP, handler threads hand them over in
        whatever order they get the GIL, each back-dated to when it was received. One sent earlier than the
        last handed over takes its place among them (the turns of those already handed over stay as they
        were charged; the turns after it are replayed for the requests still to come).
        """
        sents, dones = self._sent, self._done
        place = bisect_right(sents, sent)
        done = max(sent, dones[place - 1] if place else -math.inf) + serial
        sents.insert(place, sent)
        dones.insert(place, done)
        for later in range(place + 1, len(dones)):  # only after a late hand-over: none in virtual time
            replayed = max(sents[later], dones[later - 1]) + serial
            if replayed <= dones[later]:
                break
            dones[later] = replayed
        if len(sents) > _FRONT_END_MEMORY:  # requests sent this long before matter no more
            del sents[:_FRONT_END_MEMORY // 2], dones[:_FRONT_END_MEMORY // 2]
        return done


#: Turns of the API server kept (by send time) for requests handed over late.
_FRONT_END_MEMORY = 1024
