"""How each setting's value is checked: one function per kind, each ``(name, value) -> normalised value``.

A setting names its check where it is declared (:class:`~.config.SimConfig`'s fields); each raises
:class:`ConfigError` naming the setting and what was expected.
"""

from __future__ import annotations

import importlib.util
import math
from collections.abc import Callable
from typing import Any

from .model_limits import parse_model_limits
from .percentiles import Percentiles, parse_percentiles

__all__ = ["COMPRESSIONS", "MAX_INTEGER", "OUTPUT_MODES", "SCHEDULERS", "ConfigError", "answer_length", "api_keys",
           "boolean", "compression", "integer", "latency", "latency_text", "model_limits", "names", "number",
           "optional_limit", "optional_rate", "optional_text", "output_mode", "scheduler", "speed", "text"]

OUTPUT_MODES = ("filler", "echo")
SCHEDULERS = ("sequence", "step")


class ConfigError(ValueError):
    """A setting was unknown or had a bad value; the message names it."""


def number(low: float, *, low_inclusive: bool = True, high: float = math.inf,
            allow_inf: bool = False) -> Callable[[str, Any], float]:
    def check(name: str, value: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"invalid value for {name!r}: {value!r} (expected a number)")
        number = float(value)
        if math.isnan(number) or (math.isinf(number) and not allow_inf):
            raise ConfigError(f"invalid value for {name!r}: {value!r} (expected a finite number)")
        too_low = number < low if low_inclusive else number <= low
        if too_low or number > high:
            bound = f">= {low:g}" if low_inclusive else f"> {low:g}"
            if high != math.inf:
                bound += f" and <= {high:g}"
            raise ConfigError(f"invalid value for {name!r}: {value!r} (expected a number {bound})")
        return number

    return check


def one_of(choices: tuple[str, ...]) -> Callable[[str, Any], str]:
    """A check that the value is one of ``choices`` (a setting with a few named modes)."""
    def check(name: str, value: Any) -> str:
        if value not in choices:
            raise ConfigError(f"invalid value for {name!r}: {value!r} (expected one of {', '.join(choices)})")
        return str(value)

    return check


# The largest integer setting: exact in JSON (a double) and far below what a deque or a
# range can take (2^63 overflowed them: a 500 from the control API).
MAX_INTEGER = 2**53


