"""A cassette's content, replayed by the simulator: each recorded answer becomes a rule, and the engine times it.

Two modes (``llmsim replay --mode``, ``llmsim serve --cassette FILE --cassette-mode``):

- ``content``: the request that was recorded (its last user message, its model and its turn) gets the recorded
  answer, timed by the backend's engine and settings, not by the recording;
- ``simulate``: any request whose last user message is the recorded one (and that offers the recorded call's tool)
  gets it, whatever its model; everything else is the simulator's own.

Answers are read from OpenAI chat completions, Anthropic Messages, the Responses API and Gemini's
generateContent, whole or streamed: their text, or their tool calls. An exchange whose answer is an error, or from
another API, is left out (it has no content to give).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..content.replies import Reply, Rule, ToolCall
from ..sim.patterns import escape_pattern
from .cassette import Exchange, read_cassette

__all__ = ["CASSETTE_MODES", "recorded_reply", "rules_from_cassette"]

CASSETTE_MODES = ("content", "simulate")


def _events(exchange: Exchange) -> Iterator[Any]:
    """The JSON of each server-sent event (``data:`` lines), or of a JSON-array stream's elements."""
    text = exchange.answer.decode("utf-8", "replace")
    if text.lstrip().startswith("["):  # Gemini without alt=sse
        try:
            yield from json.loads(text)
        except ValueError:
            return
        return
    for line in text.splitlines():
        if line.startswith("data:") and line[5:].strip() not in ("", "[DONE]"):
            try:
                yield json.loads(line[5:])
            except ValueError:
                continue


def _calls(calls: dict[int, list[str]]) -> list[ToolCall]:
    return [ToolCall(name or "tool", arguments or "{}") for name, arguments in
            (("".join(parts[:1]), "".join(parts[1:])) for _, parts in sorted(calls.items()))]


def recorded_reply(exchange: Exchange) -> Reply | None:
    """What the recorded answer said (its text, or its tool calls), or None when it has no content to give."""
    if not 200 <= exchange.status < 300:
        return None
    text: list[str] = []
    calls: dict[int, list[str]] = {}  # call index -> [name, argument pieces...]
    for event in _events(exchange) if exchange.path.endswith(("/completions", "/messages", "/responses")) or (
            ":stream" in exchange.path) else ():
        _read_event(event, text, calls)
    if not text and not calls:
        try:
            whole = json.loads(exchange.answer)
        except ValueError:
            return None
        _read_event(whole, text, calls)
    if calls:
        return _calls(calls)
    return "".join(text) if text else None


def _read_event(event: Any, text: list[str], calls: dict[int, list[str]]) -> None:
    """Add what one answer or event says (any of the four APIs' shapes) to ``text`` and ``calls``."""
    if not isinstance(event, dict):
        return
    for choice in event.get("choices") or ():  # OpenAI chat: a whole message or a stream's delta
        message = choice.get("message") or choice.get("delta") or {}
        if isinstance(message.get("content"), str):
            text.append(message["content"])
        for call in message.get("tool_calls") or ():
            entry = calls.setdefault(call.get("index", len(calls)), [""])
            function = call.get("function") or {}
            if function.get("name"):
                entry[0] = function["name"]
            entry.append(function.get("arguments") or "")
    kind = event.get("type")
    if kind == "message" or (kind is None and isinstance(event.get("content"), list)):  # Anthropic, whole
        for number, block in enumerate(event.get("content") or ()):
            if block.get("type") == "text":
                text.append(block.get("text", ""))
            elif block.get("type") == "tool_use":
                calls[number] = [block.get("name", ""), json.dumps(block.get("input") or {})]
    elif kind == "content_block_start" and (event.get("content_block") or {}).get("type") == "tool_use":
        calls[event.get("index", 0)] = [event["content_block"].get("name", "")]
    elif kind == "content_block_delta":
        delta = event.get("delta") or {}
        if delta.get("type") == "text_delta":
            text.append(delta.get("text", ""))
        elif delta.get("type") == "input_json_delta":
            calls.setdefault(event.get("index", 0), [""]).append(delta.get("partial_json", ""))
    elif kind == "response.output_text.delta":  # the Responses API's stream
        text.append(event.get("delta", ""))
    elif kind is None and isinstance(event.get("output"), list):  # the Responses API, whole
        for item in event["output"]:
            if item.get("type") == "function_call":
                calls[len(calls)] = [item.get("name", ""), item.get("arguments", "")]
            for part in item.get("content") or ():
                if part.get("type") == "output_text":
                    text.append(part.get("text", ""))
    for candidate in event.get("candidates") or ():  # Gemini
        for part in (candidate.get("content") or {}).get("parts") or ():
            if isinstance(part.get("text"), str) and not part.get("thought"):
                text.append(part["text"])
            if isinstance(part.get("functionCall"), dict):
                call = part["functionCall"]
                calls[len(calls)] = [call.get("name", ""), json.dumps(call.get("args") or {})]


def _asked(body: Any) -> tuple[str, int, list[str]] | None:
    """The request's last user text, its turn (user messages so far) and the tools it offers, or None."""
    if not isinstance(body, dict):
        return None
    turns = body.get("messages") or body.get("contents") or body.get("input")
    if isinstance(turns, str):
        return turns, 1, _tools(body)
    if not isinstance(turns, list):
        return None
    users = [turn for turn in turns if isinstance(turn, dict) and turn.get("role") == "user"]
    if not users:
        return None
    return _turn_text(users[-1]), len(users), _tools(body)


def _turn_text(turn: dict[str, Any]) -> str:
    content = turn.get("content", turn.get("parts"))
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict)
                       and isinstance(part.get("text"), str))
    return ""


def _tools(body: dict[str, Any]) -> list[str]:
    names = []
    for tool in body.get("tools") or ():
        if isinstance(tool, dict):
            function: dict[str, Any] = tool["function"] if isinstance(tool.get("function"), dict) else tool
            if isinstance(function.get("name"), str):
                names.append(function["name"])
    return names


def rules_from_cassette(path: str | Path, mode: str = "simulate") -> list[Rule]:
    """A rule per recorded exchange with content to give (see the module's text); the cassette's order is kept
    (a later recording of the same request is a later answer: the rule answers in turn)."""
    if mode not in CASSETTE_MODES:
        raise ValueError(f"cassette mode {mode!r}: expected one of {', '.join(CASSETTE_MODES)}")
    rules: dict[tuple[Any, ...], tuple[list[Reply], dict[str, Any]]] = {}
    for number, exchange in enumerate(read_cassette(path), 2):
        asked, reply = _asked(exchange.json_body), recorded_reply(exchange)
        if asked is None or reply is None:
            continue
        text, turn, tools = asked
        matchers: dict[str, Any] = {"prompt": f"\\A{escape_pattern(text)}\\z"}
        if mode == "content":
            model = (exchange.json_body or {}).get("model")
            matchers.update({"turn": turn, **({"model": model} if isinstance(model, str) else {})})
        elif isinstance(reply, list) and tools:
            matchers["tool"] = reply[0].name if reply[0].name in tools else tools[0]
        key = tuple(sorted(matchers.items()))
        rules.setdefault(key, ([], {**matchers, "name": f"{Path(path).name}:{number}"}))[0].append(reply)
    return [Rule(tuple(replies), **matchers) for replies, matchers in rules.values()]
