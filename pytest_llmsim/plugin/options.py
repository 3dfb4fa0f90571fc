"""The plugin's options: each a ``--llmsim-NAME`` flag, an ``llmsim_NAME`` ini key and a
``PYTEST_LLMSIM_NAME`` environment variable; flag over environment over ini."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import pytest

from ..sim.config import SimConfig

__all__ = ["OPTIONS", "OptionSettings", "ini_value", "parse_isolation", "resolve_options"]


SPEED_HELP = ("Simulated seconds per wall second for every backend: a positive number or inf "
              "(simulated latencies and metrics do not change with it)")
SEED_HELP = "Seed for generated content, latency jitter and fault selection"
MODEL_HELP = "Model name the backends serve and report by default"
HOST_HELP = "Address the backends listen on (loopback only is the safe choice)"
PORT_HELP = ("Port of the session's backend (0, the default: a free one the OS picks); under pytest-xdist each "
             "worker adds its number (gw0 +0, gw1 +1, ...), for a gateway configured before the session starts")
REPORT_HELP = "Show a summary of what the backend served in each test"
ISOLATION_HELP = ("Where backends run: thread (in the test process, the default), process "
                  "(each an llmsim serve subprocess, driven over its control API) or process-loop "
                  "(the same, served with llmsim serve --io loop: a greenlet per connection; "
                  "process-gevent is another name for it)")
ISOLATION_MODES = ("thread", "process", "process-gevent", "process-loop")
TRACE_HELP = ("Write each test's backend traces (Chrome trace JSON and an SVG timeline) into this directory, "
              "named by test id and backend")
TRACE_ON_HELP = "Which tests' traces --llmsim-trace writes: all (the default) or failed"
TRACE_ON = ("all", "failed")
GC_FREEZE_HELP = ("After collection, move every object alive (what the test modules imported) out of the "
                  "garbage collector's way (gc.freeze): a full collection then skips them instead of stopping "
                  "the process, an embedded backend's streams included, for hundreds of milliseconds; and "
                  "collect the young generations as llmsim serve does, paced by the in-process backends' "
                  "requests")

RECORD_HELP = ("How llm_cassette plays and records each test's cassette, as pytest-recording's modes: none (the "
               "default: play only, nothing is contacted), once, new_episodes, all, rewrite")
RECORD_MODES = ("none", "once", "new_episodes", "all", "rewrite")
UPSTREAM_HELP = "The provider's base URL llm_cassette records from in a recording mode (llm_upstream marks win)"
RECORD_IN_CI_HELP = "Allow a recording mode under CI=true (refused there by default: a CI run must not call a provider)"

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off", "")


def _parse_speed(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not value > 0:  # also rejects nan
        raise ValueError("expected a positive number or 'inf'")
    return value


def _parse_seed(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise ValueError("expected a non-negative integer")
    return value


def _parse_text(text: str) -> str:
    if not text.strip():
        raise ValueError("expected a non-empty string")
    return text.strip()


def parse_isolation(text: str) -> str:
    mode = text.strip().lower()
    if mode not in ISOLATION_MODES:
        raise ValueError(f"expected one of {', '.join(ISOLATION_MODES)}")
    return mode


def _parse_trace_on(text: str) -> str:
    value = text.strip().lower()
    if value not in TRACE_ON:
        raise ValueError(f"expected one of {', '.join(TRACE_ON)}")
    return value


def _parse_record(text: str) -> str:
    mode = text.strip().lower().replace("-", "_")
    if mode not in RECORD_MODES:
        raise ValueError(f"expected one of {', '.join(RECORD_MODES)}")
    return mode


def _parse_port(text: str) -> int:
    port = int(text.strip())
    if not 0 <= port <= 65535:
        raise ValueError("expected a port from 0 to 65535 (0: a free one)")
    return port


def _parse_flag(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ValueError("expected true or false")


@dataclass(frozen=True)
class Option:
    name: str
    help: str
    parse: Callable[[str], Any]
    default: Any
    is_flag: bool = False


OPTIONS: tuple[Option, ...] = (
    Option("speed", SPEED_HELP, _parse_speed, 1.0),
    Option("seed", SEED_HELP, _parse_seed, 0),
    Option("model", MODEL_HELP, _parse_text, SimConfig().model),
    Option("host", HOST_HELP, _parse_text, "127.0.0.1"),
    Option("port", PORT_HELP, _parse_port, 0),
    Option("report", REPORT_HELP, _parse_flag, False, is_flag=True),
    Option("isolation", ISOLATION_HELP, parse_isolation, "thread"),
    Option("trace", TRACE_HELP, _parse_text, None),
    Option("trace_on", TRACE_ON_HELP, _parse_trace_on, "all"),
    Option("gc_freeze", GC_FREEZE_HELP, _parse_flag, False, is_flag=True),
    Option("record", RECORD_HELP, _parse_record, "none"),
    Option("upstream", UPSTREAM_HELP, _parse_text, None),
    Option("record_in_ci", RECORD_IN_CI_HELP, _parse_flag, False, is_flag=True),
)


@dataclass(frozen=True)
class OptionSettings:
    """The plugin's options after resolution."""

    speed: float
    seed: int
    model: str
    host: str
    report: bool
    port: int = 0
    isolation: str = "thread"
    trace: str | None = None
    trace_on: str = "all"
    gc_freeze: bool = False
    record: str = "none"
    upstream: str | None = None
    record_in_ci: bool = False


def resolve_options(cli: Mapping[str, Any], env: Mapping[str, str],
                    ini: Mapping[str, str | None]) -> OptionSettings:
    """Resolve each option, flag over environment over ini; bad values name their source.

    ``cli`` maps option names to the flag's value (None when not given),
    ``ini`` to the ini value (None or "" when not set).
    """
    values: dict[str, Any] = {}
    for option in OPTIONS:
        flag = f"--llmsim-{option.name.replace('_', '-')}"
        env_name = f"PYTEST_LLMSIM_{option.name.upper()}"
        sources = [
            (cli.get(option.name), flag),
            (env.get(env_name), f"environment variable {env_name}"),
            (ini.get(option.name), f"ini option llmsim_{option.name}"),
        ]
        values[option.name] = option.default
        for raw, source in sources:
            if raw is None or (raw == "" and source != flag):
                continue
            if isinstance(raw, bool):
                values[option.name] = raw
                break
            try:
                values[option.name] = option.parse(str(raw))
            except ValueError as error:
                raise pytest.UsageError(f"invalid {source} {str(raw)!r}: {error}") from None
            break
    return OptionSettings(**values)



def ini_value(config: pytest.Config, option: Option) -> str | None:
    value = config.getini(f"llmsim_{option.name}")
    if value is None or value == []:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)

