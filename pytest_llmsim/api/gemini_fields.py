"""Reading a Gemini ``GenerateContentRequest``: contents, system instruction, tools, generation config.

Field names are the REST API's lowerCamelCase; protobuf's JSON parser also
takes the snake_case names (``max_output_tokens``), and so does this one. A
field Gemini has but this backend does not simulate is refused with a 400
naming it (``cachedContent``, non-function tools, logprobs, media parts);
one it does not act on but that changes nothing a test can observe (sampling,
safety settings, labels, thinking budgets) is accepted and listed in the
reference. An unknown field is refused as Gemini refuses it
(``Invalid JSON payload received. Unknown name "x"``).

``responseSchema`` is Gemini's OpenAPI subset (``"type": "OBJECT"``,
``nullable``, ``propertyOrdering``): it is turned into the JSON Schema the
planner draws instances from; ``responseJsonSchema`` and
``parametersJsonSchema`` are JSON Schema already.
"""

from __future__ import annotations

import json
import re
from typing import Any

from ..sim import ChatMessage, invalid
from ..sim.request import OutputFormat, ToolSpec, ToolUse
from .tools_text import kept_specs
from .validation import describe, is_int, is_number

__all__ = [
    "camel_keys",
    "gemini_messages",
    "gemini_tool_use",
    "generation_config",
    "openapi_to_json_schema",
    "unknown_fields",
]

FUNCTION_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_.:-]{0,63}\Z")  # Gemini: letters, digits, _ . : -, at most 64
MAX_CANDIDATES = 8
MAX_STOP_SEQUENCES = 5
_SNAKE = re.compile(r"_([a-z0-9])")


def camel_keys(value: dict[str, Any]) -> dict[str, Any]:
    """``value`` with snake_case keys spelled lowerCamelCase (protobuf JSON takes both)."""
    return {(_SNAKE.sub(lambda m: m.group(1).upper(), key) if "_" in key else key): item
            for key, item in value.items()}


def unknown_fields(value: dict[str, Any], known: tuple[str, ...], where: str) -> None:
    """Refuse a field Gemini does not have, as Gemini does."""
    for key in value:
        if key not in known:
            at = f"{where}.{key}" if where else key
            raise invalid(f'Invalid JSON payload received. Unknown name "{key}" at \'{where or "request"}\': '
                          f"Cannot find field.", at, "unknown_field")


