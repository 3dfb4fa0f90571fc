"""Anthropic's context editing (``context_management``, beta ``context-management-2025-06-27``).

``clear_tool_uses_20250919`` clears the oldest tool results (and, with
``clear_tool_inputs``, the calls' inputs) when the prompt passes its
``trigger`` (default 100,000 input tokens), keeping the newest ``keep`` tool
uses (default 3) and those of ``exclude_tools``, and only if it frees
``clear_at_least`` tokens. ``clear_thinking_20251015`` clears the thinking of
all but the last ``keep`` assistant turns that have some (default 1; ``"all"``
keeps every one). The edits are applied to the prompt the backend counts
(:mod:`..sim.context_edits`); a cleared result reads as ``PLACEHOLDER``.
Thinking sent back is not counted by this backend (Anthropic drops it), so
clearing it frees no counted tokens. ``compact_20260112`` (compaction) is
refused with a 400 naming it.
"""

from __future__ import annotations

import json
from typing import Any

from ..sim import invalid
from ..sim.context_edits import AppliedEdit, ClearablePart, ContextEdit
from ..sim.request import GenerationRequest
from .validation import describe, is_int

__all__ = ["PLACEHOLDER", "applied_edits_body", "context_edits", "original_tokens_body"]

PLACEHOLDER = "[tool result cleared to save context]"
TOOL_USES = "clear_tool_uses_20250919"
THINKING = "clear_thinking_20251015"
_TOOL_USES_FIELDS = ("type", "trigger", "keep", "clear_at_least", "exclude_tools", "clear_tool_inputs")
_COUNTS = {TOOL_USES: "cleared_tool_uses", THINKING: "cleared_thinking_turns"}


def context_edits(body: dict[str, Any], offset: int) -> tuple[ContextEdit, ...]:
    """The edits of ``body["context_management"]`` over its ``messages`` (the parsed prompt's messages start
    ``offset`` later: the system prompt's); a 400 naming the field for anything else."""
    config = body.get("context_management")
    if config is None:
        return ()
    if not isinstance(config, dict) or set(config) - {"edits"} or not isinstance(config.get("edits", []), list):
        raise invalid("context_management: expected an object with a list of 'edits'.", "context_management",
                      "invalid_type")
    edits = []
    for i, edit in enumerate(config.get("edits", [])):
        param = f"context_management.edits.{i}"
        kind = edit.get("type") if isinstance(edit, dict) else None
        if kind == TOOL_USES:
            edits.append(_tool_uses(edit, body["messages"], offset, param))
        elif kind == THINKING:
            edits.append(_thinking(edit, body["messages"], param))
        elif kind == "compact_20260112":
            raise invalid(f"{param}.type: 'compact_20260112' (compaction) is not simulated by pytest-llmsim; "
                          f"'{TOOL_USES}' and '{THINKING}' are.", f"{param}.type", "unsupported_value")
        else:
            raise invalid(f"{param}.type: Input should be '{TOOL_USES}' or '{THINKING}', not {describe(kind)}.",
                          f"{param}.type", "invalid_value")
    return tuple(edits)


def _threshold(edit: dict[str, Any], name: str, kinds: tuple[str, ...], param: str) -> tuple[str, int] | None:
    value = edit.get(name)
    if value is None:
        return None
    if not isinstance(value, dict) or value.get("type") not in kinds or not is_int(value.get("value")) \
            or value["value"] < 0 or set(value) - {"type", "value"}:
        raise invalid(f"{param}.{name}: expected {{\"type\": {' or '.join(repr(k) for k in kinds)}, \"value\": "
                      f"an integer >= 0}}.", f"{param}.{name}", "invalid_value")
    return value["type"], int(value["value"])


def _names(value: Any, param: str) -> frozenset[str]:
    if value is None:
        return frozenset()
    if not isinstance(value, list) or not all(isinstance(name, str) for name in value):
        raise invalid(f"{param}: expected a list of tool names.", param, "invalid_type")
    return frozenset(value)


