"""A load sweep: one row per load level (the workload, and measured or predicted latencies)."""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["METRICS", "SweepRow", "spread_of"]

METRICS = ("ttft_p50_ms", "itl_p50_ms", "req_per_s", "e2e_p50_ms")


@dataclass(frozen=True)
class SweepRow:
    """One load level of a sweep: the workload and (measured or predicted) latencies in milliseconds."""

    concurrency: int | None
    rate: float | None
    input_tokens: int
    output_tokens: int
    ttft_p50_ms: float | None = None
    itl_p50_ms: float | None = None
    req_per_s: float | None = None
    e2e_p50_ms: float | None = None
    num_prompts: int | None = None  # requests the benchmark sent at this level (None: not said)
    # at a fixed rate: "poisson" arrivals (vllm bench serve, SGLang, guidellm's poisson) or "constant", evenly
    # spaced (guidellm's constant strategy, what its sweep profile runs)
    arrivals: str = "poisson"
    # what the ITL figure is a median of: each inter-token gap ("gap": vLLM's and SGLang's ITL) or each request's
    # mean gap ("request": TPOT, and guidellm's inter-token latency, (E2E - TTFT) / (tokens - 1) per request).
    # Under load they differ: a step with a prefill in it is longer, and the mean counts it where a median
    # of gaps does not.
    itl_per: str = "gap"
    # the output lengths' spread where the source says it (their standard deviation, or a spread column), as
    # lengths uniform within mean * (1 +- spread) have it: sqrt(3) * std / mean. None: not said (the caller's).
    output_spread: float | None = None
    # the prompt lengths' spread, the same way (vllm bench serve's --random-range-ratio R: lengths uniform within
    # input_tokens * (1 +- R)). None: not said, fixed lengths.
    input_spread: float | None = None
    # at a fixed concurrency: each client's own time between an answer's end and its next request (its
    # parsing, its bookkeeping; guidellm's grows with its clients), which req/s holds and the server never sees.
    # None: clients that send at once.
    client_gap_ms: float | None = None
    # what the latency figures are: "median" (vllm bench serve, SGLang, guidellm) or "mean" (a table that reports
    # averages); the fields keep their p50 names either way
    statistic: str = "median"
    # not the benchmark's: at a fixed concurrency, the waves after the first a prediction simulates (None: until
    # they settle, at least SETTLED_WAVES; a predicted row says how many it simulated). A fit fixes each row's
    # once, so its searches compare predictions of the same length.
    waves: int | None = None

    def workload(self) -> str:
        if self.concurrency is not None:  # each client sending one request is a burst
            return f"{'burst' if self.num_prompts == self.concurrency else 'concurrency'} {self.concurrency}"
        return f"rate {round(self.rate or 0.0, 3)}/s" + (" (constant)" if self.arrivals == "constant" else "")


def spread_of(mean: float, std: float) -> float:
    """The spread ``S`` whose lengths, uniform within ``mean * (1 +- S)``, have this standard deviation
    (``sqrt(3) * std / mean``), below 1 (a length stays at least 1)."""
    return min(math.sqrt(3.0) * std / mean, 0.95) if mean > 0 and std > 0 else 0.0