def _object(value: Any, param: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise invalid(f"Invalid value at '{param}': expected an object, got {describe(value)}.", param,
                      "invalid_type")
    return camel_keys(value)


def _part_text(part: Any, param: str) -> tuple[str, str]:
    """A part's text as the prompt counts it, and its kind (``text``, ``call``, ``result``)."""
    part = _object(part, param)
    if "text" in part:
        if not isinstance(part["text"], str):
            raise invalid(f"Invalid value at '{param}.text': expected a string.", f"{param}.text", "invalid_type")
        return part["text"], "text"
    if "functionCall" in part:
        call = _object(part["functionCall"], f"{param}.functionCall")
        return json.dumps({"name": call.get("name"), "args": call.get("args", {})}), "call"
    if "functionResponse" in part:
        result = _object(part["functionResponse"], f"{param}.functionResponse")
        return json.dumps({"name": result.get("name"), "response": result.get("response", {})}), "result"
    kinds = ", ".join(sorted(part)) or "none"
    raise invalid(f"Invalid value at '{param}': parts of kind {kinds} are not supported by pytest-llmsim; "
                  "text, functionCall and functionResponse parts are simulated.", param, "unsupported_value")


def _content_text(content: Any, param: str) -> tuple[str, str, set[str]]:
    """A Content's role, its parts' text and the kinds of its parts."""
    content = _object(content, param)
    unknown_fields(content, ("role", "parts"), param)
    parts = content.get("parts")
    if not isinstance(parts, list) or not parts:
        raise invalid(f"Invalid value at '{param}.parts': a content needs a non-empty list of parts.",
                      f"{param}.parts", "invalid_value")
    texts = [_part_text(part, f"{param}.parts[{j}]") for j, part in enumerate(parts)]
    role = content.get("role", "user")
    if role not in ("user", "model", "function", "tool"):
        raise invalid(f"Invalid value at '{param}.role': expected 'user' or 'model', got {describe(role)}.",
                      f"{param}.role", "invalid_value")
    return role, "".join(text for text, _ in texts), {kind for _, kind in texts}


def gemini_messages(body: dict[str, Any]) -> list[ChatMessage]:
    """``systemInstruction`` and ``contents`` as the shared chat messages (a turn of only function
    responses is a tool's result)."""
    contents = body.get("contents")
    if not isinstance(contents, list) or not contents:
        raise invalid("Invalid value at 'contents': at least one content is required." if contents is not None
                      else "contents is not specified.", "contents",
                      "missing_required_parameter" if contents is None else "invalid_value")
    messages: list[ChatMessage] = []
    system = body.get("systemInstruction")
    if system is not None:
        text = system if isinstance(system, str) else _content_text(system, "systemInstruction")[1]
        messages.append(ChatMessage("system", text))
    for i, content in enumerate(contents):
        role, text, kinds = _content_text(content, f"contents[{i}]")
        if kinds == {"result"} or role in ("function", "tool"):
            messages.append(ChatMessage("tool", text))
        else:
            messages.append(ChatMessage("assistant" if role == "model" else "user", text))
    return messages


_OPENAPI_TYPES = {"STRING": "string", "NUMBER": "number", "INTEGER": "integer", "BOOLEAN": "boolean",
                  "ARRAY": "array", "OBJECT": "object", "NULL": "null"}


def openapi_to_json_schema(schema: Any, param: str) -> dict[str, Any]:
    """Gemini's OpenAPI-subset ``Schema`` as JSON Schema (types lower-cased, ``nullable`` as a null type)."""
    if not isinstance(schema, dict):
        raise invalid(f"Invalid value at '{param}': expected a schema object.", param, "invalid_schema")
    out: dict[str, Any] = {}
    for key, value in camel_keys(schema).items():
        if key == "type":
            kind = _OPENAPI_TYPES.get(value.upper()) if isinstance(value, str) else None
            if kind is None:
                raise invalid(f"Invalid value at '{param}.type': {describe(value)} is not a type "
                              f"({', '.join(_OPENAPI_TYPES)}).", f"{param}.type", "invalid_schema")
            out["type"] = kind
        elif key == "properties" and isinstance(value, dict):
            out["properties"] = {name: openapi_to_json_schema(sub, f"{param}.properties.{name}")
                                 for name, sub in value.items()}
        elif key == "items":
            out["items"] = openapi_to_json_schema(value, f"{param}.items")
        elif key == "anyOf" and isinstance(value, list):
            out["anyOf"] = [openapi_to_json_schema(sub, f"{param}.anyOf[{i}]") for i, sub in enumerate(value)]
        elif key in ("nullable", "propertyOrdering", "example", "default"):
            continue  # nullable is applied below; ordering and examples change no instance's validity
        else:
            out[key] = value  # enum, format, required, minItems, minimum, description, ...
    if schema.get("nullable") is True and "type" in out:
        out["type"] = [out["type"], "null"]
    return out


def _declaration(declaration: Any, param: str) -> ToolSpec:
    declaration = _object(declaration, param)
    unknown_fields(declaration, ("name", "description", "parameters", "parametersJsonSchema", "response",
                                 "responseJsonSchema", "behavior"), param)
    name = declaration.get("name")
    if not isinstance(name, str) or not FUNCTION_NAME.match(name):
        raise invalid(f"Invalid value at '{param}.name': {describe(name)} is not a function name (a letter or "
                      "underscore, then letters, digits, _ . : -, at most 64).", f"{param}.name", "invalid_value")
    if declaration.get("parametersJsonSchema") is not None:
        schema = declaration["parametersJsonSchema"]
        if not isinstance(schema, dict):
            raise invalid(f"Invalid value at '{param}.parametersJsonSchema': expected a JSON Schema object.",
                          f"{param}.parametersJsonSchema", "invalid_schema")
        return ToolSpec(name, schema, f"{param}.parametersJsonSchema")
    parameters = declaration.get("parameters")
    schema = {"type": "object", "properties": {}} if parameters is None else openapi_to_json_schema(
        parameters, f"{param}.parameters")
    return ToolSpec(name, schema, f"{param}.parameters")


def gemini_tool_use(body: dict[str, Any]) -> ToolUse | None:
    """``tools`` (function declarations only) and ``toolConfig.functionCallingConfig``."""
    tools = body.get("tools")
    mode, allowed = _calling_config(body.get("toolConfig"))
    if not tools:
        return None
    if not isinstance(tools, list):
        raise invalid(f"Invalid value at 'tools': expected a list, got {describe(tools)}.", "tools", "invalid_type")
    specs = kept_specs("gemini", tools, lambda: _declared(tools))  # the kept tuple, unless names filter it
    if not specs:
        return None
    if allowed is not None:
        names = {spec.name for spec in specs}
        if not isinstance(allowed, list) or not allowed or any(not isinstance(name, str) or name not in names
                                                               for name in allowed):
            raise invalid("Invalid value at 'toolConfig.functionCallingConfig.allowedFunctionNames': each must be "
                          "the name of a declared function.", "toolConfig.functionCallingConfig.allowedFunctionNames",
                          "invalid_value")
        if mode != "ANY":
            raise invalid("allowedFunctionNames may only be set when the mode is ANY.",
                          "toolConfig.functionCallingConfig.allowedFunctionNames", "invalid_value")
        specs = tuple(spec for spec in specs if spec.name in allowed)
    if mode == "ANY":
        if len(specs) == 1:
            return ToolUse(specs, "function", specs[0].name, True)
        return ToolUse(specs, "required", None, True)
    return ToolUse(specs, "none" if mode == "NONE" else "auto", None, True)


def _declared(tools: list[Any]) -> tuple[ToolSpec, ...]:
    """The function declarations of ``tools``, checked, their OpenAPI schemas as JSON Schemas."""
    specs: list[ToolSpec] = []
    for i, tool in enumerate(tools):
        tool = _object(tool, f"tools[{i}]")
        other = sorted(set(tool) - {"functionDeclarations"})
        if other:
            raise invalid(f"Invalid value at 'tools[{i}]': {other[0]} tools are not simulated by pytest-llmsim; "
                          "functionDeclarations are.", f"tools[{i}].{other[0]}", "unsupported_value")
        declarations = tool.get("functionDeclarations") or []
        if not isinstance(declarations, list):
            raise invalid(f"Invalid value at 'tools[{i}].functionDeclarations': expected a list.",
                          f"tools[{i}].functionDeclarations", "invalid_type")
        specs.extend(_declaration(d, f"tools[{i}].functionDeclarations[{j}]") for j, d in enumerate(declarations))
    return tuple(specs)


def _calling_config(config: Any) -> tuple[str, Any]:
    """``toolConfig.functionCallingConfig``'s mode and allowed names (checked even without tools)."""
    if config is None:
        return "AUTO", None
    config = _object(config, "toolConfig")
    unknown_fields(config, ("functionCallingConfig", "retrievalConfig"), "toolConfig")
    calling = _object(config.get("functionCallingConfig") or {}, "toolConfig.functionCallingConfig")
    unknown_fields(calling, ("mode", "allowedFunctionNames"), "toolConfig.functionCallingConfig")
    mode = calling.get("mode", "AUTO")
    if mode not in ("AUTO", "ANY", "NONE", "VALIDATED", "MODE_UNSPECIFIED"):
        raise invalid(f"Invalid value at 'toolConfig.functionCallingConfig.mode': {describe(mode)} is not one of "
                      "AUTO, ANY, NONE, VALIDATED.", "toolConfig.functionCallingConfig.mode", "invalid_value")
    return mode, calling.get("allowedFunctionNames")


_CONFIG_FIELDS = ("maxOutputTokens", "stopSequences", "candidateCount", "temperature", "topP", "topK", "seed",
                  "presencePenalty", "frequencyPenalty", "responseMimeType", "responseSchema", "responseJsonSchema",
                  "thinkingConfig", "responseModalities", "responseLogprobs", "logprobs", "mediaResolution",
                  "enableEnhancedCivicAnswers", "speechConfig", "audioTimestamp", "routingConfig", "imageConfig",
                  "modelSelectionConfig", "audioTranscriptionConfig", "generationOutputConfig")
_REFUSED_CONFIG = ("responseLogprobs", "logprobs", "speechConfig", "audioTimestamp", "routingConfig",
                   "audioTranscriptionConfig", "generationOutputConfig")


def _number(config: dict[str, Any], key: str, low: float, high: float) -> None:
    value = config.get(key)
    if value is not None and (not is_number(value) or not low <= value <= high):
        raise invalid(f"Invalid value at 'generationConfig.{key}': expected a number from {low:g} to {high:g}, "
                      f"got {describe(value)}.", f"generationConfig.{key}", "invalid_value")


def generation_config(body: dict[str, Any]) -> dict[str, Any]:
    """``generationConfig``, checked: ``max_tokens``, ``stops``, ``n``, ``seed`` and ``output_format``."""
    config = _object(body.get("generationConfig") or {}, "generationConfig")
    unknown_fields(config, _CONFIG_FIELDS, "generationConfig")
    for key in _REFUSED_CONFIG:
        if config.get(key) not in (None, False):
            raise invalid(f"generationConfig.{key} is not simulated by pytest-llmsim.", f"generationConfig.{key}",
                          "unsupported_value")
    max_tokens = config.get("maxOutputTokens")
    if max_tokens is not None and (not is_int(max_tokens) or max_tokens < 1):
        raise invalid(f"Invalid value at 'generationConfig.maxOutputTokens': expected a positive integer, got "
                      f"{describe(max_tokens)}.", "generationConfig.maxOutputTokens", "invalid_value")
    stops = config.get("stopSequences") or []
    if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops) or len(stops) > MAX_STOP_SEQUENCES:
        raise invalid(f"Invalid value at 'generationConfig.stopSequences': at most {MAX_STOP_SEQUENCES} strings.",
                      "generationConfig.stopSequences", "invalid_value")
    n = config.get("candidateCount", 1)
    if not is_int(n) or not 1 <= n <= MAX_CANDIDATES:
        raise invalid(f"Invalid value at 'generationConfig.candidateCount': expected 1 to {MAX_CANDIDATES}, got "
                      f"{describe(n)}.", "generationConfig.candidateCount", "invalid_value")
    seed = config.get("seed")
    if seed is not None and not is_int(seed):
        raise invalid("Invalid value at 'generationConfig.seed': expected an integer.", "generationConfig.seed",
                      "invalid_type")
    _number(config, "temperature", 0.0, 2.0)
    _number(config, "topP", 0.0, 1.0)
    modalities = config.get("responseModalities")
    if modalities is not None and modalities not in (["TEXT"], ["text"]):
        raise invalid("generationConfig.responseModalities: only TEXT is simulated by pytest-llmsim.",
                      "generationConfig.responseModalities", "unsupported_value")
    return {"max_tokens": max_tokens, "stops": list(stops), "n": n, "seed": seed,
            "output_format": _output_format(config)}


