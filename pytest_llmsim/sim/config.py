"""The simulator's settings: one frozen, validated :class:`SimConfig`.

Every way a user can set something (``configure()``, markers, command-line
flags, ini keys, environment variables, ``llmsim serve`` flags) ends up in
:meth:`SimConfig.replace` or :func:`parse_setting`, so validation and its error
messages live in one place.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .model_limits import parse_model_limits
from .setting_help import SETTING_HELP

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

__all__ = ["SETTING_HELP", "ConfigError", "SimConfig", "is_profile_path", "parse_setting", "profile_names"]

OUTPUT_MODES = ("filler", "echo")
SCHEDULERS = ("sequence", "step")


class ConfigError(ValueError):
    """A setting was unknown or had a bad value; the message names it."""


@dataclass(frozen=True)
class SimConfig:
    """Everything that shapes how a simulated backend behaves.

    Latencies are in *simulated* seconds; ``speed`` maps them to wall time.
    The defaults make a backend instantaneous, so a functional test costs
    milliseconds; latency is something a test asks for.
    """

    model: str = "llmsim"
    ttft: float = 0.0
    itl: float = 0.0
    prefill_per_token: float = 0.0
    jitter: float = 0.0
    load_factor: float = 1.0
    scheduler: str = "sequence"
    step_base: float = 0.0
    step_per_prefill_token: float = 0.0
    step_per_decode_seq: float = 0.0
    step_per_kv_token: float = 0.0
    step_prefill_base: float = 0.0
    step_compute_per_token: float = 0.0
    step_expert_weights: float = 0.0
    expert_share_per_token: float = 0.0
    max_num_batched_tokens: int = 8192
    request_overhead: float = 0.0
    request_serial: float = 0.0
    max_batch_size: int = 256
    max_waiting: int = 2048
    max_model_len: int = 32768
    block_size: int = 16
    cache_capacity_blocks: int = 65536
    cache_hit_rate: float | None = None
    kv_cache_blocks: int | None = None
    output: str = "filler"
    answer_length: int | tuple[int, int] | None = None
    default_max_tokens: int = 16
    seed: int = 0
    speed: float = 1.0
    rpm: int | None = None
    tpm: int | None = None
    max_log_entries: int = 10_000
    max_log_bytes: int = 64 * 1024 * 1024
    max_log_body_bytes: int = 1024 * 1024
    max_body_bytes: int = 8 * 1024 * 1024
    max_request_tokens: int = 524_288
    max_response_bytes: int = 64 * 1024 * 1024
    keepalive_timeout: float = 5.0
    keepalive: bool = True
    keepalive_max_requests: int | None = None
    max_stored_responses: int = 1000
    max_stored_response_bytes: int = 256 * 1024 * 1024
    max_stored_files: int = 1000
    max_stored_file_bytes: int = 256 * 1024 * 1024
    max_trace_requests: int = 10_000
    max_queued_replies: int = 10_000
    max_rules: int = 1_000
    max_script_bytes: int = 16 * 1024 * 1024
    tool_call_rate: float = 1.0
    tool_calls_per_reply: int = 1
    embedding_size: int = 1536
    served_models: tuple[str, ...] = ()
    strict_models: bool = False
    required_api_key: str | None = None
    api_keys: tuple[tuple[str, int | None, int | None], ...] = ()
    ollama_load_seconds: float = 0.0
    model_limits: tuple[tuple[str, int, int], ...] = ()
    natural_answer_cap: int = 1024
    strict_fields: bool = False
    tls: bool = False
    compression: str = "off"
    optional_property_rate: float = 0.9
    lora_adapters: tuple[str, ...] = ()
    max_loras: int = 1
    profile: str | None = None

    def replace(self, **settings: Any) -> SimConfig:
        """Return a copy with ``settings`` applied, each one validated.

        Raises :class:`ConfigError` naming an unknown key (and listing the
        accepted ones) or a bad value.
        """
        unknown = sorted(set(settings) - set(SETTING_NAMES))
        if unknown:
            raise ConfigError(
                f"unknown setting{'s' if len(unknown) > 1 else ''} "
                f"{', '.join(repr(k) for k in unknown)}; accepted: {', '.join(SETTING_NAMES)}"
            )
        if settings.get("profile") is not None:  # a preset's settings first; the call's own keys win
            preset = load_profile(settings["profile"])
            unknown = sorted(set(preset) - set(SETTING_NAMES))
            if unknown:
                raise ConfigError(f"profile {settings['profile']!r} has unknown setting(s) "
                                  f"{', '.join(repr(k) for k in unknown)}; accepted: {', '.join(SETTING_NAMES)}")
            settings = {**preset, **settings}
        checked = {key: _VALIDATORS[key](key, value) for key, value in settings.items()}
        return dataclasses.replace(self, **checked)

    def as_dict(self) -> dict[str, Any]:
        """The settings as a plain dict (JSON-friendly)."""
        return dataclasses.asdict(self)


# --- validators: each takes (name, value) and returns the normalised value ---


def _number(low: float, *, low_inclusive: bool = True, high: float = math.inf,
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


# The largest integer setting: exact in JSON (a double) and far below what a deque or a
# range can take (2^63 overflowed them: a 500 from the control API).
MAX_INTEGER = 2**53


def _integer(low: int) -> Callable[[str, Any], int]:
    def check(name: str, value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ConfigError(f"invalid value for {name!r}: {value!r} (expected an integer >= {low})")
        if value > MAX_INTEGER:
            raise ConfigError(f"invalid value for {name!r}: {value!r} (expected an integer <= 2^53)")
        return value

    return check


def _speed(name: str, value: Any) -> float:
    if isinstance(value, str) and value.strip().lower() in ("inf", "infinity"):
        return math.inf
    try:
        return _number(0.0, low_inclusive=False, allow_inf=True)(name, value)
    except ConfigError:
        raise ConfigError(
            f"invalid value for {name!r}: {value!r} (expected a positive number or 'inf')"
        ) from None


def _boolean(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"invalid value for {name!r}: {value!r} (expected true or false)")
    return value


def _text(name: str, value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise ConfigError(f"invalid value for {name!r}: {value!r} (expected a non-empty string)")
    return value


def _model_limits(name: str, value: Any) -> tuple[tuple[str, int, int], ...]:
    try:
        return parse_model_limits(value)
    except (ValueError, TypeError) as error:
        raise ConfigError(f"invalid value for {name!r}: {error}") from None


def _api_keys(name: str, value: Any) -> tuple[tuple[str, int | None, int | None], ...]:
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
        rpm, tpm = (None if limits.get(k) is None else _integer(1)(f"{name}.{key}.{k}", limits[k])
                    for k in ("rpm", "tpm"))
        keys.append((key, rpm, tpm))
    return tuple(keys)


def _optional_text(name: str, value: Any) -> str | None:
    return None if value is None else _text(name, value)


def _output_mode(name: str, value: Any) -> str:
    if value not in OUTPUT_MODES:
        raise ConfigError(f"invalid value for {name!r}: {value!r} (expected one of {', '.join(OUTPUT_MODES)})")
    return str(value)


COMPRESSIONS = ("off", "gzip", "br")


def _compression(name: str, value: Any) -> str:
    if value not in COMPRESSIONS:
        raise ConfigError(f"invalid value for {name!r}: {value!r} (expected one of {', '.join(COMPRESSIONS)})")
    if value == "br" and importlib.util.find_spec("brotli") is None:
        raise ConfigError(f"{name!r} = 'br' needs the brotli package: pip install 'pytest-llmsim[brotli]'")
    return str(value)


def _scheduler(name: str, value: Any) -> str:
    if value not in SCHEDULERS:
        raise ConfigError(f"invalid value for {name!r}: {value!r} (expected one of {', '.join(SCHEDULERS)})")
    return str(value)


def _optional_rate(name: str, value: Any) -> float | None:
    if value is None:
        return None
    return _number(0.0, high=1.0)(name, value)


def _optional_limit(name: str, value: Any) -> int | None:
    if value is None:
        return None
    return _integer(1)(name, value)


PROFILES_DIR = Path(__file__).parent.parent / "profiles"  # pytest_llmsim/profiles


def profile_names() -> list[str]:
    """The presets shipped with pytest-llmsim (``profile="NAME"``)."""
    return sorted(path.stem for path in PROFILES_DIR.glob("*.toml"))


def is_profile_path(name: str) -> bool:
    """Whether a ``profile`` value names a file (``.toml``) rather than a shipped preset."""
    return name.endswith(".toml")


def load_profile(name: Any) -> dict[str, Any]:
    """A preset's settings (``pytest_llmsim/profiles/NAME.toml``), or a TOML file's when ``name`` is a path."""
    if not isinstance(name, str) or not name:
        raise ConfigError(f"invalid value for 'profile': {name!r} (expected a preset name or a .toml path)")
    if is_profile_path(name):
        path = Path(name)
        try:
            found = path.is_file()
        except OSError:  # a name too long for the file system, ...
            found = False
    else:  # a preset: only the shipped names, never a path made of one ("../x")
        path = PROFILES_DIR / f"{name}.toml"
        found = name in profile_names()
    if not found:
        raise ConfigError(f"unknown profile {name[:100]!r}; presets: {', '.join(profile_names())} (or a .toml path)")
    try:
        with open(path, "rb") as handle:
            data = tomllib.load(handle)
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise ConfigError(f"profile {name!r} cannot be read: {error}") from None
    data.pop("profile", None)
    return data


def _profile(name: str, value: Any) -> str | None:
    if value is not None:
        load_profile(value)  # raises ConfigError naming the presets
    return None if value is None else str(value)


def _names(name: str, value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [part.strip() for part in value.split(",") if part.strip()]
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) and v for v in value):
        raise ConfigError(f"invalid value for {name!r}: {value!r} (expected a list of non-empty names)")
    return tuple(dict.fromkeys(value))


def _answer_length(name: str, value: Any) -> int | tuple[int, int] | None:
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


_VALIDATORS: dict[str, Callable[[str, Any], Any]] = {
    "model": _text,
    "profile": _profile,
    "ttft": _number(0.0),
    "itl": _number(0.0),
    "prefill_per_token": _number(0.0),
    "jitter": _number(0.0, high=1.0),
    "load_factor": _number(1.0),
    "scheduler": _scheduler,
    "step_base": _number(0.0),
    "step_per_prefill_token": _number(0.0),
    "step_per_decode_seq": _number(0.0),
    "step_per_kv_token": _number(0.0),
    "step_prefill_base": _number(0.0),
    "step_compute_per_token": _number(0.0),
    "step_expert_weights": _number(0.0),
    "expert_share_per_token": _number(0.0, high=1.0),
    "max_num_batched_tokens": _integer(1),
    "request_overhead": _number(0.0),
    "request_serial": _number(0.0),
    "max_batch_size": _integer(1),
    "max_waiting": _integer(0),
    "max_model_len": _integer(1),
    "block_size": _integer(1),
    "cache_capacity_blocks": _integer(0),
    "cache_hit_rate": _optional_rate,
    "kv_cache_blocks": _optional_limit,
    "output": _output_mode,
    "answer_length": _answer_length,
    "default_max_tokens": _integer(1),
    "seed": _integer(0),
    "speed": _speed,
    "rpm": _optional_limit,
    "tpm": _optional_limit,
    "max_log_entries": _integer(1),
    "max_log_bytes": _integer(1),
    "max_log_body_bytes": _integer(0),
    "max_body_bytes": _integer(1),
    "max_request_tokens": _integer(1),
    "max_response_bytes": _integer(1),
    "keepalive_timeout": _number(0.0, low_inclusive=False),
    "max_stored_responses": _integer(0),
    "max_stored_response_bytes": _integer(1),
    "max_stored_files": _integer(0),
    "max_stored_file_bytes": _integer(1),
    "max_trace_requests": _integer(0),
    "max_queued_replies": _integer(0),
    "max_rules": _integer(0),
    "max_script_bytes": _integer(0),
    "keepalive": _boolean,
    "keepalive_max_requests": _optional_limit,
    "tool_call_rate": _number(0.0, high=1.0),
    "tool_calls_per_reply": _integer(1),
    "embedding_size": _integer(1),
    "served_models": _names,
    "strict_models": _boolean,
    "required_api_key": _optional_text,
    "api_keys": _api_keys,
    "ollama_load_seconds": _number(0.0),
    "model_limits": _model_limits,
    "natural_answer_cap": _integer(0),
    "strict_fields": _boolean,
    "tls": _boolean,
    "compression": _compression,
    "optional_property_rate": _number(0.0, high=1.0),
    "lora_adapters": _names,
    "max_loras": _integer(1),
}

SETTING_NAMES: tuple[str, ...] = tuple(field.name for field in dataclasses.fields(SimConfig))
assert set(SETTING_NAMES) == set(_VALIDATORS), "every setting needs a validator"



def parse_setting(name: str, text: str) -> Any:
    """Turn a setting given as text (flag, env, ini) into a validated value.

    Raises :class:`ConfigError` for an unknown name or a value that does not
    parse; the caller adds where the text came from.
    """
    if name not in _VALIDATORS:
        raise ConfigError(f"unknown setting {name!r}; accepted: {', '.join(SETTING_NAMES)}")
    default = getattr(SimConfig(), name)
    raw = text.strip()
    value: Any
    try:
        if name in ("cache_hit_rate", "answer_length", "rpm", "tpm", "keepalive_max_requests",
                    "kv_cache_blocks", "profile") and \
                raw.lower() in ("", "none"):
            value = None
        elif isinstance(default, bool):
            lowered = raw.lower()
            value = True if lowered in ("1", "true", "yes", "on") else False if lowered in (
                "0", "false", "no", "off") else text
        elif name in ("served_models", "lora_adapters", "profile"):
            value = raw
        elif name == "answer_length":
            low, _, high = raw.partition("-")
            value = (int(low), int(high)) if high else int(low)
        elif name == "cache_hit_rate" or isinstance(default, float):
            value = float(raw)
        elif name in ("rpm", "tpm", "keepalive_max_requests", "kv_cache_blocks") or isinstance(default, int):
            value = int(raw)
        else:
            value = raw
    except ValueError:
        value = text  # the validator rejects the raw text with the expected form
    return _VALIDATORS[name](name, value)
