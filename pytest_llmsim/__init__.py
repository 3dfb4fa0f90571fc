"""pytest-llmsim: a realistic, deterministic fake LLM backend for pytest."""

import pytest

# The helpers raise AssertionError themselves; rewriting keeps any plain
# asserts added there informative too. Must run before the module is imported.
pytest.register_assert_rewrite("pytest_llmsim.assertions")

from .backend import LLMBackend  # noqa: E402
from .content.replies import ErrorReply, Rule, ToolCall, load_conversation  # noqa: E402
from .pool import BackendPool  # noqa: E402
from .remote import RemoteBackend, RemoteError  # noqa: E402
from .sim.config import ConfigError, SimConfig  # noqa: E402
from .sim.faults import FAULT_KINDS, GENERATION_FAULT_KINDS, Fault, FaultError, FaultState  # noqa: E402
from .sim.metrics import Distribution, LLMSimLagWarning, MetricsSnapshot  # noqa: E402
from .sim.request import GenerationRequest  # noqa: E402
from .sim.request_log import RequestRecord  # noqa: E402
from .sim.scenario import Phase, ScenarioError, ramp, spike, step, window  # noqa: E402
from .sim.secrets import key_fingerprint  # noqa: E402
from .sim.session_log import SessionRecord  # noqa: E402
from .verdicts import FAILOVER_KINDS, VERDICT_KINDS, Verdict, assert_failed_over, judge_failover  # noqa: E402

__version__ = "0.1.0"

__all__ = [
    "FAILOVER_KINDS",
    "FAULT_KINDS",
    "GENERATION_FAULT_KINDS",
    "VERDICT_KINDS",
    "BackendPool",
    "ConfigError",
    "Distribution",
    "ErrorReply",
    "Fault",
    "FaultError",
    "FaultState",
    "GenerationRequest",
    "LLMBackend",
    "LLMSimLagWarning",
    "MetricsSnapshot",
    "Phase",
    "RemoteBackend",
    "RemoteError",
    "RequestRecord",
    "Rule",
    "ScenarioError",
    "SessionRecord",
    "SimConfig",
    "ToolCall",
    "Verdict",
    "__version__",
    "assert_failed_over",
    "judge_failover",
    "key_fingerprint",
    "load_conversation",
    "ramp",
    "spike",
    "step",
    "window",
]