def _output_format(config: dict[str, Any]) -> OutputFormat | None:
    mime = config.get("responseMimeType", "text/plain")
    schema, json_schema = config.get("responseSchema"), config.get("responseJsonSchema")
    if mime not in ("text/plain", "application/json"):
        raise invalid(f"Invalid value at 'generationConfig.responseMimeType': {describe(mime)}; "
                      "text/plain and application/json are simulated.", "generationConfig.responseMimeType",
                      "unsupported_value")
    if (schema is not None or json_schema is not None) and mime != "application/json":
        raise invalid("generationConfig.responseMimeType must be application/json when a response schema is "
                      "given.", "generationConfig.responseMimeType", "invalid_value")
    if schema is not None and json_schema is not None:
        raise invalid("Only one of generationConfig.responseSchema and responseJsonSchema may be set.",
                      "generationConfig.responseJsonSchema", "invalid_value")
    if mime != "application/json":
        return None
    if json_schema is not None:
        if not isinstance(json_schema, dict):
            raise invalid("Invalid value at 'generationConfig.responseJsonSchema': expected a JSON Schema object.",
                          "generationConfig.responseJsonSchema", "invalid_schema")
        return OutputFormat("json_schema", json_schema, "response", "generationConfig.responseJsonSchema")
    if schema is not None:
        converted = openapi_to_json_schema(schema, "generationConfig.responseSchema")
        return OutputFormat("json_schema", converted, "response", "generationConfig.responseSchema")
    return OutputFormat("json_object")

