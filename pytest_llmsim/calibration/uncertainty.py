"""What a fit cannot know: the range of loads and lengths it saw, and how far off a prediction may be.

A profile written by ``llmsim calibrate`` carries a ``[calibration]`` table (not a setting: the profile loader
sets it aside) with the range its rows covered. ``llmsim predict --config PROFILE`` reads it back
(:func:`fitted_range_of`): a row inside that range gets the interpolation band, one outside it (a concurrency
or rate past the largest fitted, a prompt or answer length never seen) the extrapolation band and a warning.
The bands are the cross-validation's figures over the development sweeps (:data:`BANDS`, from
``benchmarks/calibration_holdout.py --manifest``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import tomllib

from .sweep import SweepRow
from .workload import errors

__all__ = ["BANDS", "LENGTH_SLACK", "UNREACHED", "FittedRange", "fitted_range_of", "unreached"]

#: Relative error bands per metric, inside and outside the fitted range: over the development sweeps, the median
#: of each sweep's ends -> middle error (inside), and the 75th percentile of each sweep's lower -> upper error, at
#: least the inside band (outside); ``benchmarks/calibration_holdout.py --manifest`` prints them (2026-12-08, 5
#: seeds; docs/simulation.md, "Cross-validation over the development sweeps"). A median: one prediction in two
#: of a sweep like those misses by more. ``priors``: a profile with nothing fitted (``llmsim calibrate`` without a
#: sweep), the median of the sweeps' priors-alone errors.
BANDS: dict[str, dict[str, float]] = {
    "inside": {"ttft_p50_ms": 0.11, "itl_p50_ms": 0.09, "req_per_s": 0.11, "e2e_p50_ms": 0.05},
    "outside": {"ttft_p50_ms": 0.16, "itl_p50_ms": 0.13, "req_per_s": 0.16, "e2e_p50_ms": 0.08},
    # a profile from priors alone (nothing fitted): the median over the sweeps of their priors-alone errors
    "priors": {"ttft_p50_ms": 0.26, "itl_p50_ms": 0.11, "req_per_s": 0.12, "e2e_p50_ms": 0.11},
}
#: A length within this factor of the fitted range counts as inside it (a length is never exactly repeated).
LENGTH_SLACK = 1.25
#: A fitted value missed by more than this (relative) says the numbers the fit freed do not reach its rows: the
#: interpolation target over the development sweeps (ends -> middle within 20 %). The Gaudi 3 sweep's two end rows
#: are missed so (TTFT -29 %, ITL +28 % at 128 clients): what two numbers and five priors can give falls short.
UNREACHED = 0.20


def _worst(predicted: Sequence[SweepRow], measured: Sequence[SweepRow]) -> dict[str, tuple[SweepRow, float]]:
    """Per metric, the fitted row a fit misses worst and by how much (``predicted / measured - 1``; the first
    such row among equals)."""
    worst: dict[str, tuple[SweepRow, float]] = {}
    for guess, row in zip(predicted, measured):
        for name, error in errors(guess, row).items():
            if name not in worst or abs(error) > abs(worst[name][1]):
                worst[name] = (row, error)
    return worst


def unreached(predicted: Sequence[SweepRow], measured: Sequence[SweepRow],
              margin: float = UNREACHED) -> tuple[SweepRow, str, float] | None:
    """The fitted row and metric a fit misses worst, ``(row, metric, predicted / measured - 1)``, where that is
    by more than ``margin``: the numbers it freed cannot reach the rows it was given (the rest held at their
    priors, or a shape the model does not have). None: every fitted value within ``margin``."""
    worst = max(((row, name, error) for name, (row, error) in _worst(predicted, measured).items()),
                key=lambda found: abs(found[2]), default=None)
    return worst if worst is not None and abs(worst[2]) > margin else None


@dataclass(frozen=True)
class FittedRange:
    """The loads and lengths a fit's rows covered (None: no row of that kind); :meth:`nothing` for a profile from
    priors alone, outside which every row lies."""

    concurrency: tuple[int, int] | None
    rate: tuple[float, float] | None
    input_tokens: tuple[int, int]
    output_tokens: tuple[int, int]
    priors_alone: bool = False
    #: per metric, how far the fit missed its own rows where beyond ``UNREACHED`` (``unreached``): a
    #: prediction's band is at least that
    missed: Mapping[str, float] = field(default_factory=dict)

    @classmethod
    def nothing(cls) -> FittedRange:
        """No row fitted: a profile from the serving model's priors alone."""
        return cls(None, None, (0, 0), (0, 0), priors_alone=True)

    @classmethod
    def of(cls, rows: Sequence[SweepRow], predicted: Sequence[SweepRow] = ()) -> FittedRange:
        """The range ``rows`` cover; with the fit's ``predicted`` rows, what it missed them by (:attr:`missed`)."""
        closed = [r.concurrency for r in rows if r.concurrency is not None]
        rates = [r.rate for r in rows if r.rate is not None]
        missed = {name: round(abs(error), 2) for name, (_, error) in _worst(predicted, rows).items()
                  if abs(error) > UNREACHED}
        return cls((min(closed), max(closed)) if closed else None, (min(rates), max(rates)) if rates else None,
                   (min(r.input_tokens for r in rows), max(r.input_tokens for r in rows)),
                   (min(r.output_tokens for r in rows), max(r.output_tokens for r in rows)), missed=missed)

    def outside(self, row: SweepRow) -> list[str]:
        """Why ``row`` lies outside the range (empty: inside)."""
        if self.priors_alone:
            return ["nothing was fitted: a profile from priors alone"]
        why = []
        if row.concurrency is not None:
            if self.concurrency is None:
                why.append("a closed loop (the fit saw open-loop rates)")
            elif not self.concurrency[0] <= row.concurrency <= self.concurrency[1]:
                why.append(f"concurrency {row.concurrency} outside {self.concurrency[0]}-{self.concurrency[1]}")
        elif row.rate is not None:
            if self.rate is None:
                why.append("an open loop (the fit saw closed-loop concurrencies)")
            elif not self.rate[0] <= row.rate <= self.rate[1]:
                why.append(f"rate {row.rate:g} outside {self.rate[0]:g}-{self.rate[1]:g}")
        for name, (low, high) in (("input", self.input_tokens), ("output", self.output_tokens)):
            value = getattr(row, f"{name}_tokens")
            if not low / LENGTH_SLACK <= value <= high * LENGTH_SLACK:
                why.append(f"{name} {value} tokens outside {low}-{high}")
        return why

    def band(self, row: SweepRow) -> dict[str, float]:
        """The relative error band per metric for ``row``'s prediction."""
        if self.priors_alone:
            return BANDS["priors"]
        bands = BANDS["outside" if self.outside(row) else "inside"]
        return {name: max(band, self.missed.get(name, 0.0)) for name, band in bands.items()}

    def to_toml(self) -> str:
        """The ``[calibration]`` table a profile carries (after its settings)."""
        lines = ["", "[calibration]  # what the fit saw (llmsim predict warns outside it); not a setting"]
        if self.priors_alone:
            return "\n".join([*lines, "priors_alone = true  # nothing fitted"]) + "\n"
        if self.concurrency:
            lines.append(f"concurrency = [{self.concurrency[0]}, {self.concurrency[1]}]")
        if self.rate:
            lines.append(f"rate = [{self.rate[0]:g}, {self.rate[1]:g}]")
        lines += [f"input_tokens = [{self.input_tokens[0]}, {self.input_tokens[1]}]",
                  f"output_tokens = [{self.output_tokens[0]}, {self.output_tokens[1]}]"]
        if self.missed:
            lines.append("missed = { " + ", ".join(f"{name} = {value:g}" for name, value in self.missed.items())
                         + " }  # the fit's own rows missed by this much: predictions' bands are at least it")
        return "\n".join(lines) + "\n"


