"""Anthropic's server tools (web search, web fetch, code execution), run by the backend itself.

A request offers one by ``type`` (``web_search_20250305``) and its fixed
``name``; under the usual tool rules (``tool_choice``, ``tool_call_rate``) the
simulated model calls it, and the same reply shows the call
(``server_tool_use``), its result block (``web_search_tool_result``,
``web_fetch_tool_result``, ``code_execution_tool_result`` or
``bash_code_execution_tool_result``) and then the answer, ``stop_reason``
``end_turn``; ``usage.server_tool_use`` counts the searches and fetches.
The call's input reads as the model would write it: the search query is the
start of the user's last message, the fetched URL one that message names.
Results are deterministic: the same input gives the same results.
"""

from __future__ import annotations

import base64
import hashlib
import json
import random
import re
from typing import Any

from ..content.vocabulary import WORDS
from ..sim import invalid
from ..sim.planned import PlannedCall
from ..sim.request import ToolSpec
from .field_policy import FieldPolicy

__all__ = ["SERVER_TOOL_FIELDS", "SERVER_TOOL_TYPES", "anthropic_server_tool", "result_block", "server_tool_usage",
           "server_use_block"]

# type prefix -> the name the tool must have
SERVER_TOOL_TYPES = {"web_search_": "web_search", "web_fetch_": "web_fetch", "code_execution_": "code_execution"}
# Every field of each server tool's SDK type (tests/test_anthropic_server_tools.py walks them); an unknown one is
# refused, as the API refuses it ("Extra inputs are not permitted").
_COMMON_NO_EFFECT = ("cache_control", "strict", "allowed_callers")  # allowed_callers must include "direct"
_DEFERRED = {"defer_loading": "deferred tool loading (tool search) is not simulated"}
SERVER_TOOL_FIELDS = {
    "web_search": FieldPolicy.of(("type", "name", "max_uses", "allowed_domains", "blocked_domains"),
                                 (*_COMMON_NO_EFFECT, "user_location"), _DEFERRED),
    "web_fetch": FieldPolicy.of(("type", "name", "max_uses", "allowed_domains", "blocked_domains", "citations",
                                 "max_content_tokens"), _COMMON_NO_EFFECT,
                                {**_DEFERRED, "url_sources": "restricting fetches to URL sources is not simulated"}),
    "code_execution": FieldPolicy.of(("type", "name"), _COMMON_NO_EFFECT, _DEFERRED),
}
_URL = re.compile(r"https?://[^\s<>\"')\]]+")
_DEFAULT_DOMAINS = ("docs.example.org", "en.wikipedia.org", "blog.example.com", "news.example.net")
_COMMANDS = ("python -c 'print(sum(range(10)))'", "ls -la", "python --version", "echo ready")
_CODE = ("print(sum(range(10)))", "import math\nprint(math.sqrt(2))", "print('ready')")


def _domain(url: str) -> str:
    return url.split("://", 1)[-1].split("/", 1)[0].lower()


def _allowed(domain: str, allowed: list[str], blocked: list[str]) -> bool:
    def under(name: str) -> bool:
        return domain == name or domain.endswith("." + name)
    return (not allowed or any(under(name) for name in allowed)) and not any(under(name) for name in blocked)


def _domains(tool: dict[str, Any], param: str) -> tuple[list[str], list[str]]:
    lists = []
    for field in ("allowed_domains", "blocked_domains"):
        value = tool.get(field)
        if value is not None and not (isinstance(value, list) and all(isinstance(v, str) and v for v in value)):
            raise invalid(f"{param}.{field}: Input should be a list of domain names.", f"{param}.{field}",
                          "invalid_type")
        lists.append([_domain(v) for v in value or []])
    if lists[0] and lists[1]:
        raise invalid(f"{param}.allowed_domains: allowed_domains and blocked_domains cannot both be set.",
                      f"{param}.allowed_domains", "invalid_value")
    return lists[0], lists[1]


def _check_fields(tool: dict[str, Any], policy: FieldPolicy, param: str) -> None:
    """Refuse a field the tool's type does not define, a refused one that asks for something, and
    ``allowed_callers`` without ``direct`` (the simulated model only calls tools directly)."""
    for key in tool:
        if key not in policy.known:
            raise invalid(f"{param}.{key}: Extra inputs are not permitted", f"{param}.{key}", "extra_forbidden")
        why = policy.refused.get(key)
        if why is not None and tool[key] not in (None, False, [], {}):
            raise invalid(f"{param}.{key}: not supported by pytest-llmsim: {why}.", f"{param}.{key}",
                          "unsupported_parameter")
    callers = tool.get("allowed_callers")
    if callers is not None and "direct" not in (callers if isinstance(callers, list) else []):
        raise invalid(f"{param}.allowed_callers: not supported by pytest-llmsim without 'direct': the simulated "
                      "model calls tools directly, never from code execution.", f"{param}.allowed_callers",
                      "unsupported_parameter")


def _positive(tool: dict[str, Any], field: str, param: str) -> int | None:
    value = tool.get(field)
    if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
        raise invalid(f"{param}.{field}: Input should be a positive integer.", f"{param}.{field}", "invalid_value")
    return value


