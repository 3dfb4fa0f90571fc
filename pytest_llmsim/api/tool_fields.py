"""Reading the tool and structured-output fields of OpenAI's APIs and Anthropic's.

Chat nests a function (``{"type": "function", "function": {"name",
"parameters"}}``, ``tool_choice: {"type": "function", "function": {"name"}}``);
the Responses API is flat (``{"type": "function", "name", "parameters"}``,
``tool_choice: {"type": "function", "name"}``, ``text.format``); Anthropic
has ``input_schema`` and ``tool_choice: {"type": "auto"|"any"|"tool"|"none"}``.
All of them end up as :class:`~pytest_llmsim.content.tools.ToolUse` and
:class:`~pytest_llmsim.content.tools.OutputFormat`. Schemas are checked
against their draft's metaschema: a malformed one answers 400 naming it.
"""

from __future__ import annotations

import re
from typing import Any

from ..content.tools import NO_ARGUMENTS, OutputFormat, ToolSpec, ToolUse
from ..sim import invalid
from .anthropic_server_tools import anthropic_server_tool
from .anthropic_tools import anthropic_defined_tool
from .tools_text import kept_specs
from .validation import describe

__all__ = ["anthropic_output_format", "anthropic_tool_use", "openai_output_format", "openai_tool_use",
           "responses_output_format"]

FUNCTION_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}\Z")
MAX_OPENAI_TOOLS = 128  # "A max of 128 functions are supported" (OpenAI's API reference)


def _schema(value: Any, param: str) -> dict[str, Any]:
    """``value`` if it is a schema object; its metaschema check comes later (``check_schemas``)."""
    if value is None:
        return NO_ARGUMENTS
    if not isinstance(value, dict):
        raise invalid(f"Invalid '{param}': expected a JSON Schema object.", param, "invalid_schema")
    return value


def _name(value: Any, param: str) -> str:
    if not isinstance(value, str) or not FUNCTION_NAME.match(value):
        raise invalid(f"Invalid '{param}': {describe(value)} is not a function name (1 to 64 letters, digits, "
                      "underscores or dashes).", param, "invalid_value")
    return value


def openai_tool_use(body: dict[str, Any], flat: bool) -> ToolUse | None:
    """``tools``, ``tool_choice`` and ``parallel_tool_calls`` of a chat (``flat=False``) or Responses body."""
    tools = body.get("tools")
    choice = body.get("tool_choice")
    if tools is None or tools == []:
        if choice not in (None, "none", "auto"):
            raise invalid("Invalid value for 'tool_choice': 'tool_choice' is only allowed when 'tools' are "
                          "specified.", "tool_choice", "invalid_value")
        return None
    if not isinstance(tools, list):
        raise invalid(f"Invalid type for 'tools': expected an array, but got {describe(tools)}.", "tools",
                      "invalid_type")
    if len(tools) > MAX_OPENAI_TOOLS:
        raise invalid(f"Invalid 'tools': array too long. Expected an array with maximum length {MAX_OPENAI_TOOLS}, "
                      f"but got an array with length {len(tools)} instead.", "tools", "array_above_max_length")
    specs = kept_specs("flat" if flat else "nested", tools, lambda: _function_specs(tools, flat))
    parallel = body.get("parallel_tool_calls")
    if parallel is not None and not isinstance(parallel, bool):
        raise invalid(f"Invalid type for 'parallel_tool_calls': expected a boolean, but got {describe(parallel)}.",
                      "parallel_tool_calls", "invalid_type")
    use = ToolUse(specs, parallel=parallel is not False)
    if choice is None or choice in ("auto", "none", "required"):
        return ToolUse(use.tools, choice or "auto", None, use.parallel)
    if isinstance(choice, dict) and choice.get("type") == "function":
        function = choice if flat else choice.get("function")
        name = function.get("name") if isinstance(function, dict) else None
        if use.named(name) is None:
            raise invalid(f"Invalid value for 'tool_choice': function {describe(name)} is not among the tools.",
                          "tool_choice", "invalid_value")
        return ToolUse(use.tools, "function", name, use.parallel)
    raise invalid("Invalid value for 'tool_choice': expected 'none', 'auto', 'required' or "
                  "{'type': 'function', ...}.", "tool_choice", "invalid_value")


def _function_specs(tools: list[Any], flat: bool) -> tuple[ToolSpec, ...]:
    """The function tools of a chat (``flat=False``) or Responses list, checked."""
    specs = []
    for i, tool in enumerate(tools):
        param = f"tools[{i}]"
        if not isinstance(tool, dict) or tool.get("type", "function") != "function":
            raise invalid(f"Invalid '{param}': only function tools ({{'type': 'function', ...}}) are simulated.",
                          f"{param}.type", "unsupported_value")
        function = tool if flat else tool.get("function")
        if not isinstance(function, dict):
            raise invalid(f"Invalid '{param}': expected {{'type': 'function', 'function': {{'name': ...}}}}.",
                          f"{param}.function", "invalid_value")
        where = param if flat else f"{param}.function"
        specs.append(ToolSpec(_name(function.get("name"), f"{where}.name"),
                              _schema(function.get("parameters"), f"{where}.parameters"), f"{where}.parameters"))
    return tuple(specs)


