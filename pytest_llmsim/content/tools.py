"""Tools and structured output, protocol-blind: what a request offers, and which calls a reply makes.

Each wire API parses its own shapes (OpenAI's ``tools``/``tool_choice``,
Anthropic's ``tool_choice: {"type": "any"}``, the Responses API's flat
function tools) into :class:`ToolUse` and :class:`OutputFormat`; the rules
that decide a reply live here once:

- ``tool_choice`` ``none`` never calls; ``required`` (Anthropic ``any``)
  always calls; a named function (Anthropic ``tool``) calls that one; an
  explicit choice always wins.
- ``auto`` calls with the seeded probability ``tool_call_rate`` (default
  1.0), except when the conversation's last message is a tool result: then
  the reply is text, so an agent loop always ends.
- A reply makes ``tool_calls_per_reply`` calls (default 1), or one when the
  request turns parallel calls off; different tools are preferred.
"""

from __future__ import annotations

import random
from typing import Any

from ..sim import fast_json
from ..sim.bounded_cache import BoundedCache
from ..sim.request import OutputFormat, ToolSpec, ToolUse
from .schema import SchemaError, check_schema

__all__ = ["NO_ARGUMENTS", "OutputFormat", "ToolSpec", "ToolUse", "check_schemas", "choose_tools", "schema_or_error"]

NO_ARGUMENTS: dict[str, Any] = {"type": "object", "properties": {}, "additionalProperties": False}


def check_schemas(use: ToolUse | None, output_format: OutputFormat | None) -> tuple[str, str] | None:
    """The first schema of a request that is not a valid JSON Schema, as ``(message, param)``; None if all are.

    Run after the request's cheap limits: 60,000 distinct tool schemas cost ~40 s to check, and
    a request that long is refused by its context length first. The verdict is kept per set of schemas
    (an agent sends the same tools with every request: 20 tools' checks, each keyed by its own text, were
    about a tenth of such a request), under their JSON text with sorted keys (:func:`fast_json.canonical`: one
    C call where orjson writes it exactly), and by the tools' own tuple where a parser keeps its tools' objects
    per list (:mod:`pytest_llmsim.api.tool_fields`): the same tuple, the same schemas, no text to write.
    """
    # tools alone (no response format beside them): their tuple, which a parser may hand again
    tools = use.tools if use is not None and (output_format is None or output_format.schema is None) else None
    if tools is not None:
        seen = _BY_TOOLS.get(id(tools))
        if seen is not None and seen[0] is tools:  # held by the entry: no other tuple has its address
            return seen[1]
    schemas = [[tool.parameters, tool.param] for tool in use.tools] if use is not None else []
    if output_format is not None and output_format.schema is not None:
        schemas.append([output_format.schema, output_format.param])
    if not schemas:
        return None
    key = fast_json.canonical(schemas)
    known = _VERDICTS.get(key)
    if known is not None:
        verdict = known[0]
    else:
        verdict = _first_problem(schemas)
        _VERDICTS.keep(key, (verdict,))
    if tools is not None:
        _BY_TOOLS.keep(id(tools), (tools, verdict))
    return verdict


#: Sets of schemas whose verdict is kept (the oldest goes first).
MAX_KEPT_VERDICTS = 128
# (verdict,): None is one
_VERDICTS: BoundedCache[bytes, tuple[tuple[str, str] | None]] = BoundedCache(MAX_KEPT_VERDICTS)
# The same verdicts by a tools tuple's address (the tuple held with it); tools made anew for every request (a
# list with a server tool, Gemini's allowed names, tools beside a response format) are found by their text.
_BY_TOOLS: BoundedCache[int, tuple[tuple[ToolSpec, ...], tuple[str, str] | None]] = BoundedCache(MAX_KEPT_VERDICTS)


def _first_problem(schemas: list[list[Any]]) -> tuple[str, str] | None:
    for schema, param in schemas:
        try:
            schema_or_error(schema, param)
        except SchemaError as error:
            return str(error), param
    return None


def schema_or_error(schema: Any, param: str) -> dict[str, Any]:
    """``schema`` checked as a JSON Schema object; raises :class:`SchemaError` with ``param`` in the message."""
    if not isinstance(schema, dict):
        raise SchemaError(f"Invalid '{param}': expected a JSON Schema object.")
    try:
        check_schema(schema)
    except SchemaError as error:
        raise SchemaError(f"Invalid schema for '{param}': {error}") from None
    return schema


def choose_tools(use: ToolUse | None, after_tool_result: bool, rng: random.Random, call_rate: float,
                 calls_per_reply: int) -> list[ToolSpec]:
    """The tools a reply calls, in order (empty: the reply is text)."""
    if use is None or not use.tools or use.choice == "none":
        return []
    count = calls_per_reply if use.parallel else 1
    if use.choice == "function":
        tool = use.named(use.function or "")
        return [tool] * count if tool is not None else []
    if use.choice == "auto" and (after_tool_result or rng.random() >= call_rate):
        return []
    order = list(use.tools)
    rng.shuffle(order)
    return [order[i % len(order)] for i in range(count)]
