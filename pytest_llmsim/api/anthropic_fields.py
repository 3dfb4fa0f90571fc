"""Anthropic Messages requests: the body's fields, its content blocks, ``thinking`` and ``output_config``.

Parse: ``model`` and ``max_tokens`` are required, as Anthropic requires them;
``system`` is a string or text blocks; ``messages`` alternate ``user`` and
``assistant`` with string or block content (``text``; ``tool_use`` and
``tool_result`` are counted as their text; ``thinking`` blocks sent back are
checked against their signature and not counted, as Anthropic drops them);
``stop_sequences``, ``stream``, sampling fields are checked when present;
``tools`` (custom ones and the Anthropic-defined client tools) with
``tool_choice``; ``thinking`` (``enabled`` with ``budget_tokens``, or
``adaptive``) and ``output_config`` (``format``, ``effort``).
"""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any

from ..sim import ChatMessage, GenerationRequest, invalid
from ..sim.request import OutputFormat, ReasoningAsk
from .anthropic_context import context_edits
from .field_policy import FieldPolicy
from .tool_fields import anthropic_output_format, anthropic_tool_use
from .tools_text import tools_text
from .validation import describe, expect_object, is_int, optional, ranged

__all__ = ["MESSAGE_FIELDS", "parse_messages", "thinking_signature"]

MAX_STOP_SEQUENCES = 8191 // 8  # Anthropic documents no small cap; bound the list anyway


def thinking_signature(thinking: str) -> str:
    """The ``signature`` of a thinking block: the same text always signs the same, in every process, so a
    block the client sends back is checked as Anthropic checks it."""
    return base64.b64encode(hashlib.sha256(b"pytest-llmsim thinking\x00" + thinking.encode()).digest() * 2).decode()


def _thinking(body: dict[str, Any], max_tokens: int | None) -> ReasoningAsk | None:
    """``thinking``: ``{"type": "enabled", "budget_tokens": N}`` (N >= 1024, below ``max_tokens``),
    ``{"type": "adaptive"}`` (its length from ``output_config.effort``, default high) or ``disabled``."""
    value = body.get("thinking")
    if value is None:
        return None
    kind = value.get("type") if isinstance(value, dict) else None
    if kind not in ("enabled", "disabled", "adaptive"):
        raise invalid("thinking.type: Input should be 'enabled', 'disabled' or 'adaptive'", "thinking.type",
                      "invalid_value")
    unknown = sorted(set(value) - {"type", "budget_tokens", "display"})
    if unknown:
        raise invalid(f"thinking.{kind}.{unknown[0]}: Extra inputs are not permitted", f"thinking.{unknown[0]}",
                      "unknown_parameter")
    if value.get("display") not in (None, "summarized"):  # the thinking is always shown here
        raise invalid(f"thinking.display: {value.get('display')!r} is not simulated by pytest-llmsim; the thinking "
                      "is shown (\"summarized\").", "thinking.display", "unsupported_value")
    if kind == "disabled":
        return None
    choice = body.get("tool_choice")
    if isinstance(choice, dict) and choice.get("type") in ("any", "tool"):
        raise invalid("Thinking may not be enabled when tool_choice forces tool use.", "tool_choice",
                      "invalid_value")
    if kind == "adaptive":
        config = body.get("output_config")
        effort = config.get("effort", "high") if isinstance(config, dict) else "high"
        if effort not in ("low", "medium", "high", "max"):
            raise invalid("output_config.effort: Input should be 'low', 'medium', 'high' or 'max'",
                          "output_config.effort", "invalid_value")
        return ReasoningAsk(effort=effort, param="thinking")
    budget = value.get("budget_tokens")
    if not is_int(budget):
        raise invalid("thinking.enabled.budget_tokens: Field required (an integer).", "thinking.budget_tokens",
                      "missing_required_parameter" if budget is None else "invalid_type")
    if budget < 1024:
        raise invalid("thinking.enabled.budget_tokens: Input should be greater than or equal to 1024",
                      "thinking.budget_tokens", "integer_below_min_value")
    if max_tokens is not None and budget >= max_tokens:
        raise invalid("`max_tokens` must be greater than `thinking.budget_tokens`. Please consult our documentation "
                      "at https://docs.claude.com/en/docs/build-with-claude/extended-thinking#max-tokens-and-context-"
                      "window-size", "thinking.budget_tokens", "invalid_value")
    return ReasoningAsk(effort="high", budget=budget, param="thinking")