def _tool_uses(edit: dict[str, Any], messages: list[Any], offset: int, param: str) -> ContextEdit:
    unknown = sorted(set(edit) - set(_TOOL_USES_FIELDS))
    if unknown:
        raise invalid(f"{param}.{unknown[0]}: Extra inputs are not permitted", f"{param}.{unknown[0]}",
                      "unknown_parameter")
    trigger = _threshold(edit, "trigger", ("input_tokens", "tool_uses"), param) or ("input_tokens", 100_000)
    keep = _threshold(edit, "keep", ("tool_uses",), param) or ("tool_uses", 3)
    at_least = _threshold(edit, "clear_at_least", ("input_tokens",), param)
    excluded = _names(edit.get("exclude_tools"), f"{param}.exclude_tools")
    inputs = edit.get("clear_tool_inputs", False)
    if not isinstance(inputs, bool):
        inputs = _names(inputs, f"{param}.clear_tool_inputs")
    uses: dict[str, tuple[int, dict[str, Any]]] = {}  # tool_use id -> (parsed message index, block)
    results: dict[str, tuple[int, str]] = {}  # tool_use id -> (parsed message index, the result's text)
    for index, message in enumerate(messages):
        content = message.get("content") if isinstance(message, dict) else None
        for block in content if isinstance(content, list) else ():
            if isinstance(block, dict) and block.get("type") == "tool_use" and isinstance(block.get("id"), str):
                uses[block["id"]] = (index + offset, block)
            elif isinstance(block, dict) and block.get("type") == "tool_result":
                results[str(block.get("tool_use_id"))] = (index + offset, _result_text(block))
    parts = []
    for use_id, (index, block) in uses.items():
        name = block.get("name")
        if name in excluded:
            continue
        replacements = []
        if use_id in results:
            replacements.append((*results[use_id], PLACEHOLDER))
        if inputs is True or (not isinstance(inputs, bool) and name in inputs):
            replacements.append((index, json.dumps({"name": name, "input": block.get("input")}),
                                 json.dumps({"name": name, "input": {}})))
        parts.append(ClearablePart(tuple(replacements)))
    return ContextEdit(TOOL_USES, tuple(parts), keep=keep[1],
                       trigger_tokens=trigger[1] if trigger[0] == "input_tokens" else None,
                       trigger_parts=trigger[1] if trigger[0] == "tool_uses" else None,
                       clear_at_least=at_least[1] if at_least else 0)


def _result_text(block: dict[str, Any]) -> str:
    """A tool result's text as the prompt counts it (a string, or its text blocks joined)."""
    content = block.get("content", "")
    if isinstance(content, str):
        return content
    texts = [part.get("text") for part in content if isinstance(part, dict)] if isinstance(content, list) else []
    return "".join(text for text in texts if isinstance(text, str))


def _thinking(edit: dict[str, Any], messages: list[Any], param: str) -> ContextEdit:
    unknown = sorted(set(edit) - {"type", "keep"})
    if unknown:
        raise invalid(f"{param}.{unknown[0]}: Extra inputs are not permitted", f"{param}.{unknown[0]}",
                      "unknown_parameter")
    keep = edit.get("keep", {"type": "thinking_turns", "value": 1})
    turns = [message for message in messages if isinstance(message, dict) and message.get("role") == "assistant"
             and isinstance(message.get("content"), list)
             and any(isinstance(b, dict) and b.get("type") in ("thinking", "redacted_thinking")
                     for b in message["content"])]
    if keep == "all":
        return ContextEdit(THINKING, (), keep=0)
    kept = _threshold({"keep": keep}, "keep", ("thinking_turns",), param)
    assert kept is not None
    # sent back, thinking is not counted here: clearing a turn's thinking takes no counted text out
    return ContextEdit(THINKING, tuple(ClearablePart() for _ in turns), keep=kept[1], trigger_parts=kept[1])


def applied_edits_body(request: GenerationRequest) -> dict[str, Any] | None:
    """A message's ``context_management`` (None when the request asked for no edit)."""
    if not request.context_edits:
        return None
    return {"applied_edits": [_applied(edit) for edit in request.applied_edits]}


def _applied(edit: AppliedEdit) -> dict[str, Any]:
    return {"type": edit.name, _COUNTS[edit.name]: edit.parts, "cleared_input_tokens": edit.tokens}


def original_tokens_body(request: GenerationRequest) -> dict[str, Any] | None:
    """A token count's ``context_management`` (None when the request asked for no edit)."""
    if not request.context_edits or request.unedited_prompt_tokens is None:
        return None
    return {"original_input_tokens": request.unedited_prompt_tokens}
