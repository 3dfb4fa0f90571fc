"""SimConfig validation: unknown keys and bad values name themselves."""

from __future__ import annotations

import contextlib
import io
import math
from pathlib import Path

import pytest

from pytest_llmsim import ConfigError, SimConfig
from pytest_llmsim.cli import build_parser
from pytest_llmsim.sim.config import (
    SETTING_ALIASES,
    SETTING_HELP,
    SETTING_NAMES,
    environment_name,
    parse_setting,
    settings_from_environment,
)

REFERENCE = (Path(__file__).parent.parent / "docs" / "reference.md").read_text()


def _serve_help() -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--help"])
    return " ".join(out.getvalue().split())  # argparse's wrapping undone


SERVE_HELP = _serve_help()


def test_defaults_are_instantaneous() -> None:
    config = SimConfig()
    assert (config.ttft, config.itl, config.prefill_per_token) == (0.0, 0.0, 0.0)


def test_replace_validates_and_keeps_the_original() -> None:
    config = SimConfig()
    changed = config.replace(ttft=0.2, max_batch_size=8, speed=math.inf, answer_length=[2, 4])
    assert (changed.ttft, changed.max_batch_size, changed.answer_length) == (0.2, 8, (2, 4))
    assert config.ttft == 0.0


def test_unknown_key_names_it_and_the_accepted_ones() -> None:
    with pytest.raises(ConfigError, match=r"unknown setting 'tfft'; accepted: model, ttft, itl"):
        SimConfig().replace(tfft=1)


@pytest.mark.parametrize(("key", "value", "message"), [
    ("ttft", -1, r"'ttft': -1 \(expected a number >= 0\)"),
    ("itl", "fast", r"'itl': 'fast' \(expected seconds, or percentiles such as p50=0.2,p90=0.5,p99=1.2\)"),
    ("jitter", 2, r"'jitter': 2 \(expected a number >= 0 and <= 1\)"),
    ("load_factor", 0.5, r"'load_factor'"),
    ("max_batch_size", 0, r"'max_batch_size': 0 \(expected an integer >= 1\)"),
    ("max_batch_size", 2.5, r"expected an integer"),
    ("cache_hit_rate", 1.5, r"'cache_hit_rate'"),
    ("output", "poetry", r"expected one of filler, echo"),
    ("speed", 0, r"expected a positive number or 'inf'"),
    ("speed", math.nan, r"expected a positive number or 'inf'"),
    ("answer_length", (5, 2), r"'answer_length'"),
    ("model", "", r"'model'"),
    ("seed", True, r"'seed'"),
])
def test_bad_values_are_named(key: str, value: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        SimConfig().replace(**{key: value})


@pytest.mark.parametrize(("key", "text", "value"), [
    ("speed", "inf", math.inf), ("speed", "2.5", 2.5), ("max_batch_size", "64", 64),
    ("cache_hit_rate", "none", None), ("cache_hit_rate", "0.25", 0.25), ("answer_length", "3-9", (3, 9)),
    ("answer_length", "7", 7), ("model", "gpt-x", "gpt-x"),
])
def test_parse_setting_from_text(key: str, text: str, value: object) -> None:
    assert parse_setting(key, text) == value


def test_parse_setting_rejects_with_the_expected_form() -> None:
    with pytest.raises(ConfigError, match=r"'speed': 'fast' \(expected a positive number or 'inf'\)"):
        parse_setting("speed", "fast")


def _as_text(value: object) -> str:
    """A setting's value as a flag, environment variable or ini would give it."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple) and all(isinstance(item, str) for item in value):
        return ",".join(value)
    if isinstance(value, tuple):  # a pair (answer_length) or nested limits: none at their defaults
        return "-".join(map(str, value))
    return str(value)


@pytest.mark.parametrize("name", SETTING_NAMES)
def test_every_surface_of_a_setting_comes_from_its_one_declaration(name: str) -> None:
    """Help, the check, ``llmsim serve``'s flag and ``LLMSIM_*`` variable, text parsing and the reference
    table's row all follow the field: a setting added or changed in one place shows everywhere."""
    default = getattr(SimConfig(), name)
    assert SETTING_HELP[name].strip()
    assert parse_setting(name, _as_text(default)) == default  # its text form reads back as itself
    assert settings_from_environment({environment_name(name): _as_text(default)}) == {name: default}
    assert f"--{name.replace('_', '-')} " in SERVE_HELP and f"environment: {environment_name(name)})" in SERVE_HELP
    assert all(f"--{alias} " in SERVE_HELP for alias in SETTING_ALIASES[name])  # vLLM's names for it, declared there
    rows = [line for line in REFERENCE.splitlines() if line.startswith("| `") and f"`{name}`" in line.split(" | ")[0]]
    assert rows, f"{name}: no row in docs/reference.md's settings table"
    assert rows[0].split(" | ")[1] == f"`{default!r}`", f"{name}: the reference says {rows[0].split(' | ')[1]}"


def test_an_environment_variable_names_itself_when_it_is_wrong() -> None:
    with pytest.raises(ConfigError, match=r"LLMSIM_TTFT: invalid value for 'ttft'"):
        settings_from_environment({"LLMSIM_TTFT": "-1"})
