"""Predict a load sweep in virtual time, and fit step costs to a measured one.

The package's rooms: :mod:`.sweep` (a row), :mod:`.formats` (reading the
files benchmark tools write), :mod:`.workload` (a row's workload run as a
benchmark runs it, and its statistics), :mod:`.fit` (the search), :mod:`.priors`
(hardware and model priors) and :mod:`.report` (profile, tables, plot).

:func:`predict_row` runs one workload — ``concurrency`` closed-loop clients
(each sends its next request as soon as one ends), or Poisson arrivals at
``rate`` requests per simulated second — through the engine alone: no HTTP,
no wall clock, every request counted from a cold start as ``vllm bench
serve`` and guidellm count them. :func:`calibrate` fits the step costs
(``scheduler="step"``: a roofline step, see :mod:`pytest_llmsim.sim.step_engine`)
to a measured sweep.
"""

from __future__ import annotations

from .fit import (
    BUDGETS,
    FINALISTS,
    FITTED,
    FULL_SEARCH,
    PRIORS,
    SHORT_SEARCH,
    Fit,
    calibrate,
    client_gap,
    fitted_metrics,
    from_priors,
    with_client_gap,
)
from .formats import read_sweep, read_sweeps
from .priors import GPUS, Hardware
from .report import render_csv, render_json, render_profile, render_svg, render_table
from .search import levenberg_marquardt
from .sweep import METRICS, SweepRow
from .workload import EVERY_PROMPT, errors, predict, predict_row

__all__ = ["BUDGETS", "EVERY_PROMPT", "FINALISTS", "FITTED", "FULL_SEARCH", "GPUS", "METRICS", "PRIORS",
           "SHORT_SEARCH", "Fit", "Hardware", "SweepRow", "calibrate", "client_gap", "errors", "fitted_metrics",
           "from_priors", "levenberg_marquardt", "predict", "predict_row", "read_sweep", "read_sweeps", "render_csv",
           "render_json", "render_profile", "render_svg", "render_table", "with_client_gap"]
