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

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

import tomllib

from .sweep import SweepRow

__all__ = ["ITL_PER", "LOADS", "STATISTICS", "TOLD_KEYS", "Benchmark", "told_of", "told_to_toml"]

#: How a benchmark sends its requests: closed-loop clients, open-loop arrivals at a rate, or one burst.
LOADS = ("closed", "open", "burst")
#: What a row's latency figures are: medians (``vllm bench serve``, SGLang, guidellm) or means.
STATISTICS = ("median", "mean")
#: What a row's ITL is: the median of every gap (vLLM, SGLang) or of each request's mean gap (TPOT).
ITL_PER = ("gap", "request")


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
        if self.itl_per is not None and self.itl_per not in ITL_PER:
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


#: What a profile's ``[calibration.benchmark]`` table holds: what ``llmsim calibrate`` was told the sweep's
#: benchmark did (and the clients' own time it fitted), which ``llmsim predict --config`` then runs unless its own
#: flags say otherwise: a profile fitted to means of TPOT under a 300-prompt open loop predicts those, not medians
#: of gaps in a steady state.
TOLD_KEYS: dict[str, type] = {"load": str, "num_prompts": int, "itl_per": str, "statistic": str,
                              "output_spread": float, "input_spread": float, "client_gap_ms": float}
#: The words each of its text keys may say.
_TOLD_WORDS = {"load": LOADS, "itl_per": ITL_PER, "statistic": STATISTICS}


def told_to_toml(told: Mapping[str, Any]) -> str:
    """The ``[calibration.benchmark]`` table for ``told`` (its :data:`TOLD_KEYS` that are not None; empty: none)."""
    lines = [f'{key} = "{told[key]}"' if kind is str else f"{key} = {told[key]:.6g}" if kind is float
             else f"{key} = {int(told[key])}" for key, kind in TOLD_KEYS.items() if told.get(key) is not None]
    if not lines:
        return ""
    return "\n".join(["", "[calibration.benchmark]  # what the sweep's benchmark did: llmsim predict runs it unless "
                      "told otherwise", *lines]) + "\n"


def told_of(profile: str | None) -> dict[str, Any]:
    """A profile file's ``[calibration.benchmark]`` table (empty: a preset, no file or no table); a value of the
    wrong kind is left out, as a hand-edited profile may carry one."""
    if not profile or not profile.endswith(".toml") or not Path(profile).is_file():
        return {}
    with open(profile, "rb") as handle:
        table = tomllib.load(handle).get("calibration", {})
    told = table.get("benchmark") if isinstance(table, dict) else None
    if not isinstance(told, dict):
        return {}
    return {key: float(told[key]) if kind is float else told[key] for key, kind in TOLD_KEYS.items()
            if _valid(key, kind, told.get(key))}


def _valid(key: str, kind: type, value: Any) -> bool:
    if kind is str:
        return value in _TOLD_WORDS[key]
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return False
    if kind is int:
        return isinstance(value, int) and value >= 1
    return math.isfinite(value) and 0 <= value < (1 if key.endswith("spread") else math.inf)

