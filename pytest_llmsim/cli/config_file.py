"""``llmsim serve --config FILE``: settings, faults, rules and a scenario from a TOML file (the suite's conftest
reads the same files)."""

from __future__ import annotations

import sys
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

from ..content.replies import Rule
from ..sim.config import SimConfig
from ..sim.faults import Fault
from ..sim.scenario import Phase, phase_from_mapping

__all__ = ["MAX_CONFIG_BYTES", "load_config", "load_config_file", "load_config_rules"]


def load_config_file(path: str) -> tuple[dict[str, Any], list[tuple[str, dict[str, Any]]]]:
    """Settings and faults from a TOML file::

        ttft = 0.1
        itl = 0.01
        speed = "inf"

        [[faults]]
        kind = "rate_limit"
        times = 2

        [[rules]]
        prompt = "weather"
        tool_call = { name = "get_weather", arguments = { city = "Paris" } }

    Raises ValueError naming what is wrong (an unknown setting, a bad fault or rule).
    """
    return load_config(path)[:2]


def load_config_rules(path: str) -> list[Rule]:
    """The ``[[rules]]`` tables of a TOML config file (see :meth:`Rule.from_json` for their keys)."""
    return load_config(path)[2]


MAX_CONFIG_BYTES = 16 * 1024 * 1024  # a --config of /dev/zero or a log file is refused, not read without end


def load_config(path: str) -> tuple[dict[str, Any], list[tuple[str, dict[str, Any]]], list[Rule],
                                   tuple[Phase, ...]]:
    """Settings, faults, rules and the ``[[scenario]]`` tables' phases of a TOML config file (ValueError names what
    is wrong)."""
    with open(path, "rb") as handle:
        text = handle.read(MAX_CONFIG_BYTES + 1)
    if len(text) > MAX_CONFIG_BYTES:
        raise ValueError(f"larger than {MAX_CONFIG_BYTES // (1024 * 1024)} MiB: not a settings file")
    data = tomllib.loads(text.decode("utf-8"))
    rules_data = data.pop("rules", [])
    if not isinstance(rules_data, list):
        raise ValueError("'rules' must be an array of tables ([[rules]])")
    rules = []
    for number, table in enumerate(rules_data, 1):
        try:
            rules.append(Rule.from_json(table))
        except ValueError as error:
            raise ValueError(f"rules #{number}: {error}") from None
    faults_data = data.pop("faults", [])
    if not isinstance(faults_data, list) or not all(isinstance(f, dict) and "kind" in f for f in faults_data):
        raise ValueError("'faults' must be an array of tables, each with a 'kind'")
    scenario_data = data.pop("scenario", [])
    SimConfig().replace(**data)  # validates: ConfigError (a ValueError) names the key
    faults = []
    for fault in faults_data:
        params = {key: value for key, value in fault.items() if key != "kind"}
        Fault.build(fault["kind"], **params)  # FaultError (a ValueError) names the problem
        faults.append((fault["kind"], params))
    if not isinstance(scenario_data, list):
        raise ValueError("'scenario' must be an array of tables ([[scenario]]), one per phase")
    phases = []
    for number, table in enumerate(scenario_data, 1):
        try:
            phases.append(phase_from_mapping(table))
        except ValueError as error:
            raise ValueError(f"scenario #{number}: {error}") from None
    return data, faults, rules, tuple(phases)