def _input_schema(properties: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": list(properties), "additionalProperties": False}


def anthropic_server_tool(tool: dict[str, Any], param: str, prompt: str) -> ToolSpec | None:
    """The tool spec of a server tool (None: ``tool`` is not one); ``prompt`` is the user's last text."""
    kind = tool.get("type")
    if not isinstance(kind, str):
        return None
    name = next((name for prefix, name in SERVER_TOOL_TYPES.items() if kind.startswith(prefix)), None)
    if name is None:
        return None
    if tool.get("name") != name:
        raise invalid(f"{param}.name: the {kind} tool must be named {name!r}.", f"{param}.name", "invalid_value")
    _check_fields(tool, SERVER_TOOL_FIELDS[name], param)
    _positive(tool, "max_uses", param)  # one round of server tools per reply: any positive number is enough
    options: dict[str, Any] = {"type": kind, "call": name}
    if name == "web_search":
        allowed, blocked = _domains(tool, param)
        query = " ".join(prompt.split()[:12]) or "latest news"
        schema = _input_schema({"query": {"const": query}})
        options["domains"] = [d for d in (allowed or list(_DEFAULT_DOMAINS)) if _allowed(d, [], blocked)] or \
            ["docs.example.org"]
    elif name == "web_fetch":
        allowed, blocked = _domains(tool, param)
        urls = [url.rstrip(".,;:") for url in _URL.findall(prompt)]
        urls = [url for url in urls if _allowed(_domain(url), allowed, blocked)]
        schema = _input_schema({"url": {"enum": urls or [f"https://{(allowed or ['example.com'])[0]}/"]}})
        options["max_content_tokens"] = _positive(tool, "max_content_tokens", param)
        citations = tool.get("citations")
        options["citations"] = isinstance(citations, dict) and citations.get("enabled") is True
    elif kind == "code_execution_20250522":  # the first version runs Python; later ones a bash sandbox
        schema = _input_schema({"code": {"enum": list(_CODE)}})
    else:
        options["call"] = "bash_code_execution"
        schema = _input_schema({"command": {"enum": list(_COMMANDS)}})
    return ToolSpec(name, schema, f"{param}.type", server=options)


def _rng(call: PlannedCall) -> random.Random:
    """Seeded by the call's name and input: the same input gives the same results."""
    return random.Random(hashlib.sha256(f"{call.name}\0{call.arguments}".encode()).digest())


def _sentence(rng: random.Random, count: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(count)).capitalize() + "."


def _search_results(arguments: dict[str, Any], options: dict[str, Any], rng: random.Random) -> list[dict[str, Any]]:
    query = str(arguments.get("query", ""))
    topic = "-".join(query.lower().split()[:4]) or "result"
    results = []
    for number in range(rng.randint(3, 5)):
        domain = options["domains"][number % len(options["domains"])]
        digest = hashlib.sha256(f"{query}\0{number}".encode()).digest()
        results.append({"type": "web_search_result", "url": f"https://{domain}/{topic}-{number + 1}",
                        "title": f"{query[:60] or 'Result'} — {rng.choice(WORDS).capitalize()} {domain}",
                        "encrypted_content": base64.b64encode(digest * 2).decode(),
                        "page_age": f"{rng.randint(1, 28)} {rng.choice(['days', 'weeks', 'months'])} ago"})
    return results


def _result_block(call: PlannedCall, options: dict[str, Any], use_id: str) -> dict[str, Any]:
    try:
        arguments = json.loads(call.arguments)
    except ValueError:
        arguments = {}
    rng = _rng(call)
    name = options["call"]
    if name == "web_search":
        content: Any = _search_results(arguments, options, rng)
        return {"type": "web_search_tool_result", "tool_use_id": use_id, "content": content}
    if name == "web_fetch":
        url = str(arguments.get("url", "https://example.com/"))
        words = min(options.get("max_content_tokens") or 200, 200)
        text = " ".join(_sentence(rng, 12) for _ in range(max(1, words // 12)))
        document = {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": text},
                    "title": f"{_domain(url)}: {rng.choice(WORDS).capitalize()}",
                    "citations": {"enabled": options.get("citations", False)}}
        return {"type": "web_fetch_tool_result", "tool_use_id": use_id, "content": {
            "type": "web_fetch_result", "url": url, "content": document,
            "retrieved_at": f"2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}T10:00:00Z"}}
    source = str(arguments.get("code") or arguments.get("command") or "")
    stdout = "45\n" if "sum(range(10))" in source else "1.4142135623730951\n" if "sqrt" in source else \
        "Python 3.11.7\n" if "--version" in source else "ready\n" if "ready" in source else \
        "total 8\ndrwxr-xr-x 2 user user 4096 .\n"
    kind = "code_execution" if name == "code_execution" else "bash_code_execution"
    return {"type": f"{kind}_tool_result", "tool_use_id": use_id, "content": {
        "type": f"{kind}_result", "stdout": stdout, "stderr": "", "return_code": 0, "content": []}}


def _options(tools: tuple[ToolSpec, ...], call: PlannedCall) -> dict[str, Any]:
    spec = next(tool for tool in tools if tool.name == call.name and tool.server is not None)
    assert spec.server is not None
    return spec.server


def server_use_block(call: PlannedCall, tools: tuple[ToolSpec, ...], with_input: bool = True) -> dict[str, Any]:
    """The ``server_tool_use`` block of ``call`` (``input`` empty as a stream opens it, ``{}`` if cut)."""
    arguments: Any = {}
    if with_input:
        try:
            arguments = json.loads(call.arguments)
        except ValueError:
            arguments = {}
    return {"type": "server_tool_use", "id": "srvtoolu_" + call.key, "name": _options(tools, call)["call"],
            "input": arguments}


def result_block(call: PlannedCall, tools: tuple[ToolSpec, ...]) -> dict[str, Any]:
    """The result block of ``call`` (a server tool's), deterministic in its input."""
    return _result_block(call, _options(tools, call), "srvtoolu_" + call.key)


def server_tool_usage(served: tuple[PlannedCall, ...], tools: tuple[ToolSpec, ...]) -> dict[str, int]:
    """``usage.server_tool_use``: the searches and fetches the reply ran."""
    names = [_options(tools, call)["call"] for call in served]
    return {"web_search_requests": names.count("web_search"), "web_fetch_requests": names.count("web_fetch")}