def integer(low: int) -> Callable[[str, Any], int]:
    def check(name: str, value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ConfigError(f"invalid value for {name!r}: {value!r} (expected an integer >= {low})")
        if value > MAX_INTEGER:
            raise ConfigError(f"invalid value for {name!r}: {value!r} (expected an integer <= 2^53)")
        return value

    return check


def latency(name: str, value: Any) -> float:
    """Seconds (a number >= 0), or a distribution given by its percentiles (``{"p50": 0.2, "p99": 1.2}``, or
    ``p50=0.2,p99=1.2`` as text): a :class:`~.percentiles.Percentiles`, drawn per request."""
    if isinstance(value, (int, float)) and not isinstance(value, (bool, Percentiles)):
        return number(0.0)(name, value)
    try:
        return parse_percentiles(name, value)
    except ValueError as error:
        raise ConfigError(f"invalid value for {name!r}: {value!r} ({error})") from None


def latency_text(raw: str) -> float | str:
    """A latency setting's text: a number of seconds, else the percentiles' text for :func:`latency`."""
    try:
        return float(raw)
    except ValueError:
        return raw


def speed(name: str, value: Any) -> float:
    if isinstance(value, str) and value.strip().lower() in ("inf", "infinity"):
        return math.inf
    try:
        return number(0.0, low_inclusive=False, allow_inf=True)(name, value)
    except ConfigError:
        raise ConfigError(
            f"invalid value for {name!r}: {value!r} (expected a positive number or 'inf')"
        ) from None


def boolean(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"invalid value for {name!r}: {value!r} (expected true or false)")
    return value


def text(name: str, value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise ConfigError(f"invalid value for {name!r}: {value!r} (expected a non-empty string)")
    return value


def model_limits(name: str, value: Any) -> tuple[tuple[str, int, int], ...]:
    try:
        return parse_model_limits(value)
    except (ValueError, TypeError) as error:
        raise ConfigError(f"invalid value for {name!r}: {error}") from None


def api_keys(name: str, value: Any) -> tuple[tuple[str, int | None, int | None], ...]:
    """A list of keys, or a mapping key -> ``{"rpm": N, "tpm": N}`` (or None); text: ``k1,k2:rpm=10:tpm=500``."""
    if isinstance(value, str):
        parsed: dict[str, Any] = {}
        for item in filter(None, (part.strip() for part in value.split(","))):
            key, *parts = item.split(":")
            try:
                parsed[key] = {part.split("=", 1)[0]: int(part.split("=", 1)[1]) for part in parts}
            except (IndexError, ValueError):
                raise ConfigError(f"invalid value for {name!r}: {item!r} (expected KEY or KEY:rpm=N:tpm=N)") from None
        value = parsed
    if isinstance(value, (list, tuple)) and all(isinstance(k, str) for k in value):
        value = dict.fromkeys(value)
    if not isinstance(value, dict):
        raise ConfigError(f"invalid value for {name!r}: {value!r} (expected a list of keys or a mapping of key "
                          "to its limits)")
    keys = []
    for key, limits in value.items():
        limits = limits or {}
        if not isinstance(key, str) or not key or not isinstance(limits, dict) or set(limits) - {"rpm", "tpm"}:
            raise ConfigError(f"invalid value for {name!r}: {key!r}: {limits!r} (limits are rpm and tpm)")
        rpm, tpm = (None if limits.get(k) is None else integer(1)(f"{name}.{key}.{k}", limits[k])
                    for k in ("rpm", "tpm"))
        keys.append((key, rpm, tpm))
    return tuple(keys)


def optional_text(name: str, value: Any) -> str | None:
    return None if value is None else text(name, value)


output_mode = one_of(OUTPUT_MODES)


COMPRESSIONS = ("off", "gzip", "br")


_known_compression = one_of(COMPRESSIONS)


def compression(name: str, value: Any) -> str:
    known = _known_compression(name, value)
    if known == "br" and importlib.util.find_spec("brotli") is None:
        raise ConfigError(f"{name!r} = 'br' needs the brotli package: pip install 'pytest-llmsim[brotli]'")
    return known


scheduler = one_of(SCHEDULERS)


#: How a step is composed while prompts wait (``step_policy``): ``mixed`` (vLLM V1, chunked prefill: every decode,
#: then prefill chunks in what is left of the budget), ``prefill_first`` (SGLang, vLLM V0 without chunked
#: prefill: a step with prompts waiting prefills them alone, its decoders wait) or ``prefill_when_due`` (TGI: as
#: ``prefill_first`` once enough prompts wait or they have waited long; see :mod:`.step_composition`).
STEP_POLICIES = ("mixed", "prefill_first", "prefill_when_due")


step_policy = one_of(STEP_POLICIES)


def optional_rate(name: str, value: Any) -> float | None:
    if value is None:
        return None
    return number(0.0, high=1.0)(name, value)


def optional_seconds(name: str, value: Any) -> float | None:
    """None, or a number of seconds above 0."""
    if value is None:
        return None
    return number(0.0, low_inclusive=False)(name, value)


def optional_limit(name: str, value: Any) -> int | None:
    if value is None:
        return None
    return integer(1)(name, value)


def names(name: str, value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [part.strip() for part in value.split(",") if part.strip()]
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) and v for v in value):
        raise ConfigError(f"invalid value for {name!r}: {value!r} (expected a list of non-empty names)")
    return tuple(dict.fromkeys(value))


def answer_length(name: str, value: Any) -> int | tuple[int, int] | None:
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return value
    if (isinstance(value, (tuple, list)) and len(value) == 2
            and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
            and 1 <= value[0] <= value[1]):
        return (value[0], value[1])
    raise ConfigError(
        f"invalid value for {name!r}: {value!r} "
        "(expected None, an integer >= 1, or a (min, max) pair of integers with 1 <= min <= max)"
    )
