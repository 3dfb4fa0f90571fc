"""Reading a Bedrock Converse request: messages and their content blocks, system, inference and tool
configuration, structured output. A field Bedrock has but this backend does not simulate is refused
with a 400 naming it; an unknown one as Bedrock refuses it (``extraneous key [x] is not permitted``)."""

from __future__ import annotations

import json
from typing import Any

from ..sim import ChatMessage, GenerationRequest, invalid
from ..sim.request import OutputFormat, ToolSpec, ToolUse
from .tools_text import kept_specs, tools_text
from .validation import describe, expect_object, is_int, is_number

__all__ = ["parse_converse"]

CONVERSE_FIELDS = ("messages", "system", "inferenceConfig", "toolConfig", "guardrailConfig",
                   "additionalModelRequestFields", "promptVariables", "additionalModelResponseFieldPaths",
                   "requestMetadata", "performanceConfig", "serviceTier", "outputConfig", "projectIdentifier")
REFUSED_FIELDS = ("guardrailConfig", "promptVariables", "additionalModelResponseFieldPaths")
REFUSED_BLOCKS = ("image", "document", "video", "audio", "guardContent", "reasoningContent", "citationsContent",
                  "searchResult")
MAX_STOP_SEQUENCES = 4


def _refuse_unknown(body: dict[str, Any], known: tuple[str, ...], where: str) -> None:
    for key in body:
        if key not in known:
            raise invalid(f"Malformed input request: extraneous key [{key}] is not permitted{where}.",
                          f"{where.removeprefix(' in ')}.{key}".lstrip("."), "unknown_field")


def _block_text(block: Any, param: str) -> tuple[str, str]:
    """A content block's text as the prompt counts it, and its kind (``text``, ``call``, ``result``, ``cache``)."""
    if not isinstance(block, dict) or len(block) != 1:
        raise invalid(f"{param}: a content block has exactly one member (text, toolUse, toolResult, cachePoint).",
                      param, "invalid_value")
    kind, value = next(iter(block.items()))
    if kind == "text" and isinstance(value, str):
        return value, "text"
    if kind == "toolUse" and isinstance(value, dict):
        return json.dumps({"name": value.get("name"), "input": value.get("input")}), "call"
    if kind == "toolResult" and isinstance(value, dict):
        parts = value.get("content") or []
        if not isinstance(parts, list):
            raise invalid(f"{param}.toolResult.content: expected a list of content blocks, got {describe(parts)}.",
                          f"{param}.toolResult.content", "invalid_type")
        texts = [str(part["text"]) if isinstance(part.get("text"), str) else json.dumps(part.get("json"))
                 for part in parts if isinstance(part, dict)]
        return "".join(texts), "result"
    if kind == "cachePoint":
        return "", "cache"
    if kind in REFUSED_BLOCKS:
        raise invalid(f"{param}.{kind}: {kind} blocks are not simulated by pytest-llmsim; text, toolUse, "
                      "toolResult and cachePoint are.", f"{param}.{kind}", "unsupported_value")
    raise invalid(f"{param}: {describe(value)} is not a valid {kind} block.", f"{param}.{kind}", "invalid_value")


def _messages(body: dict[str, Any]) -> tuple[list[ChatMessage], int | None]:
    """``system`` and ``messages`` as chat messages, and how many lead up to the last ``cachePoint``."""
    parsed: list[ChatMessage] = []
    breakpoint_at: int | None = None
    system = body.get("system")
    if system is not None:
        if not isinstance(system, list):
            raise invalid("system: expected a list of system content blocks.", "system", "invalid_type")
        texts = [_block_text(block, f"system.{i}") for i, block in enumerate(system)]
        parsed.append(ChatMessage("system", "".join(text for text, _ in texts)))
        breakpoint_at = 1 if any(kind == "cache" for _, kind in texts) else None
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise invalid("messages: a non-empty list of messages is required.", "messages",
                      "missing_required_parameter" if messages is None else "invalid_value")
    for i, item in enumerate(messages):
        param = f"messages.{i}"
        if not isinstance(item, dict) or item.get("role") not in ("user", "assistant"):
            raise invalid(f"{param}.role: expected 'user' or 'assistant'.", f"{param}.role", "invalid_value")
        content = item.get("content")
        if not isinstance(content, list) or not content:
            raise invalid(f"{param}.content: a non-empty list of content blocks is required.", f"{param}.content",
                          "invalid_value")
        blocks = [_block_text(block, f"{param}.content.{j}") for j, block in enumerate(content)]
        kinds = {kind for _, kind in blocks} - {"cache"}
        parsed.append(ChatMessage("tool" if kinds == {"result"} else item["role"],
                                  "".join(text for text, _ in blocks)))
        if any(kind == "cache" for _, kind in blocks):
            breakpoint_at = len(parsed)
    return parsed, breakpoint_at


