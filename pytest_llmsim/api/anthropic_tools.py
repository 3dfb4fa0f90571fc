"""Anthropic-defined client tools (memory, text editor, bash, computer): their names and input schemas.

The client runs these tools (the SDK's tool helpers, an agent's own code);
the model only calls them, with inputs in the shape Anthropic documents for
each version. A request names one by ``type`` (``memory_20250818``) and
``name`` (``memory``), without an ``input_schema``; the simulated model calls
it with an input valid for that documented shape, chosen among its commands.
"""

from __future__ import annotations

from typing import Any

from ..sim import invalid
from ..sim.request import ToolSpec

__all__ = ["CLIENT_TOOL_TYPES", "anthropic_defined_tool"]


def _command(name: str, **properties: Any) -> dict[str, Any]:
    return {"type": "object", "properties": {"command": {"const": name}, **properties},
            "required": ["command", *properties], "additionalProperties": False}


_TEXT = {"type": "string", "minLength": 1, "maxLength": 60}
_MEMORY_FILE = {"enum": ["/memories/notes.md", "/memories/progress.md", "/memories/preferences.md"]}
_PROJECT_FILE = {"enum": ["/repo/README.md", "/repo/src/main.py", "/repo/tests/test_main.py"]}

MEMORY = {"oneOf": [
    _command("view", path={"enum": ["/memories", "/memories/notes.md"]}),
    _command("create", path=_MEMORY_FILE, file_text=_TEXT),
    _command("str_replace", path=_MEMORY_FILE, old_str=_TEXT, new_str=_TEXT),
    _command("insert", path=_MEMORY_FILE, insert_line={"type": "integer", "minimum": 0, "maximum": 20},
             insert_text=_TEXT),
    _command("delete", path=_MEMORY_FILE),
    _command("rename", old_path=_MEMORY_FILE, new_path=_MEMORY_FILE),
]}


def _editor(insert_field: str) -> dict[str, Any]:
    return {"oneOf": [
        _command("view", path=_PROJECT_FILE),
        _command("create", path=_PROJECT_FILE, file_text=_TEXT),
        _command("str_replace", path=_PROJECT_FILE, old_str=_TEXT, new_str=_TEXT),
        _command("insert", path=_PROJECT_FILE, insert_line={"type": "integer", "minimum": 0, "maximum": 20},
                 **{insert_field: _TEXT}),
    ]}


BASH = {"oneOf": [
    {"type": "object", "properties": {"command": {"enum": ["ls -la", "pwd", "cat README.md", "python --version"]}},
     "required": ["command"], "additionalProperties": False},
    {"type": "object", "properties": {"restart": {"const": True}}, "required": ["restart"],
     "additionalProperties": False},
]}


def _computer(width: int, height: int) -> dict[str, Any]:
    # [x, y] on the display (both within the smaller side, so either order stays on it)
    point = {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": min(width, height) - 1},
             "minItems": 2, "maxItems": 2}

    def action(name: str, **properties: Any) -> dict[str, Any]:
        return {"type": "object", "properties": {"action": {"const": name}, **properties},
                "required": ["action", *properties], "additionalProperties": False}

    return {"oneOf": [action("screenshot"), action("left_click", coordinate=point),
                      action("mouse_move", coordinate=point), action("type", text=_TEXT),
                      action("key", text={"enum": ["Return", "ctrl+s", "Escape"]})]}


# type prefix -> (the name the tool must have, its input schema; computer's depends on its display)
CLIENT_TOOL_TYPES: dict[str, tuple[str, Any]] = {
    "memory_": ("memory", MEMORY),
    "text_editor_20250124": ("str_replace_editor", _editor("new_str")),
    "text_editor_20241022": ("str_replace_editor", _editor("new_str")),
    "text_editor_": ("str_replace_based_edit_tool", _editor("insert_text")),
    "bash_": ("bash", BASH),
    "computer_": ("computer", None),
}


def anthropic_defined_tool(tool: dict[str, Any], param: str) -> ToolSpec | None:
    """The tool spec of an Anthropic-defined client tool (None: ``tool`` is not one)."""
    kind = tool.get("type")
    if not isinstance(kind, str):
        return None
    for prefix, (name, schema) in CLIENT_TOOL_TYPES.items():
        if kind.startswith(prefix):
            if tool.get("name") != name:
                raise invalid(f"{param}.name: the {kind} tool must be named {name!r}.", f"{param}.name",
                              "invalid_value")
            if schema is None:  # the computer tool's coordinates stay on its display
                width, height = tool.get("display_width_px"), tool.get("display_height_px")
                if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in (width, height)):
                    raise invalid(f"{param}: display_width_px and display_height_px are required (positive "
                                  "integers).", f"{param}.display_width_px", "missing_required_parameter")
                assert isinstance(width, int) and isinstance(height, int)
                schema = _computer(width, height)
            return ToolSpec(name, schema, f"{param}.type")
    return None
