"""What a test's backends did, told to the person running the suite.

A row per backend a test used for ``--llmsim-report`` (carried in
``user_properties`` so it crosses pytest-xdist), and a warning when the
simulator itself fell behind its schedule.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import pytest

from ..backend import LLMBackend
from ..remote import RemoteBackend
from ..sim.metrics import LLMSimLagWarning

__all__ = ["LAG_WARNING_FLOOR", "LAG_WARNING_SHARE", "Reporter", "summary_row", "warn_if_lagging"]

# A token that leaves later than this share of a decode step (in wall time), and
# later than the floor, means the simulator, not the system under test, set the
# latency a client saw. The floor keeps high speed factors (sub-millisecond
# steps no thread scheduler keeps) quiet: there simulated metrics are what count.
LAG_WARNING_SHARE = 0.5
LAG_WARNING_FLOOR = 0.010


def warn_if_lagging(backend: LLMBackend | RemoteBackend, gc_pause: float = 0.0) -> None:
    """Warn (``LLMSimLagWarning``, with the figure) when tokens left later than the thresholds.

    ``gc_pause``: the longest garbage-collector pause of the test process
    during the test (seconds); named in the warning when the backend runs in
    that process and the pause could explain the lag.
    """
    config = backend.config
    if math.isinf(config.speed) or config.itl <= 0:
        return
    lag = backend.metrics.emit_lag
    step = backend.to_wall(config.itl)
    threshold = max(LAG_WARNING_SHARE * step, LAG_WARNING_FLOOR)
    if lag.count and lag.p99 > threshold:
        advice = "Lower --llmsim-speed, run fewer streams, or keep the test process less busy."
        if isinstance(backend, LLMBackend) and gc_pause > threshold:
            advice = (f"The garbage collector stopped this process for {gc_pause * 1000:.0f} ms during the test: "
                      f"--llmsim-gc-freeze (ini llmsim_gc_freeze = true) takes what the tests imported out of "
                      f"its way. Otherwise: " + advice[0].lower() + advice[1:])
        warnings.warn(LLMSimLagWarning(
            f"llmsim backend {config.model}:{backend.port}: tokens left up to {lag.p99 * 1000:.1f} ms late "
            f"(p99 over {lag.count} writes) against a decode step of {step * 1000:.1f} ms (itl {config.itl:g} "
            f"at speed {config.speed:g}); latencies a client measured include this. {advice}"), stacklevel=3)


def summary_row(backend: LLMBackend | RemoteBackend) -> dict[str, Any]:
    """One backend's line of the summary."""
    m = backend.metrics
    return {
        "backend": f"{backend.config.model}:{backend.port}",
        "requests": m.requests_total,
        "statuses": " ".join(f"{k}x{v}" for k, v in sorted(m.requests_by_status.items())) or "-",
        "tokens": f"{m.prompt_tokens}+{m.completion_tokens}",
        "cache": f"{m.cache_hit_rate:.0%}",
        "cancelled": m.cancelled,
        "faults": " ".join(f"{k}x{v}" for k, v in sorted(m.faults.items())) or "-",
        "ttft_p50": "-" if m.ttft.count == 0 else f"{m.ttft.p50:.4g}s",
        "lag_p99": "-" if m.emit_lag.count == 0 else f"{m.emit_lag.p99 * 1000:.3g}ms",
        "verdicts": _verdicts(backend) if m.requests_total else "-",
    }


def _verdicts(backend: LLMBackend | RemoteBackend) -> str:
    """The client's verdicts in a cell: ``ok``, or each kind it failed with how often."""
    failed = [f"{verdict.kind}x{len(verdict.offences)}" for verdict in backend.verdicts() if not verdict.ok]
    return " ".join(failed) or "ok"


class Reporter:
    """Collects summary rows on the controller (from xdist workers too) and prints them."""

    columns = ("backend", "requests", "statuses", "tokens", "cache", "cancelled", "faults", "ttft_p50", "lag_p99",
               "verdicts")

    def __init__(self) -> None:
        self.rows: list[tuple[str, dict[str, Any]]] = []

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "teardown":
            self.rows.extend((report.nodeid, row) for name, row in report.user_properties
                             if name == "llmsim" and isinstance(row, dict))

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        terminalreporter.write_sep("=", "llmsim backend summary")
        if not self.rows:
            terminalreporter.write_line("no test used an llmsim backend")
            return
        header = ["test", *self.columns]
        table = [header] + [[nodeid] + [str(row.get(c, "-")) for c in self.columns] for nodeid, row in self.rows]
        widths = [max(len(line[i]) for line in table) for i in range(len(header))]
        for line in table:
            terminalreporter.write_line("  ".join(cell.ljust(w) for cell, w in zip(line, widths)).rstrip())
