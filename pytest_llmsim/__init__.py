"""pytest-llmsim: a realistic, deterministic fake LLM backend for pytest."""

from .backend import LLMBackend
from .config import ConfigError, SimConfig
from .metrics import Distribution, MetricsSnapshot
from .records import RequestRecord

__version__ = "0.1.0"

__all__ = [
    "ConfigError",
    "Distribution",
    "LLMBackend",
    "MetricsSnapshot",
    "RequestRecord",
    "SimConfig",
    "__version__",
]
