"""What the benchmark that measured a sweep did, told to the model instead of bent into its costs.

A sweep's file rarely says how its benchmark ran: how many requests each level sent, whether clients waited
for answers (a closed loop), arrived at a rate (an open loop) or all at once (a burst), whether outputs were
forced to their length (``--ignore-eos``) or stopped at EOS, whether its ITL is a median of gaps or of each
request's mean gap (TPOT), and whether its figures are medians or means. Each changes what the same server
measures: a run of 300 prompts at a rate past the server's capacity never reaches the queue a steady state
would build; a burst of N requests is one wave, not N clients in a loop. :class:`Benchmark` holds those
facts and :meth:`Benchmark.rows` writes them into the rows, which :func:`~pytest_llmsim.calibration.predict`
then runs as that benchmark ran.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

from .sweep import SweepRow

__all__ = ["LOADS", "STATISTICS", "Benchmark"]

#: How a benchmark sends its requests: closed-loop clients, open-loop arrivals at a rate, or one burst.
LOADS = ("closed", "open", "burst")
#: What a row's latency figures are: medians (``vllm bench serve``, SGLang, guidellm) or means.
STATISTICS = ("median", "mean")


@dataclass(frozen=True)
class Benchmark:
    """The benchmark's own behaviour; each field None keeps what the rows say.

    ``load``: ``"burst"`` sends each row's ``concurrency`` requests at once, one each (``num_prompts`` is the
    concurrency), ``"closed"`` and ``"open"`` check the rows are of that kind. ``num_prompts``: requests per
    level. ``output_tokens``: the mean output length where the rows leave it out (answers that stop at EOS).
    ``output_spread`` / ``input_spread``: lengths uniform within ``mean * (1 +- S)``. ``itl_per``: ``"gap"``
    or ``"request"`` (TPOT). ``statistic``: ``"median"`` or ``"mean"``. ``arrivals``: ``"poisson"`` or
    ``"constant"`` (open loop).
    """

    load: str | None = None
    num_prompts: int | None = None
    output_tokens: int | None = None
    output_spread: float | None = None
    input_spread: float | None = None
    itl_per: str | None = None
    statistic: str | None = None
    arrivals: str | None = None

    def __post_init__(self) -> None:
        if self.load is not None and self.load not in LOADS:
            raise ValueError(f"load {self.load!r}: one of {', '.join(LOADS)}")
        if self.statistic is not None and self.statistic not in STATISTICS:
            raise ValueError(f"statistic {self.statistic!r}: one of {', '.join(STATISTICS)}")
        if self.itl_per is not None and self.itl_per not in ("gap", "request"):
            raise ValueError(f"itl_per {self.itl_per!r}: gap or request")
        if self.arrivals is not None and self.arrivals not in ("poisson", "constant"):
            raise ValueError(f"arrivals {self.arrivals!r}: poisson or constant")
        for name in ("num_prompts", "output_tokens"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be at least 1")
        for name in ("output_spread", "input_spread"):
            value = getattr(self, name)
            if value is not None and not 0 <= value < 1:
                raise ValueError(f"{name} must be in [0, 1)")

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> Benchmark:
        """From a TOML table or keyword arguments; an unknown key is refused, naming the known ones."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"unknown benchmark key(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        return cls(**values)

    def rows(self, rows: Sequence[SweepRow]) -> list[SweepRow]:
        """``rows`` as this benchmark ran them (a field it leaves None keeps each row's own)."""
        out = []
        for row in rows:
            if self.load == "burst":
                if row.concurrency is None:
                    raise ValueError(f"a burst's rows give the requests sent at once as concurrency ({row.workload()})")
                row = replace(row, num_prompts=row.concurrency)
            elif (self.load == "closed" and row.concurrency is None) or (self.load == "open" and row.rate is None):
                needed = "concurrency" if self.load == "closed" else "rate"
                raise ValueError(f"a {self.load}-loop benchmark's row has no {needed} ({row.workload()})")
            changes: dict[str, Any] = {}
            if self.num_prompts is not None and self.load != "burst":
                changes["num_prompts"] = self.num_prompts
            if self.output_tokens is not None and not row.output_tokens:
                changes["output_tokens"] = self.output_tokens
            for name in ("output_spread", "input_spread", "itl_per", "statistic", "arrivals"):
                if getattr(self, name) is not None:
                    changes[name] = getattr(self, name)
            out.append(replace(row, **changes) if changes else row)
        return out