def _inference(body: dict[str, Any]) -> tuple[int | None, list[str]]:
    config = body.get("inferenceConfig") or {}
    if not isinstance(config, dict):
        raise invalid("inferenceConfig: expected an object.", "inferenceConfig", "invalid_type")
    _refuse_unknown(config, ("maxTokens", "temperature", "topP", "stopSequences"), " in inferenceConfig")
    max_tokens = config.get("maxTokens")
    if max_tokens is not None and (not is_int(max_tokens) or max_tokens < 1):
        raise invalid(f"inferenceConfig.maxTokens: expected an integer >= 1, got {describe(max_tokens)}.",
                      "inferenceConfig.maxTokens", "invalid_value")
    for key in ("temperature", "topP"):
        value = config.get(key)
        if value is not None and (not is_number(value) or not 0 <= value <= 1):
            raise invalid(f"inferenceConfig.{key}: expected a number from 0 to 1.", f"inferenceConfig.{key}",
                          "invalid_value")
    stops = config.get("stopSequences") or []
    if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops) or len(stops) > MAX_STOP_SEQUENCES:
        raise invalid(f"inferenceConfig.stopSequences: at most {MAX_STOP_SEQUENCES} strings.",
                      "inferenceConfig.stopSequences", "invalid_value")
    return max_tokens, list(stops)


def _tool_use(body: dict[str, Any]) -> ToolUse | None:
    config = body.get("toolConfig")
    if config is None:
        return None
    if not isinstance(config, dict) or not isinstance(config.get("tools"), list) or not config["tools"]:
        raise invalid("toolConfig.tools: a non-empty list of tools is required.", "toolConfig.tools", "invalid_value")
    tools = config["tools"]
    use = ToolUse(kept_specs("bedrock", tools, lambda: _tool_specs(tools)), "auto", None, True)
    choice = config.get("toolChoice")
    if choice is None or choice == {"auto": {}}:
        return use
    if choice == {"any": {}}:
        return ToolUse(use.tools, "required", None, True)
    name = choice.get("tool", {}).get("name") if isinstance(choice, dict) and isinstance(choice.get("tool"),
                                                                                        dict) else None
    if use.named(name) is None:
        raise invalid("toolConfig.toolChoice: expected {auto: {}}, {any: {}} or {tool: {name}} naming a tool.",
                      "toolConfig.toolChoice", "invalid_value")
    return ToolUse(use.tools, "function", name, True)


def _tool_specs(tools: list[Any]) -> tuple[ToolSpec, ...]:
    """``toolConfig.tools``' tool specs, checked (its cache points left out)."""
    specs = []
    for i, tool in enumerate(tools):
        if isinstance(tool, dict) and "cachePoint" in tool:
            continue
        spec = tool.get("toolSpec") if isinstance(tool, dict) else None
        input_schema = spec.get("inputSchema") if isinstance(spec, dict) else None
        schema = input_schema.get("json") if isinstance(input_schema, dict) else None
        if not isinstance(spec, dict) or not isinstance(spec.get("name"), str) or not isinstance(schema, dict):
            raise invalid(f"toolConfig.tools.{i}.toolSpec: a name and inputSchema.json are required.",
                          f"toolConfig.tools.{i}.toolSpec", "invalid_value")
        specs.append(ToolSpec(spec["name"], schema, f"toolConfig.tools.{i}.toolSpec.inputSchema.json"))
    return tuple(specs)


def _output_format(body: dict[str, Any]) -> OutputFormat | None:
    config = body.get("outputConfig")
    if config is None:
        return None
    text_format = config.get("textFormat") if isinstance(config, dict) else None
    structure = text_format.get("structure") if isinstance(text_format, dict) else None
    schema_text = structure.get("jsonSchema", {}).get("schema") if isinstance(structure, dict) else None
    if not isinstance(text_format, dict) or text_format.get("type") != "json_schema" or not isinstance(schema_text,
                                                                                                      str):
        raise invalid("outputConfig.textFormat: expected {type: 'json_schema', structure: {jsonSchema: {schema: "
                      "'<a JSON Schema as a string>'}}}.", "outputConfig.textFormat", "invalid_value")
    try:
        schema = json.loads(schema_text)
    except ValueError:
        raise invalid("outputConfig.textFormat.structure.jsonSchema.schema: not valid JSON.",
                      "outputConfig.textFormat.structure.jsonSchema.schema", "invalid_schema") from None
    return OutputFormat("json_schema", schema, "response", "outputConfig.textFormat.structure.jsonSchema.schema")


def parse_converse(body: Any, model: str, stream: bool) -> GenerationRequest:
    """A Converse body into the shared request model."""
    body = expect_object(body)
    _refuse_unknown(body, CONVERSE_FIELDS, "")
    for key in REFUSED_FIELDS:
        if body.get(key) is not None:
            raise invalid(f"{key} is not simulated by pytest-llmsim.", key, "unsupported_value")
    messages, breakpoint_at = _messages(body)
    max_tokens, stops = _inference(body)
    tools = (body.get("toolConfig") or {}).get("tools") if isinstance(body.get("toolConfig"), dict) else None
    return GenerationRequest(kind="chat", model=model, stream=stream, include_usage=True, max_tokens=max_tokens,
                             max_tokens_param="inferenceConfig.maxTokens", n=1, stops=stops, seed=None,
                             messages=messages, tools_text=tools_text(tools),
                             cache_breakpoint=breakpoint_at, tool_use=_tool_use(body),
                             output_format=_output_format(body))