def _anthropic_specs(tools: list[Any], prompt: str) -> tuple[ToolSpec, ...]:
    """Anthropic's tools (client, Anthropic-defined and server tools; a server tool's call reads ``prompt``),
    checked."""
    specs: list[ToolSpec] = []
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict):
            raise invalid(f"tools.{i}: Input should be an object.", f"tools.{i}", "invalid_type")
        defined = anthropic_defined_tool(tool, f"tools.{i}") or anthropic_server_tool(tool, f"tools.{i}", prompt)
        if defined is not None:
            specs.append(defined)
            continue
        if tool.get("type") not in (None, "custom"):
            raise invalid(f"tools.{i}.type: tools of type {tool.get('type')!r} are not simulated; client tools "
                          "with 'name' and 'input_schema', the Anthropic-defined tools (memory, text editor, bash, "
                          "computer) and the server tools (web search, web fetch, code execution) are.",
                          f"tools.{i}.type", "unsupported_value")
        if "input_schema" not in tool:
            raise invalid(f"tools.{i}.input_schema: Field required.", f"tools.{i}.input_schema",
                          "missing_required_parameter")
        specs.append(ToolSpec(_name(tool.get("name"), f"tools.{i}.name"),
                              _schema(tool["input_schema"], f"tools.{i}.input_schema"), f"tools.{i}.input_schema"))
    return tuple(specs)


def _json_schema_format(schema: Any, name: Any, param: str) -> OutputFormat:
    if not isinstance(name, str) or not FUNCTION_NAME.match(name):
        raise invalid(f"Invalid '{param}.name': expected a name of 1 to 64 letters, digits, underscores or "
                      "dashes.", f"{param}.name", "invalid_value")
    if schema is None:
        raise invalid(f"Missing required parameter: '{param}.schema'.", f"{param}.schema",
                      "missing_required_parameter")
    return OutputFormat("json_schema", _schema(schema, f"{param}.schema"), name, f"{param}.schema")


def anthropic_output_format(fmt: dict[str, Any], param: str) -> OutputFormat:
    """Anthropic's ``output_config.format`` (``{"type": "json_schema", "schema": {...}}``; no name)."""
    return OutputFormat("json_schema", _schema(fmt.get("schema"), f"{param}.schema"), "output", f"{param}.schema")


def openai_output_format(body: dict[str, Any]) -> OutputFormat | None:
    """Chat's ``response_format``: ``text``, ``json_object`` or ``json_schema`` (``{"name", "schema"}``)."""
    value = body.get("response_format")
    if value is None:
        return None
    kind = value.get("type") if isinstance(value, dict) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return OutputFormat("json_object")
    if kind == "json_schema":
        spec = value.get("json_schema")
        if not isinstance(spec, dict):
            raise invalid("Missing required parameter: 'response_format.json_schema'.",
                          "response_format.json_schema", "missing_required_parameter")
        return _json_schema_format(spec.get("schema"), spec.get("name"), "response_format.json_schema")
    raise invalid("Invalid 'response_format': expected a type among text, json_object, json_schema.",
                  "response_format", "invalid_value")


def responses_output_format(text_format: dict[str, Any]) -> OutputFormat | None:
    """The Responses API's flat ``text.format``."""
    kind = text_format.get("type")
    if kind == "json_object":
        return OutputFormat("json_object")
    if kind == "json_schema":
        return _json_schema_format(text_format.get("schema"), text_format.get("name"), "text.format")
    return None


def anthropic_tool_use(body: dict[str, Any], prompt: str = "") -> ToolUse | None:
    """Anthropic's ``tools`` (``name``, ``input_schema``; the Anthropic-defined client and server tools) and
    ``tool_choice``; ``prompt`` (the user's last text) is what a server tool's call reads from."""
    tools = body.get("tools")
    choice = body.get("tool_choice")
    if choice is not None and not (isinstance(choice, dict) and choice.get("type") in ("auto", "any", "tool",
                                                                                        "none")):
        raise invalid("tool_choice: expected {'type': 'auto' | 'any' | 'tool' | 'none'}.", "tool_choice",
                      "invalid_value")
    if not tools:
        if choice is not None and choice["type"] in ("any", "tool"):
            raise invalid("tool_choice: a tool must be chosen among 'tools', and none are given.",
                          "tool_choice", "invalid_value")
        return None
    if not isinstance(tools, list):
        raise invalid(f"tools: Input should be a valid list, not {describe(tools)}.", "tools", "invalid_type")
    specs = kept_specs("anthropic", tools, lambda: _anthropic_specs(tools, prompt))
    kind = "auto" if choice is None else choice["type"]
    parallel = not (isinstance(choice, dict) and choice.get("disable_parallel_tool_use") is True)
    use = ToolUse(specs, parallel=parallel)
    if kind == "tool":
        name = choice.get("name") if isinstance(choice, dict) else None
        if use.named(name) is None:
            raise invalid(f"tool_choice.name: {describe(name)} is not among the tools.", "tool_choice.name",
                          "invalid_value")
        return ToolUse(use.tools, "function", name, parallel)
    return ToolUse(use.tools, {"any": "required"}.get(kind, kind), None, parallel)
