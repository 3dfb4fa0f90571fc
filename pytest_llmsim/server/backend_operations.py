"""The backend's operations, written once: what a test can ask of a served backend.

``LLMBackend`` calls these in-process; the control API (``server/control.py``)
decodes its JSON into the same calls and encodes their answers with
``sim/control_json``, and ``RemoteBackend`` sends that JSON, so the three handles
cannot drift apart. Each operation is one call into the simulator (or the server,
for the errors it kept); nothing here knows HTTP.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from ..content.replies import Reply, Rule
from ..sim.config import SimConfig
from ..sim.faults import Fault, FaultState
from ..sim.metrics import MetricsSnapshot
from ..sim.request_log import RequestRecord
from ..sim.scenario import Phase, phase_from_mapping
from ..sim.session_log import SessionRecord
from ..sim.trace_svg import timeline_svg

if TYPE_CHECKING:
    from ..sim.simulator import Simulator

__all__ = ["BackendOperations", "ServedBackend"]


class ServedBackend(Protocol):
    """What the operations need of the server that serves the backend."""

    simulator: Simulator
    handler_errors: list[Exception]

    def reset_backend(self, config: SimConfig | None) -> None:
        """Back to the starting settings (or ``config``) with empty state, kept errors forgotten."""


class BackendOperations:
    """reset, wait_idle, configure, faults, rules, replies, the snapshot, the log, the trace, the errors."""

    def __init__(self, server: ServedBackend) -> None:
        self._server = server

    @property
    def simulator(self) -> Simulator:
        return self._server.simulator

    # --- settings and state ---

    @property
    def config(self) -> SimConfig:
        """The settings in force."""
        return self.simulator.config

    @property
    def base(self) -> SimConfig:
        """The settings a reset returns to."""
        return self.simulator.base

    def configure(self, **settings: Any) -> SimConfig:
        """Change settings (validated; ``ConfigError`` names a bad one)."""
        return self.simulator.configure(**settings)

    def reset(self, config: SimConfig | None = None) -> None:
        """Back to the starting settings (or ``config``) with empty cache, metrics, log and kept errors."""
        self._server.reset_backend(config)

    def wait_idle(self, timeout: float = 5.0) -> bool:
        """Wait (wall seconds) until no request is in flight; True if it got there."""
        return self.simulator.wait_idle(timeout)

    # --- faults ---

    def add_fault(self, kind: str, **params: Any) -> Fault:
        """Arm a fault (``FaultError`` names a bad kind or parameter)."""
        return self.simulator.add_fault(kind, **params)

    @property
    def faults(self) -> list[Fault]:
        """The armed faults, in the order they are tried."""
        return self.simulator.faults.faults

    @property
    def fault_states(self) -> list[FaultState]:
        """Every fault added since the last clear, with its hits and whether it is spent."""
        return self.simulator.faults.states()

    def clear_faults(self) -> None:
        """Disarm every fault."""
        self.simulator.faults.clear()

    # --- scenarios ---

    def set_scenario(self, phases: Iterable[Phase | Mapping[str, Any]]) -> tuple[Phase, ...]:
        """Replace the scenario by ``phases`` (objects, or their JSON/TOML form; none: no scenario), its time
        counted from now (``ScenarioError`` names a bad phase)."""
        built = tuple(phase if isinstance(phase, Phase) else phase_from_mapping(phase) for phase in phases)
        self.simulator.set_scenario(built)
        return built

    def scenario_state(self) -> dict[str, Any]:
        """The scenario's phases (each with ``active``) and its ``elapsed`` simulated seconds; ``{}``: none."""
        return self.simulator.scenario_state()

    # --- what the model says ---

    def reply_with(self, replies: Iterable[Reply]) -> None:
        """Queue scripted replies, taken one per request in order."""
        self.simulator.reply_with(replies)

    def add_rule(self, rule: Rule) -> Rule:
        """Add a rule (named, if it has no name)."""
        added: Rule = self.simulator.add_rule(rule)
        return added

    @property
    def rules(self) -> list[Rule]:
        """The rules in force, with their hits."""
        return self.simulator.script.rules

    def clear_rules(self) -> None:
        """Remove every rule (queued replies stay)."""
        self.simulator.script.clear_rules()

    # --- reading ---

    def snapshot(self) -> MetricsSnapshot:
        """The counters and latency distributions since the last reset."""
        return self.simulator.snapshot()

    def histograms(self) -> dict[str, dict[str, object]]:
        """The latency histograms' buckets since the last reset (see ``Metrics.histograms``)."""
        return self.simulator.metrics.histograms()

    def requests(self) -> list[RequestRecord]:
        """The request log, oldest first."""
        return self.simulator.log.snapshot()

    def sessions(self) -> list[SessionRecord]:
        """The WebSocket sessions kept (open ones, then the newest ended), in the order they opened."""
        return self.simulator.sessions.snapshot()

    def errors(self) -> list[Exception]:
        """Internal errors kept so far: the handlers' and the engine's."""
        return [*self._server.handler_errors, *self.simulator.runtime.errors]

    def label(self, port: int) -> str:
        """``model:port``, how reports and trace files name the backend."""
        return f"{self.config.model}:{port}"

    def trace(self, label: str) -> dict[str, Any]:
        """The trace as Chrome trace-event JSON."""
        return self.simulator.trace.chrome_trace(label)

    def trace_svg(self, label: str, title: str = "") -> str:
        """The trace as an SVG timeline."""
        return timeline_svg(self.simulator.trace, label, title, self.simulator.scenario_spans())