def fitted_range_of(profile: str | None) -> FittedRange | None:
    """The ``[calibration]`` table of a profile file (None: a preset, no file, or no table)."""
    if not profile or not profile.endswith(".toml") or not Path(profile).is_file():
        return None
    with open(profile, "rb") as handle:
        table = tomllib.load(handle).get("calibration")
    if isinstance(table, dict) and table.get("priors_alone") is True:
        return FittedRange.nothing()
    if not isinstance(table, dict) or "input_tokens" not in table or "output_tokens" not in table:
        return None

    def pair(key: str) -> tuple[float, float] | None:
        value = table.get(key)
        return (value[0], value[1]) if isinstance(value, list) and len(value) == 2 else None

    concurrency, rate = pair("concurrency"), pair("rate")
    inputs, outputs = pair("input_tokens"), pair("output_tokens")
    if inputs is None or outputs is None:
        return None
    missed = table.get("missed")
    missed = {str(name): float(value) for name, value in missed.items()
              if isinstance(value, (int, float)) and value >= 0} if isinstance(missed, dict) else {}
    return FittedRange(None if concurrency is None else (int(concurrency[0]), int(concurrency[1])), rate,
                       (int(inputs[0]), int(inputs[1])), (int(outputs[0]), int(outputs[1])), missed=missed)
