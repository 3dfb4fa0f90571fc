"""The simulator's settings: one frozen, validated :class:`SimConfig`.

Every way a user can set something (``configure()``, markers, command-line
flags, ini keys, environment variables, ``llmsim serve`` flags) ends up in
:meth:`SimConfig.replace` or :func:`parse_setting`, so validation and its error
messages live in one place.
"""

from __future__ import annotations

import dataclasses
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
    ollama_load_seconds: float = 0.0
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


def _optional_text(name: str, value: Any) -> str | None:
    return None if value is None else _text(name, value)


def _output_mode(name: str, value: Any) -> str:
    if value not in OUTPUT_MODES:
        raise ConfigError(f"invalid value for {name!r}: {value!r} (expected one of {', '.join(OUTPUT_MODES)})")
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
    "ollama_load_seconds": _number(0.0),
    "lora_adapters": _names,
    "max_loras": _integer(1),
}

SETTING_NAMES: tuple[str, ...] = tuple(field.name for field in dataclasses.fields(SimConfig))
assert set(SETTING_NAMES) == set(_VALIDATORS), "every setting needs a validator"

SETTING_HELP: dict[str, str] = {
    "model": "Model name the backend serves and reports",
    "profile": "A preset of settings (e.g. qwen2.5-0.5b-l4: step costs fitted to a real vLLM sweep) or a "
               ".toml file; settings given beside it win",
    "ttft": "Base time to first token, simulated seconds",
    "itl": "Inter-token latency (one decode step), simulated seconds",
    "prefill_per_token": "Prefill cost per uncached prompt token, simulated seconds",
    "jitter": "Relative standard deviation of seeded latency noise (0 to 1)",
    "load_factor": "Step-time multiplier when the batch is full (>= 1)",
    "scheduler": "sequence (each sequence keeps its own step clock: ttft, itl, load_factor) or step (one step "
                 "clock for the batch, costs by composition: step_* settings)",
    "step_base": "step mode: fixed cost of every step, simulated seconds",
    "step_per_prefill_token": "step mode: cost per prefill token in a step, simulated seconds",
    "step_per_decode_seq": "step mode: cost per decoding sequence in a step, simulated seconds",
    "step_per_kv_token": "step mode: cost per context token the step's decodes attend, simulated seconds",
    "step_prefill_base": "step mode: extra fixed cost of a step with a prefill chunk in it (vLLM replays a captured "
                         "CUDA graph only for decode-only steps), simulated seconds",
    "max_num_batched_tokens": "step mode: token budget of one step (a decode counts one; prefill is chunked to fit)",
    "request_overhead": "step mode: the API server's own time before a request reaches the scheduler, seconds",
    "request_serial": "step mode: API-server time each request takes in turn (one event loop), so requests sent "
                      "together reach the scheduler one after another, seconds",
    "max_batch_size": "Sequences decoded concurrently",
    "max_waiting": "Waiting-queue capacity in sequences; a full queue answers 503, a request with more sequences "
                   "than max_batch_size + max_waiting 400",
    "max_model_len": "Context length: prompt plus max_tokens",
    "block_size": "Prefix-cache block size in tokens",
    "cache_capacity_blocks": "Prefix-cache capacity in blocks (LRU eviction)",
    "cache_hit_rate": "Force this fraction of prompt tokens to be cached",
    "kv_cache_blocks": "KV-cache capacity in blocks of block_size tokens: a sequence waits for room for its "
                       "prompt, and a full cache preempts the latest admitted sequence; unset means unbounded",
    "output": "Generated content: filler (seeded) or echo (last user message)",
    "answer_length": "Answer length in tokens: N or MIN-MAX (seeded); unset runs to max_tokens",
    "default_max_tokens": "max_tokens when a request gives none",
    "seed": "Seed for content, jitter, sampled answer lengths and fault selection",
    "speed": "Simulated seconds per wall second (a positive number or inf)",
    "rpm": "Simulated requests-per-minute limit (429 past it); unset means none",
    "tpm": "Simulated tokens-per-minute limit (prompt + max_tokens); unset means none",
    "max_log_entries": "Requests kept in the request log (oldest dropped)",
    "max_log_bytes": "Bytes of bodies and headers kept in the request log (oldest dropped)",
    "max_log_body_bytes": "Larger bodies are logged as their first this many bytes plus a marker",
    "max_body_bytes": "Largest request body accepted; larger answers 413",
    "max_request_tokens": "Most tokens one request may ask for: prompt tokens plus n x max_tokens "
                          "over all its prompts (x (1 + top_logprobs) with logprobs); more answers 400",
    "max_response_bytes": "Largest non-streamed answer body a request may ask for (estimated from n, max_tokens "
                          "and logprobs before any work); more answers 400",
    "keepalive_timeout": "Wall seconds a connection may take to send a request head (the first, or the next on a "
                         "kept-alive connection) before it is closed, and to send its body after the head (408)",
    "keepalive": "Keep HTTP/1.1 connections open between requests (false: Connection: close on every answer)",
    "keepalive_max_requests": "Close a kept-alive connection after this many requests, without telling the "
                              "client first; unset means no limit",
    "max_stored_responses": "Responses API answers kept for previous_response_id and retrieval (oldest dropped)",
    "max_stored_response_bytes": "Bytes of text those stored answers may hold in all, their conversations "
                                 "included (oldest dropped; the newest always kept)",
    "max_trace_requests": "Requests the backend's trace keeps (oldest dropped first); 0 turns recording off",
    "max_queued_replies": "Scripted replies that may wait in the queue (reply_with); more raise / answer 400",
    "max_rules": "Rules a backend may hold (on(), add_rule); more raise / answer 400",
    "max_script_bytes": "Bytes of JSON the queued replies and rules may take in all; more raise / answer 400",
    "tool_call_rate": "Under tool_choice auto, the seeded chance that a reply calls a tool (0 to 1)",
    "tool_calls_per_reply": "Tool calls in a reply that calls tools (1 when the request disables parallel calls)",
    "embedding_size": "Length of /v1/embeddings vectors (a request's 'dimensions' may shorten them)",
    "served_models": "More model names the backend answers to, besides 'model' (comma-separated)",
    "strict_models": "Answer 404 model_not_found for a model name the backend does not serve",
    "ollama_load_seconds": "Simulated seconds a model takes to load through Ollama's API (/api/*): added to its "
                           "first request and to the first after its keep_alive ran out; reported as load_duration",
    "required_api_key": "Generation requests must carry this credential (an API key or bearer token, or a SigV4 "
                        "access key id): otherwise 401 (403 for a signed request), in the API's shape",
    "lora_adapters": "LoRA adapters loaded at start (comma-separated names), served like models",
    "max_loras": "LoRA adapters active in one batch; requests for others wait",
}


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