def _block_text(block: Any, param: str) -> tuple[str, bool]:
    """A content block's text as the prompt counts it, and whether it carries ``cache_control``."""
    if not isinstance(block, dict) or not isinstance(block.get("type"), str):
        raise invalid(f"{param}: expected an object with a 'type'.", param, "invalid_type")
    kind = block["type"]
    if kind == "text":
        if not isinstance(block.get("text"), str):
            raise invalid(f"{param}.text: Field required (a string).", f"{param}.text", "invalid_type")
        text = block["text"]
    elif kind == "tool_use":
        text = json.dumps({"name": block.get("name"), "input": block.get("input")})
    elif kind == "tool_result":
        content = block.get("content", "")
        text = content if isinstance(content, str) else _content_text(content, f"{param}.content")[0]
    elif kind == "thinking":  # a previous turn's thinking, sent back: checked, not counted (Anthropic drops it)
        thinking = block.get("thinking")
        if not isinstance(thinking, str) or block.get("signature") != thinking_signature(thinking):
            raise invalid(f"{param}: Invalid `signature` in `thinking` block", f"{param}.signature", "invalid_value")
        text = ""
    elif kind == "server_tool_use" or kind.endswith("_tool_result"):  # a server tool's call and result, sent back
        text = json.dumps({key: value for key, value in block.items() if key not in ("type", "cache_control")})
    elif kind == "redacted_thinking":
        if not isinstance(block.get("data"), str):
            raise invalid(f"{param}.data: Field required (a string).", f"{param}.data", "invalid_type")
        text = ""
    else:
        raise invalid(f"{param}.type: content blocks of type '{kind}' are not supported by pytest-llmsim; "
                      "text, tool_use and tool_result are simulated.", f"{param}.type", "unsupported_value")
    return text, block.get("cache_control") is not None


def _content_text(content: Any, param: str) -> tuple[str, bool]:
    if isinstance(content, str):
        return content, False
    if isinstance(content, list):
        parts = [_block_text(block, f"{param}.{i}") for i, block in enumerate(content)]
        return "".join(text for text, _ in parts), any(marked for _, marked in parts)
    raise invalid(f"{param}: Input should be a valid string or a list of content blocks, not "
                  f"{describe(content)}.", param, "invalid_type")


# Every field of anthropic's MessageCreateParams (tests/test_field_policy.py walks it).
MESSAGE_FIELDS = FieldPolicy.of(
    honoured=("model", "max_tokens", "messages", "system", "stop_sequences", "stream", "tools", "tool_choice",
              "output_config", "cache_control", "thinking", "context_management"),
    no_effect=("temperature", "top_p", "top_k", "metadata", "service_tier", "inference_geo", "speed",
               "user_profile_id", "workspace_id", "diagnostics"),
    refused={"container": "code execution containers are not simulated",
             "mcp_servers": "MCP servers are not simulated"})


