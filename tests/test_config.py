"""SimConfig validation: unknown keys and bad values name themselves."""

from __future__ import annotations

import math

import pytest

from pytest_llmsim import ConfigError, SimConfig
from pytest_llmsim.sim.config import SETTING_HELP, SETTING_NAMES, parse_setting


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
    ("itl", "fast", r"'itl': 'fast' \(expected a number\)"),
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


def test_every_setting_has_help() -> None:
    assert set(SETTING_HELP) == set(SETTING_NAMES)
