"""Each model's context window and largest answer, as the providers publish them.

A client library sends its own default ``max_tokens`` (pydantic-ai's Claude
models 64,000, others more); the real API accepts it up to the model's
largest output and refuses it past that. The catalog holds the published
limits by model family, matched on the name (a Bedrock id such as
``us.anthropic.claude-sonnet-4-...`` or a provider prefix ``openai/`` is
looked through); the ``model_limits`` setting adds or overrides names; a
name in neither gets ``max_model_len`` and any ``max_tokens`` that fits in it.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any

__all__ = ["CATALOG", "ModelLimits", "limits_for", "parse_model_limits"]


@dataclass(frozen=True, slots=True)
class ModelLimits:
    """A model's context window (prompt plus answer, in tokens) and the largest ``max_tokens`` it takes
    (None: any that fits the context, as vLLM takes it)."""

    context_window: int
    max_output_tokens: int | None


# First match wins: specific patterns before their family's. Published limits (2025-2026).
CATALOG: tuple[tuple[str, ModelLimits], ...] = (
    ("gpt-5*", ModelLimits(400_000, 128_000)),
    ("gpt-4.1*", ModelLimits(1_047_576, 32_768)),
    ("gpt-4o*", ModelLimits(128_000, 16_384)),
    ("gpt-4-turbo*", ModelLimits(128_000, 4_096)),
    ("gpt-4", ModelLimits(8_192, 8_192)),
    ("gpt-4-0613", ModelLimits(8_192, 8_192)),
    ("gpt-3.5-turbo*", ModelLimits(16_385, 4_096)),
    ("o1-mini*", ModelLimits(128_000, 65_536)),
    ("o1*", ModelLimits(200_000, 100_000)),
    ("o3*", ModelLimits(200_000, 100_000)),
    ("o4-mini*", ModelLimits(200_000, 100_000)),
    # Anthropic's models pages (2026-12): Opus and Sonnet 4.6, and every 5 family, 1M in and 128K out
    ("claude-opus-4-6*", ModelLimits(1_000_000, 128_000)),
    ("claude-sonnet-4-6*", ModelLimits(1_000_000, 128_000)),
    ("claude-opus-5*", ModelLimits(1_000_000, 128_000)),
    ("claude-sonnet-5*", ModelLimits(1_000_000, 128_000)),
    ("claude-fable-5*", ModelLimits(1_000_000, 128_000)),
    ("claude-opus-4-5*", ModelLimits(200_000, 64_000)),
    ("claude-opus-4*", ModelLimits(200_000, 32_000)),
    ("claude-sonnet-4*", ModelLimits(200_000, 64_000)),
    ("claude-haiku-4*", ModelLimits(200_000, 64_000)),
    ("claude-3-7-sonnet*", ModelLimits(200_000, 64_000)),
    ("claude-3-5-sonnet*", ModelLimits(200_000, 8_192)),
    ("claude-3-5-haiku*", ModelLimits(200_000, 8_192)),
    ("claude-3-*", ModelLimits(200_000, 4_096)),
    ("gemini-3*", ModelLimits(1_048_576, 65_536)),
    ("gemini-2.5-*", ModelLimits(1_048_576, 65_536)),
    ("gemini-2.0-*", ModelLimits(1_048_576, 8_192)),
    ("gemini-1.5-pro*", ModelLimits(2_097_152, 8_192)),
    ("gemini-1.5-*", ModelLimits(1_048_576, 8_192)),
)


def _candidates(model: str) -> list[str]:
    """The name and what follows each provider prefix in it (``openai/``, ``us.anthropic.``)."""
    base = model.lower().rsplit("/", 1)[-1]
    return [base] + [base[i + 1:] for i, char in enumerate(base) if char == "."]


@functools.lru_cache(maxsize=1024)  # every request asks; a few names recur (matching costs ~5 µs)
def limits_for(model: str, overrides: tuple[tuple[str, int, int], ...], max_model_len: int) -> ModelLimits:
    """The limits of ``model``: an override by exact name, else the catalog, else ``max_model_len``."""
    for name, context, output in overrides:
        if name == model:
            return ModelLimits(context, output)
    for candidate in _candidates(model):
        for pattern, limits in CATALOG:
            if fnmatchcase(candidate, pattern):
                return limits
    return ModelLimits(max_model_len, None)


def parse_model_limits(value: Any) -> tuple[tuple[str, int, int], ...]:
    """``model_limits`` as given: a mapping ``{name: (context_window, max_output_tokens)}`` (or
    ``{name: {"context_window": ..., "max_output_tokens": ...}}``), or the text
    ``"name=CONTEXT/MAX_OUTPUT,..."``. Raises ValueError saying what is wrong."""
    if isinstance(value, str):
        pairs: dict[str, Any] = {}
        for item in filter(None, (part.strip() for part in value.split(","))):
            name, sep, numbers = item.partition("=")
            context, slash, output = numbers.partition("/")
            if not sep or not slash or not name.strip():
                raise ValueError(f"{item!r} is not NAME=CONTEXT/MAX_OUTPUT")
            pairs[name.strip()] = (context.strip(), output.strip())
        value = {name: (int(context), int(output)) for name, (context, output) in pairs.items()}
    if isinstance(value, (tuple, list)):
        value = {entry[0]: (entry[1], entry[2]) for entry in value}
    if not isinstance(value, dict):
        raise ValueError("expected a mapping of model name to (context_window, max_output_tokens)")
    parsed = []
    for name, limits in value.items():
        if isinstance(limits, dict):
            limits = (limits.get("context_window"), limits.get("max_output_tokens"))
        if not isinstance(name, str) or not name or not isinstance(limits, (tuple, list)) or len(limits) != 2:
            raise ValueError(f"{name!r}: expected (context_window, max_output_tokens)")
        context, output = limits
        if any(isinstance(n, bool) or not isinstance(n, int) or n < 1 for n in (context, output)) or output > context:
            raise ValueError(f"{name!r}: limits must be positive integers, max_output_tokens <= context_window")
        parsed.append((name, int(context), int(output)))
    return tuple(parsed)