def parse_messages(body: Any, *, require_max_tokens: bool = True) -> GenerationRequest:
    """Validate a ``POST /v1/messages`` body (``count_tokens`` bodies need no ``max_tokens``)."""
    body = expect_object(body)
    model = body.get("model")
    if not isinstance(model, str):
        raise invalid("model: Field required (a string)." if model is None else
                      f"model: Input should be a valid string, not {describe(model)}.", "model",
                      "missing_required_parameter" if model is None else "invalid_type")
    max_tokens = optional(body, "max_tokens", is_int, "an integer")
    if max_tokens is None and require_max_tokens:
        raise invalid("max_tokens: Field required.", "max_tokens", "missing_required_parameter")
    if max_tokens is not None and max_tokens < 1:
        raise invalid(f"max_tokens: Input should be greater than or equal to 1, not {max_tokens}.",
                      "max_tokens", "integer_below_min_value")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise invalid("messages: Field required (a non-empty list of messages).", "messages",
                      "missing_required_parameter" if messages is None else "invalid_value")
    parsed: list[ChatMessage] = []
    breakpoint_at: int | None = None
    system = body.get("system")
    if system is not None:
        text, marked = _content_text(system, "system")
        parsed.append(ChatMessage("system", text))
        breakpoint_at = 1 if marked else None
    for i, message in enumerate(messages):
        param = f"messages.{i}"
        if not isinstance(message, dict) or message.get("role") not in ("user", "assistant"):
            raise invalid(f"{param}.role: Input should be 'user' or 'assistant'.", f"{param}.role", "invalid_value")
        if "content" not in message:
            raise invalid(f"{param}.content: Field required.", f"{param}.content", "missing_required_parameter")
        text, marked = _content_text(message["content"], f"{param}.content")
        content = message["content"]
        results_only = (isinstance(content, list) and content
                        and all(isinstance(b, dict) and b.get("type") == "tool_result" for b in content))
        parsed.append(ChatMessage("tool" if results_only else message["role"], text))
        if marked:
            breakpoint_at = len(parsed)
    stops = optional(body, "stop_sequences", lambda v: isinstance(v, list) and all(isinstance(s, str) for s in v),
                     "a list of strings") or []
    if len(stops) > MAX_STOP_SEQUENCES:
        raise invalid(f"stop_sequences: at most {MAX_STOP_SEQUENCES} are accepted.", "stop_sequences",
                      "invalid_value")
    stream = bool(optional(body, "stream", lambda v: isinstance(v, bool), "a boolean"))
    ranged(body, "temperature", 0.0, 1.0)
    ranged(body, "top_p", 0.0, 1.0)
    top_k = optional(body, "top_k", is_int, "an integer")
    if top_k is not None and top_k < 0:
        raise invalid("top_k: Input should be greater than or equal to 0.", "top_k", "integer_below_min_value")
    tool_use = anthropic_tool_use(body, next((m.content for m in reversed(parsed) if m.role == "user"), ""))
    tools = body.get("tools")
    if body.get("cache_control") is not None:  # automatic caching: the whole prompt is the cached prefix
        breakpoint_at = len(parsed)
    return GenerationRequest(kind="chat", model=model, stream=stream, include_usage=True, max_tokens=max_tokens,
                             n=1, stops=list(stops), seed=None, messages=parsed,
                             tools_text=tools_text(tools), cache_breakpoint=breakpoint_at,
                             tool_use=tool_use, output_format=_output_format(body),
                             ignored_fields=MESSAGE_FIELDS.check(body), reasoning=_thinking(body, max_tokens),
                             context_edits=context_edits(body, 1 if system is not None else 0))


def _output_format(body: dict[str, Any]) -> OutputFormat | None:
    """``output_config.format``: ``{"type": "json_schema", "schema": {...}}`` (structured output); ``effort``
    is accepted with no effect. The beta's top-level ``output_format`` is read the same way."""
    config = optional(body, "output_config", lambda v: isinstance(v, dict), "an object") or {}
    unknown = sorted(set(config) - {"format", "effort"})
    if unknown:
        raise invalid(f"output_config.{unknown[0]}: Extra inputs are not permitted", f"output_config.{unknown[0]}",
                      "unknown_parameter")
    fmt = config.get("format") if config.get("format") is not None else body.get("output_format")
    if fmt is None:
        return None
    if not isinstance(fmt, dict) or fmt.get("type") != "json_schema" or not isinstance(fmt.get("schema"), dict):
        raise invalid("output_config.format: expected {\"type\": \"json_schema\", \"schema\": {...}}",
                      "output_config.format", "invalid_value")
    return anthropic_output_format(fmt, "output_config.format")
