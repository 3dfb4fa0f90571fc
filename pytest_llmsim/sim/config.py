"""The simulator's settings: one frozen, validated :class:`SimConfig`, each setting declared once.

A setting is one field of :class:`SimConfig`: its type, its default, its check (:mod:`.setting_checks`)
and its help line, in one :func:`setting` call. Every surface is made from that declaration:
``configure()`` and markers (:meth:`SimConfig.replace`), ``llmsim serve``'s flags (``--NAME``) and
environment variables (``LLMSIM_NAME``), the ``--config`` TOML keys and the control API (all through
:func:`parse_setting` or :meth:`SimConfig.replace`); ``tests/test_config.py`` holds the reference table
in ``docs/reference.md`` to it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from . import setting_checks as check
from .profiles import PROFILES_DIR, check_profile, is_profile_path, load_profile, profile_names
from .setting_checks import COMPRESSIONS, OUTPUT_MODES, SCHEDULERS, ConfigError

__all__ = ["COMPRESSIONS", "ENV_PREFIX", "OUTPUT_MODES", "PROFILES_DIR", "SCHEDULERS", "SETTING_ALIASES",
           "SETTING_HELP", "SETTING_NAMES", "ConfigError", "SimConfig", "environment_name", "is_profile_path",
           "parse_setting", "profile_names", "settings_from_environment"]

T = TypeVar("T")
ENV_PREFIX = "LLMSIM_"  # llmsim serve reads LLMSIM_TTFT and so on (flags win over them, they over --config)


def setting(default: T, check: Callable[[str, Any], Any], help: str, *,
            text: Callable[[str], Any] | None = None, aliases: tuple[str, ...] = ()) -> T:
    """A :class:`SimConfig` field: its default, the check every value passes, its help line, how it
    reads from text when its type does not say (``answer_length``'s ``MIN-MAX``), and the other flag
    names ``llmsim serve`` takes for it with the same meaning (vLLM's ``max-num-seqs``)."""
    return dataclasses.field(default=default, metadata={"check": check, "help": help, "text": text,
                                                        "aliases": aliases})


_SIZE_SUFFIXES = {"k": 10**3, "m": 10**6, "g": 10**9, "K": 2**10, "M": 2**20, "G": 2**30}


def parse_human_int(raw: str) -> int:
    """An integer as vLLM's command line reads one: ``32768``, ``32k`` (32,000), ``32K`` (32,768),
    ``25.6k``; a lower-case suffix is decimal, an upper-case one binary."""
    factor = _SIZE_SUFFIXES.get(raw[-1:]) if raw else None
    if factor is None:
        return int(raw)
    value = float(raw[:-1]) * factor
    if not value.is_integer():
        raise ValueError(raw)
    return int(value)


def parse_range(raw: str) -> int | tuple[int, int]:
    """``N`` or ``MIN-MAX`` as text."""
    low, _, high = raw.partition("-")
    return (int(low), int(high)) if high else int(low)


@dataclass(frozen=True)
class SimConfig:
    """Everything that shapes how a simulated backend behaves.

    Latencies are in *simulated* seconds; ``speed`` maps them to wall time.
    The defaults make a backend instantaneous, so a functional test costs
    milliseconds; latency is something a test asks for.
    """

    model: str = setting(
        "llmsim", check.text,
        "Model name the backend serves and reports")
    ttft: float = setting(
        0.0, check.latency,
        "Base time to first token, simulated seconds, or its percentiles ({'p50': 0.2, 'p99': 1.2}, "
        "p50=0.2,p99=1.2 as text), drawn per request", text=check.latency_text)
    itl: float = setting(
        0.0, check.latency,
        "Inter-token latency (one decode step), simulated seconds, or its percentiles (drawn per step)",
        text=check.latency_text)
    prefill_per_token: float = setting(
        0.0, check.latency,
        "Prefill cost per uncached prompt token, simulated seconds, or its percentiles (drawn per request)",
        text=check.latency_text)
    jitter: float = setting(
        0.0, check.number(0.0, high=1.0),
        "Relative standard deviation of seeded latency noise (0 to 1)")
    load_factor: float = setting(
        1.0, check.number(1.0),
        "Step-time multiplier when the batch is full (>= 1)")
    scheduler: str = setting(
        "sequence", check.scheduler,
        "sequence (each sequence keeps its own step clock: ttft, itl, load_factor) or step (one step "
        "clock for the batch, costs by composition: step_* settings)")
    step_base: float = setting(
        0.0, check.number(0.0),
        "step mode: fixed cost of every step, simulated seconds")
    step_per_prefill_token: float = setting(
        0.0, check.number(0.0),
        "step mode: cost per prefill token in a step, simulated seconds")
    step_per_decode_seq: float = setting(
        0.0, check.number(0.0),
        "step mode: cost per decoding sequence in a step, simulated seconds")
    step_per_kv_token: float = setting(
        0.0, check.number(0.0),
        "step mode: cost per context token the step's decodes attend, simulated seconds")
    step_prefill_base: float = setting(
        0.0, check.number(0.0),
        "step mode: extra fixed cost of a step with a prefill chunk in it (vLLM replays a captured CUDA "
        "graph only for decode-only steps), simulated seconds")
    step_compute_per_token: float = setting(
        0.0, check.number(0.0),
        "step mode: compute time per token in the step (prefill and decode alike); the step takes the "
        "larger of this compute and its memory time (the roofline), simulated seconds")
    step_expert_weights: float = setting(
        0.0, check.number(0.0),
        "step mode, a mixture of experts: time to read every routed expert's weights once; a step reads "
        "the share its tokens route to (memory time), simulated seconds")
    expert_share_per_token: float = setting(
        0.0, check.number(0.0, high=1.0),
        "step mode, a mixture of experts: the share of routed experts one token uses (experts per token / "
        "routed experts); a step of T tokens reads 1 - (1 - share)^T of step_expert_weights")
    step_policy: str = setting(
        "mixed", check.step_policy, "step mode, while prompts wait: mixed (every decode, then prefill chunks: "
        "vLLM V1), prefill_first (the prompts alone, decoders wait: SGLang, vLLM V0 unchunked) or "
        "prefill_when_due (as prefill_first once waiting_served_ratio or max_waiting_steps says: TGI)")
    waiting_served_ratio: float = setting(
        1.2, check.number(0.0),
        "step mode, prefill_when_due: prompts join a running batch once at least this many times its size "
        "would fit one prefill step (TGI's --waiting-served-ratio)")
    max_waiting_steps: int = setting(
        20, check.integer(1),
        "step mode, prefill_when_due: ... or once the batch has decoded this many steps since the last "
        "prefill, counting that one (TGI's --max-waiting-tokens)", aliases=("max-waiting-tokens",))
    max_num_batched_tokens: int = setting(
        8192, check.integer(1),
        "step mode: token budget of one step (a decode counts one; prefill is chunked to fit)",
        text=parse_human_int)
    chunked_prefill: bool = setting(
        True, check.boolean,
        "step mode: a prompt may be split across steps to fill the token budget (vLLM V1, SGLang); false: a step "
        "takes whole prompts only, those that fit what its budget has left, and the first always (TensorRT-LLM "
        "without chunked context, vLLM V0)")
    separate_prefill_pass: bool = setting(
        False, check.boolean,
        "step mode: a step's prompts and its decodes run as two forward passes, one after the other, each "
        "reading the weights (vllm-gaudi without unified attention, its default); false: one pass (vLLM V1 on "
        "GPUs, SGLang, TensorRT-LLM)")
    request_overhead: float = setting(
        0.0, check.number(0.0),
        "step mode: the API server's own time before a request reaches the scheduler, seconds")
    request_serial: float = setting(
        0.0, check.number(0.0),
        "step mode: API-server time each request takes in turn (one event loop), so requests sent "
        "together reach the scheduler one after another, seconds")
    max_batch_size: int = setting(
        256, check.integer(1),
        "Sequences decoded concurrently", aliases=("max-num-seqs",))
    max_waiting: int = setting(
        2048, check.integer(0),
        "Waiting-queue capacity in sequences; a full queue answers 503, a request with more sequences "
        "than max_batch_size + max_waiting 400", aliases=("max-waiting-queue-length",))
    max_model_len: int = setting(
        32768, check.integer(1),
        "Context length: prompt plus max_tokens (32k, 32K: vLLM's forms)", text=parse_human_int)
    block_size: int = setting(
        16, check.integer(1),
        "Prefix-cache block size in tokens")
    cache_capacity_blocks: int = setting(
        65536, check.integer(0),
        "Prefix-cache capacity in blocks (LRU eviction)")
    cache_hit_rate: float | None = setting(
        None, check.optional_rate,
        "Force this fraction of prompt tokens to be cached")
    kv_cache_blocks: int | None = setting(
        None, check.optional_limit,
        "KV-cache capacity in blocks of block_size tokens: a sequence waits for room for its prompt, and "
        "a full cache preempts the latest admitted sequence; unset means unbounded",
        aliases=("num-gpu-blocks-override", "kv-cache-size"))
    kv_reserve_max_tokens: bool = setting(
        False, check.boolean,
        "Admit a request only when its prompt plus its max_tokens fit in the KV cache, and hold them until it "
        "ends (TGI's router, TensorRT-LLM's GUARANTEED_NO_EVICT): nothing is preempted; false: blocks as "
        "tokens are generated (vLLM)")
    output: str = setting(
        "filler", check.output_mode,
        "Generated content: filler (seeded) or echo (last user message)")
    answer_length: int | tuple[int, int] | None = setting(
        None, check.answer_length,
        "Answer length in tokens: N or MIN-MAX (seeded); unset runs to max_tokens", text=parse_range)
    default_max_tokens: int = setting(
        16, check.integer(1),
        "max_tokens when a request gives none")
    seed: int = setting(
        0, check.integer(0),
        "Seed for content, jitter, sampled answer lengths and fault selection")
    speed: float = setting(
        1.0, check.speed,
        "Simulated seconds per wall second (a positive number or inf)")
    rpm: int | None = setting(
        None, check.optional_limit,
        "Simulated requests-per-minute limit (429 past it); unset means none")
    tpm: int | None = setting(
        None, check.optional_limit,
        "Simulated tokens-per-minute limit (prompt + max_tokens); unset means none")
    max_log_entries: int = setting(
        10_000, check.integer(1),
        "Requests kept in the request log (oldest dropped)")
    max_log_bytes: int = setting(
        64 * 1024 * 1024, check.integer(1),
        "Bytes of bodies and headers kept in the request log (oldest dropped)")
    max_log_body_bytes: int = setting(
        1024 * 1024, check.integer(0),
        "Larger bodies are logged as their first this many bytes plus a marker")
    max_body_bytes: int = setting(
        8 * 1024 * 1024, check.integer(1),
        "Largest request body accepted; larger answers 413")
    max_request_tokens: int = setting(
        524_288, check.integer(1),
        "Most tokens one request may ask for: prompt tokens plus n x max_tokens over all its prompts (x "
        "(1 + top_logprobs) with logprobs); more answers 400")
    max_response_bytes: int = setting(
        64 * 1024 * 1024, check.integer(1),
        "Largest non-streamed answer body a request may ask for (estimated from n, max_tokens and "
        "logprobs before any work); more answers 400")
    max_session_seconds: float | None = setting(
        None, check.optional_seconds,
        "Wall seconds a WebSocket session may last; then the server ends it as its API does (Realtime: an "
        "error event, session_expired; Gemini Live: goAway first); none means no limit")
    keepalive_timeout: float = setting(
        5.0, check.number(0.0, low_inclusive=False),
        "Wall seconds a connection may take to send a request head (the first, or the next on a "
        "kept-alive connection) before it is closed, and to send its body after the head (408)")
    keepalive: bool = setting(
        True, check.boolean,
        "Keep HTTP/1.1 connections open between requests (false: Connection: close on every answer)")
    keepalive_max_requests: int | None = setting(
        None, check.optional_limit,
        "Close a kept-alive connection after this many requests, without telling the client first; unset "
        "means no limit")
    max_stored_responses: int = setting(
        1000, check.integer(0),
        "Responses API answers kept for previous_response_id and retrieval (oldest dropped)")
    max_stored_response_bytes: int = setting(
        256 * 1024 * 1024, check.integer(1),
        "Bytes of text those stored answers may hold in all, their conversations included (oldest "
        "dropped; the newest always kept)")
    max_stored_files: int = setting(
        1000, check.integer(0),
        "Files kept by /v1/files (batch inputs); an upload past it answers 400 file_storage_full")
    max_stored_file_bytes: int = setting(
        256 * 1024 * 1024, check.integer(1),
        "Bytes those files may hold in all; an upload past it answers 400 file_storage_full")
    max_trace_requests: int = setting(
        10_000, check.integer(0),
        "Requests the backend's trace keeps (oldest dropped first); 0 turns recording off")
    max_queued_replies: int = setting(
        10_000, check.integer(0),
        "Scripted replies that may wait in the queue (reply_with); more raise / answer 400")
    max_rules: int = setting(
        1_000, check.integer(0),
        "Rules a backend may hold (on(), add_rule); more raise / answer 400")
    max_script_bytes: int = setting(
        16 * 1024 * 1024, check.integer(0),
        "Bytes of JSON the queued replies and rules may take in all; more raise / answer 400")
    tool_call_rate: float = setting(
        1.0, check.number(0.0, high=1.0),
        "Under tool_choice auto, the seeded chance that a reply calls a tool (0 to 1)")
    tool_calls_per_reply: int = setting(
        1, check.integer(1),
        "Tool calls in a reply that calls tools (1 when the request disables parallel calls)")
    embedding_size: int = setting(
        1536, check.integer(1),
        "Length of /v1/embeddings vectors (a request's 'dimensions' may shorten them)")
    speech_seconds_per_token: float = setting(
        0.3, check.number(0.0, low_inclusive=False, high=10.0),
        "Simulated seconds of speech per output token of an audio answer (Realtime sessions)")
    input_audio_tokens_per_second: float = setting(
        10.0, check.number(0.0, low_inclusive=False),
        "Audio tokens a second of input audio counts as (Realtime usage and prompt length)")
    output_audio_tokens_per_second: float = setting(
        20.0, check.number(0.0, low_inclusive=False),
        "Audio tokens a second of generated speech counts as (Realtime usage)")
    served_models: tuple[str, ...] = setting(
        (), check.names,
        "More model names the backend answers to, besides 'model' (comma-separated)")
    strict_models: bool = setting(
        False, check.boolean,
        "Answer 404 model_not_found for a model name the backend does not serve")
    required_api_key: str | None = setting(
        None, check.optional_text,
        "Generation requests must carry this credential (an API key or bearer token, or a SigV4 access "
        "key id): otherwise 401 (403 for a signed request), in the API's shape")
    api_keys: tuple[tuple[str, int | None, int | None], ...] = setting(
        (), check.api_keys,
        "Keys generation requests may present (a list, or key -> {rpm, tpm} of its own): any other is a "
        "401 in the API's shape; a key over its own limits answers 429 while the others are served")
    ollama_load_seconds: float = setting(
        0.0, check.number(0.0),
        "Simulated seconds a model takes to load through Ollama's API (/api/*): added to its first "
        "request and to the first after its keep_alive ran out; reported as load_duration")
    model_limits: tuple[tuple[str, int, int], ...] = setting(
        (), check.model_limits,
        "Context window and largest max_tokens per model name, over the catalog of published limits: "
        "{name: (context_window, max_output_tokens)} or 'name=CONTEXT/MAX_OUTPUT,...'")
    natural_answer_cap: int = setting(
        1024, check.integer(0),
        "With no answer_length, an answer whose max_tokens is larger than this ends naturally (finish "
        "stop) at a seeded length of at most this; 0: answers run to max_tokens")
    strict_fields: bool = setting(
        False, check.boolean,
        "Refuse a request field no version of its API defines (400, as the provider does) instead of "
        "accepting it and listing it in record.ignored_fields")
    tls: bool = setting(
        False, check.boolean,
        "Serve HTTPS (a certificate made on first use; clients trust llm_backend.ca_file): URLs say "
        "https, and a plain HTTP request other than the control API's is a 400")
    compression: str = setting(
        "off", check.compression,
        "Compress JSON answers, errors and streams (each event flushed) when the request's "
        "Accept-Encoding allows: 'off' (the default, as vLLM), 'gzip', or 'br' (the brotli extra)")
    optional_property_rate: float = setting(
        0.9, check.number(0.0, high=1.0),
        "The seeded chance that generated JSON (tool arguments, structured output) fills in each optional "
        "property (0 to 1), as a model fills in what it can")
    lora_adapters: tuple[str, ...] = setting(
        (), check.names,
        "LoRA adapters loaded at start (comma-separated names), served like models")
    max_loras: int = setting(
        1, check.integer(1),
        "LoRA adapters active in one batch; requests for others wait")
    profile: str | None = setting(
        None, check_profile,
        "A preset of settings (e.g. qwen2.5-0.5b-l4: step costs fitted to a real vLLM sweep) or a .toml "
        "file; settings given beside it win")

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


_FIELDS = {field.name: field for field in dataclasses.fields(SimConfig)}
SETTING_NAMES: tuple[str, ...] = tuple(_FIELDS)
#: One line of help per setting (the CLI's ``--help``), from its declaration.
SETTING_HELP: dict[str, str] = {name: field.metadata["help"] for name, field in _FIELDS.items()}
_VALIDATORS: dict[str, Callable[[str, Any], Any]] = {name: field.metadata["check"] for name, field in _FIELDS.items()}
_TYPES: dict[str, str] = {name: str(field.type) for name, field in _FIELDS.items()}
#: The other flag names of a setting (``max_batch_size``: ``max-num-seqs``), from its declaration.
SETTING_ALIASES: dict[str, tuple[str, ...]] = {name: field.metadata["aliases"] for name, field in _FIELDS.items()}


def parse_setting(name: str, text: str) -> Any:
    """Turn a setting given as text (flag, environment variable, ini) into a validated value.

    How the text reads follows the setting's declared type: ``none`` (or nothing) for one that may be
    None, true/false words for a boolean, a number for a number; lists and names go to the check as
    text. Raises :class:`ConfigError` for an unknown name or a value that does not parse; the caller
    adds where the text came from.
    """
    if name not in _VALIDATORS:
        raise ConfigError(f"unknown setting {name!r}; accepted: {', '.join(SETTING_NAMES)}")
    kind = _TYPES[name]
    raw = text.strip()
    value: Any
    try:
        reader = _FIELDS[name].metadata["text"]
        if kind.endswith("| None") and raw.lower() in ("", "none"):
            value = None
        elif reader is not None:
            value = reader(raw)
        elif kind == "bool":
            lowered = raw.lower()
            value = True if lowered in ("1", "true", "yes", "on") else False if lowered in (
                "0", "false", "no", "off") else text
        elif kind.startswith("int"):
            value = int(raw)
        elif kind.startswith("float"):
            value = float(raw)
        else:
            value = raw
    except ValueError:
        value = text  # the check rejects the raw text with the expected form
    return _VALIDATORS[name](name, value)


def environment_name(name: str) -> str:
    """The environment variable ``llmsim serve`` reads ``name`` from (``ttft`` -> ``LLMSIM_TTFT``)."""
    return ENV_PREFIX + name.upper()


def settings_from_environment(environ: Mapping[str, str]) -> dict[str, Any]:
    """The settings ``environ`` gives (``LLMSIM_*``), validated; :class:`ConfigError` naming the variable."""
    found = {}
    for name in SETTING_NAMES:
        variable = environment_name(name)
        if variable in environ:
            try:
                found[name] = parse_setting(name, environ[variable])
            except ConfigError as error:
                raise ConfigError(f"{variable}: {error}") from None
    return found
