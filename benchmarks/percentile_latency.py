"""Latency given by its percentiles, drawn per request: do 10,000 requests show the percentiles asked for?

On the virtual clock (the engine alone, no server, no wall time): 10,000 lone requests of one token with
``ttft={"p50": 0.2, "p90": 0.5, "p99": 1.2}``, and one sequence of 10,001 tokens with ``itl={"p50": 0.02,
"p90": 0.05, "p99": 0.12}``; each measured percentile against the one asked for. The issue's target: p50 and
p90 within 2 %, p99 within 5 %.

    python benchmarks/percentile_latency.py [--requests 10000] [--seed 0]
"""

from __future__ import annotations

import argparse
import statistics
from typing import Any

from pytest_llmsim.sim.config import SimConfig
from pytest_llmsim.sim.engine import Engine, SimSequence

TTFT = {"p50": 0.2, "p90": 0.5, "p99": 1.2}
ITL = {"p50": 0.02, "p90": 0.05, "p99": 0.12}


class _Quiet:
    def on_token(self, seq: SimSequence, now: float) -> None:
        pass

    def on_finish(self, seq: SimSequence, now: float) -> None:
        pass


def quantiles(values: list[float]) -> dict[str, float]:
    cuts = statistics.quantiles(values, n=1000, method="inclusive")
    return {"p50": cuts[499], "p90": cuts[899], "p99": cuts[989]}


def measure(requests: int, seed: int) -> list[tuple[str, str, float, float]]:
    engine = Engine(SimConfig().replace(ttft=TTFT, max_batch_size=requests, seed=seed), _Quiet())
    sequences = [SimSequence(list(range(i, i + 8)), 1, index=i) for i in range(requests)]
    for seq in sequences:
        engine.submit(seq)
    engine.run_until_idle()
    rows: list[tuple[str, str, float, float]] = []
    measured: dict[str, Any] = quantiles([seq.ttft for seq in sequences])
    rows += [("ttft", key, asked, measured[key]) for key, asked in TTFT.items()]
    engine = Engine(SimConfig().replace(itl=ITL, seed=seed), _Quiet())
    long = SimSequence(list(range(8)), requests + 1)
    engine.submit(long)
    engine.run_until_idle()
    measured = quantiles(list(long.gaps))
    rows += [("itl", key, asked, measured[key]) for key, asked in ITL.items()]
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print("| latency | percentile | asked | measured | ratio |")
    print("|---|---|---|---|---|")
    for name, key, asked, got in measure(args.requests, args.seed):
        print(f"| {name} | {key} | {asked * 1000:.1f} ms | {got * 1000:.1f} ms | {got / asked:.3f} |")


if __name__ == "__main__":
    main()
