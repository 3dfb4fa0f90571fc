"""The benchmarks that name the code they measure still find it (they run by hand, not in the suite)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def test_every_phase_request_phases_times_is_a_function_of_the_request_path(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import request_phases

    for spec in request_phases.PHASES:
        owner, name = request_phases._resolve(spec)
        assert callable(getattr(owner, name)), spec
    with pytest.raises(AttributeError):
        request_phases._resolve("pytest_llmsim.sim.simulator:Simulator.no_such_step")
    sys.modules.pop("request_phases", None)
    sys.modules.pop("request_cost", None)
