"""The engine's own cost per streamed token, with no HTTP and no runtime: is cohort stepping worth it?

Runs the default engine (``ttft`` 0.1 s, ``itl`` 0.01 s, a batch as large as
the stream count) in virtual time over N sequences of 50 tokens with a
listener that takes every token (as the HTTP runtime's does), and reports
microseconds of the engine per token. Two arrival patterns: a burst (every
sequence at one instant, so they all share every step: the case a cohort
event would collapse into one heap entry per step) and staggered arrivals
10 µs apart (every step its own instant, as closed-loop clients make them).
The difference between the two is what a cohort saves at most; compare the
figures with ``closed_loop_streams.py``'s server CPU per token.

    python benchmarks/engine_tokens.py [--streams 256,1024,4096] [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import time

from pytest_llmsim.sim.config import SimConfig
from pytest_llmsim.sim.engine import Engine, SimSequence

TOKENS = 50


class _Counting:
    """A listener that takes every token, as the runtime's does (and does nothing with it)."""

    def __init__(self) -> None:
        self.tokens = 0

    def on_token(self, seq: SimSequence, now: float) -> None:
        self.tokens += 1

    def on_finish(self, seq: SimSequence, now: float) -> None:
        pass


def engine_us_per_token(streams: int, stagger: float) -> float:
    """Microseconds of engine work per token for ``streams`` sequences arriving ``stagger`` s apart."""
    listener = _Counting()
    engine = Engine(SimConfig(ttft=0.1, itl=0.01, max_batch_size=streams), listener)
    sequences = [SimSequence(list(range(i, i + 20)), TOKENS) for i in range(streams)]
    started = time.perf_counter()
    for i, seq in enumerate(sequences):
        engine.submit(seq, at=i * stagger)
    engine.run_until_idle()
    elapsed = time.perf_counter() - started
    assert listener.tokens == streams * TOKENS, listener.tokens  # one event per token, none coalesced
    return elapsed / (streams * TOKENS) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--streams", default="256,1024,4096")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    print("| streams | burst: µs/token | staggered: µs/token |\n|---|---|---|")
    for streams in (int(s) for s in args.streams.split(",")):
        burst = statistics.median(engine_us_per_token(streams, 0.0) for _ in range(args.rounds))
        staggered = statistics.median(engine_us_per_token(streams, 1e-5) for _ in range(args.rounds))
        print(f"| {streams} | {burst:.2f} | {staggered:.2f} |", flush=True)


if __name__ == "__main__":
    main()
