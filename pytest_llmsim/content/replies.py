"""Scripted replies and rules: what a test tells the backend to answer.

A reply is text (``str``), a JSON object (``dict``, sent as its JSON text),
one :class:`ToolCall` or a list of them, or an :class:`ErrorReply`. Replies
queued with ``reply_with`` answer the next requests, one each, in order.
Rules answer the requests they match (first match wins, in the order added,
before the queue), each for ever or ``times`` times. The same replies and
rules have a JSON form (:func:`reply_from_json`, :meth:`Rule.from_json`) that
the control API, the ``[[rules]]`` tables of ``llmsim serve --config`` and
recorded conversations (JSONL) use.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..sim.patterns import Pattern, PatternError, compile_pattern, escape_pattern

if TYPE_CHECKING:
    from ..sim import GenerationRequest

__all__ = ["ErrorReply", "Reply", "Rule", "RuleBuilder", "Script", "ScriptFull", "ToolCall", "load_conversation",
           "normalize_reply", "reply_from_json", "reply_to_json"]


@dataclass(frozen=True)
class ToolCall:
    """A tool call to answer with: the function's ``name`` and its ``arguments``.

    ``arguments`` is an object (sent as its JSON text) or a string sent as
    given, so a test can send arguments a schema would reject, or broken JSON.
    """

    name: str
    arguments: Mapping[str, Any] | str = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise TypeError("ToolCall(name=...) needs a non-empty function name")
        if not isinstance(self.arguments, (str, Mapping)):
            raise TypeError(f"ToolCall arguments must be a dict or a string, not {type(self.arguments).__name__}")

    @property
    def arguments_text(self) -> str:
        if isinstance(self.arguments, str):
            return self.arguments
        return json.dumps(dict(self.arguments), separators=(",", ":"))


@dataclass(frozen=True)
class ErrorReply:
    """An error to answer with: an HTTP ``status`` and a ``message`` (each API renders it in its shape)."""

    status: int
    message: str
    type: str | None = None
    code: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.status, bool) or not isinstance(self.status, int) or not 400 <= self.status <= 599:
            raise TypeError(f"ErrorReply status must be an HTTP error status (400-599), not {self.status!r}")
        if not isinstance(self.message, str):
            raise TypeError("ErrorReply message must be a string")


Reply = str | dict[str, Any] | ToolCall | list[ToolCall] | ErrorReply


def normalize_reply(reply: Any) -> Reply:
    """``reply`` checked (a tuple of calls becomes a list); TypeError names what is wrong."""
    if isinstance(reply, (str, ToolCall, ErrorReply)):
        return reply
    if isinstance(reply, dict):
        json.dumps(reply)  # a JSON reply must be JSON: fail here, not in a handler thread
        return dict(reply)
    if isinstance(reply, (list, tuple)) and reply and all(isinstance(call, ToolCall) for call in reply):
        return list(reply)
    raise TypeError(f"a reply is a string, a dict (JSON), a ToolCall, a list of ToolCalls or an ErrorReply; "
                    f"got {reply!r}")


def reply_to_json(reply: Reply) -> dict[str, Any]:
    """The JSON form: ``{"text"}``, ``{"json"}``, ``{"tool_calls": [{"name", "arguments"}]}`` or ``{"error"}``."""
    if isinstance(reply, str):
        return {"text": reply}
    if isinstance(reply, ErrorReply):
        return {"error": {"status": reply.status, "message": reply.message, "type": reply.type, "code": reply.code}}
    if isinstance(reply, ToolCall):
        reply = [reply]
    if isinstance(reply, list):
        return {"tool_calls": [{"name": call.name, "arguments": call.arguments if isinstance(call.arguments, str)
                                else dict(call.arguments)} for call in reply]}
    return {"json": reply}


def reply_from_json(data: Any) -> Reply:
    """Read the JSON form of a reply (a bare string is text); ValueError says what is wrong."""
    if isinstance(data, str):
        return data
    if not isinstance(data, dict) or len(set(data) & {"text", "json", "tool_call", "tool_calls", "error"}) != 1:
        raise ValueError(f"a reply is an object with one of 'text', 'json', 'tool_call', 'tool_calls' or 'error'; "
                         f"got {data!r}")
    try:
        if "text" in data:
            if not isinstance(data["text"], str):
                raise ValueError("'text' must be a string")
            return data["text"]
        if "json" in data:
            if not isinstance(data["json"], dict):
                raise ValueError("'json' must be an object")
            return dict(data["json"])
        if "error" in data:
            error = data["error"]
            if not isinstance(error, dict):
                raise ValueError("'error' must be an object with 'status' and 'message'")
            status: Any = error.get("status")
            return ErrorReply(status, error.get("message", "scripted error"), error.get("type"), error.get("code"))
        calls = [data["tool_call"]] if "tool_call" in data else data["tool_calls"]
        if not isinstance(calls, list) or not calls or not all(isinstance(call, dict) for call in calls):
            raise ValueError("'tool_calls' must be a non-empty list of {'name', 'arguments'} objects")
        built = [ToolCall(call.get("name", ""), call.get("arguments", {})) for call in calls]
        return built[0] if len(built) == 1 else built
    except TypeError as error:
        raise ValueError(str(error)) from None


#: What a rule can match on (its JSON and TOML keys too).
MATCHERS = ("prompt", "model", "tool", "api", "turn", "tool_result", "previous", "header")


@dataclass
class Rule:
    """Answer requests that match with ``replies`` (in turn, cycling), for ever or ``times`` times.

    Every matcher given must match: ``prompt`` is a regular expression
    searched in the last user message (the prompt, for completions; the
    input, for embeddings); ``model`` equals the request's model; ``tool``
    is among the functions the request offers; ``api`` is the wire API
    (``chat``, ``completions``, ``responses``, ``messages``, ``embeddings``,
    or the full name such as ``openai.chat``); ``turn`` is the conversation's
    turn (its user messages: 1 for the first); ``tool_result`` a regular expression
    searched in the latest tool result; ``previous`` one searched in the latest
    assistant message; ``header`` ``"Name: regex"``, searched in that request
    header's value (``"x-tenant: ^acme$"``). ``hits`` counts the requests
    it answered. Instead of ``replies``, ``answer`` may be a callable that is
    given each matching request and returns its reply (``backend.on(...).reply(fn)``).
    """

    replies: tuple[Reply, ...]
    prompt: str | None = None
    model: str | None = None
    tool: str | None = None
    api: str | None = None
    times: int | None = None
    name: str = ""
    hits: int = 0
    turn: int | None = None
    tool_result: str | None = None
    previous: str | None = None
    header: str | None = None
    # Instead of replies: called with each matching request (a GenerationRequest: model, messages, tools,
    # the API it came through) in the handler's thread; returns a reply of any form, or None for the
    # backend's own answer. In-process backends only: a function cannot cross the control API.
    answer: Callable[[GenerationRequest], Any] | None = None

    def __post_init__(self) -> None:
        if self.answer is not None:
            if self.replies:
                raise TypeError("a rule answers with fixed replies or with a callable, not both")
            if not callable(self.answer):
                raise TypeError(f"a rule's answer must be callable, not {self.answer!r}")
        elif not self.replies:
            raise TypeError("a rule needs at least one reply")
        self.replies = tuple(normalize_reply(reply) for reply in self.replies)
        if self.times is not None and (isinstance(self.times, bool) or not isinstance(self.times, int)
                                       or self.times < 1):
            raise TypeError(f"times must be a positive integer or None, not {self.times!r}")
        for key in ("prompt", "model", "tool", "api", "tool_result", "previous", "header"):
            value = getattr(self, key)
            if value is not None and not isinstance(value, str):
                raise TypeError(f"rule matcher {key!r} must be a string, not {value!r}")
        if self.turn is not None and (isinstance(self.turn, bool) or not isinstance(self.turn, int) or self.turn < 1):
            raise TypeError(f"rule matcher 'turn' must be a positive integer, not {self.turn!r}")
        self._header_name, _, header_pattern = (self.header or ":").partition(":")
        if self.header is not None and (":" not in self.header or not self._header_name.strip()):
            raise ValueError(f"rule {self.name!r}: header is 'Name: regex', not {self.header!r}")
        self._header_name = self._header_name.strip()
        texts = {"prompt": self.prompt, "tool_result": self.tool_result, "previous": self.previous,
                 "header": header_pattern.strip() if self.header is not None else None}
        compiled = []
        for key, text in texts.items():
            try:  # a client's regex: linear time, never Python's backtracking re (see sim.patterns)
                compiled.append(compile_pattern(text) if text is not None else None)
            except PatternError as error:
                raise ValueError(f"rule {self.name or self.prompt!r}: {key} {error}") from None
        self._pattern, self._tool_result, self._previous, self._header = compiled

    @property
    def exhausted(self) -> bool:
        return self.times is not None and self.hits >= self.times

    def matches(self, request: GenerationRequest) -> bool:
        if self.exhausted:
            return False
        if self.model is not None and request.model != self.model:
            return False
        if self.api is not None and request.api != self.api and not request.api.endswith("." + self.api):
            return False
        if self.tool is not None and (request.tool_use is None or request.tool_use.named(self.tool) is None):
            return False
        if self.turn is not None and sum(m.role == "user" for m in request.messages) != self.turn:
            return False
        if self._tool_result is not None and not _latest_matches(request, "tool", self._tool_result):
            return False
        if self._previous is not None and not _latest_matches(request, "assistant", self._previous):
            return False
        if self._header is not None:
            value = (request.headers or {}).get(self._header_name)
            if value is None or self._header.search(value) is None:
                return False
        return self._pattern is None or self._pattern.search(request.prompt_text()) is not None

    def take(self) -> Reply:
        """The reply for the next match (call holding the script's lock; a rule with fixed replies)."""
        reply = self.replies[self.hits % len(self.replies)]
        self.hits += 1
        return reply

    def answer_for(self, request: GenerationRequest) -> Reply | None:
        """What this rule's callable answers ``request`` (call without the script's lock: the callable is the
        test's code, and may be slow or ask the backend things); TypeError names a return that is no reply."""
        assert self.answer is not None
        result = self.answer(request)
        if result is None:
            return None
        try:
            return normalize_reply(result)
        except TypeError as error:
            raise TypeError(f"rule {self.name!r}: its callable returned no reply ({error})") from None

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {key: getattr(self, key) for key in ("name", *MATCHERS, "times")
                                if getattr(self, key) not in (None, "")}
        data["replies"] = [reply_to_json(reply) for reply in self.replies]
        if self.answer is not None:
            data["callable"] = _callable_name(self.answer)
        data["hits"] = self.hits
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Rule:
        """A rule from its JSON (or TOML) table: matchers, ``times``, ``name``, and ``reply`` or ``replies``
        (or the reply's own keys inline: ``text = "..."``); ValueError says what is wrong."""
        if not isinstance(data, Mapping):
            raise ValueError(f"a rule is an object, not {data!r}")
        known = {"name", *MATCHERS, "times", "reply", "replies", "hits",
                 "text", "json", "tool_call", "tool_calls", "error", "callable"}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown rule key(s) {', '.join(unknown)}; accepted: {', '.join(sorted(known))}")
        inline = {key: data[key] for key in ("text", "json", "tool_call", "tool_calls", "error") if key in data}
        matchers: dict[str, Any] = {key: data.get(key) for key in MATCHERS}
        if data.get("callable") and not data.get("replies"):  # listed by a backend in another process
            return cls((), **matchers, times=data.get("times"), name=str(data.get("name") or ""),
                       hits=int(data.get("hits") or 0), answer=_CallableElsewhere(str(data["callable"])))
        if "replies" in data:
            raw = data["replies"]
            if not isinstance(raw, list):
                raise ValueError("'replies' must be a list")
        elif "reply" in data:
            raw = [data["reply"]]
        elif inline:
            raw = [inline]
        else:
            raise ValueError("a rule needs a reply: 'reply', 'replies', or one of text/json/tool_call(s)/error")
        try:
            return cls(tuple(reply_from_json(item) for item in raw), **matchers, times=data.get("times"),
                       name=str(data.get("name") or ""))
        except TypeError as error:
            raise ValueError(str(error)) from None


def _latest_matches(request: GenerationRequest, role: str, pattern: Pattern) -> bool:
    """Whether the conversation's latest ``role`` message (a tool result, the assistant's) matches ``pattern``."""
    latest = next((message for message in reversed(request.messages) if message.role == role), None)
    return latest is not None and pattern.search(latest.content) is not None


def _callable_name(function: Callable[..., Any]) -> str:
    """How a rule's callable is listed: its qualified name (a partial or an object: its repr)."""
    try:
        return str(function.__qualname__)
    except AttributeError:
        return repr(function)


class _CallableElsewhere:
    """A rule's callable as another process lists it: its name; calling it here is a mistake."""

    def __init__(self, name: str) -> None:
        self.__qualname__ = name

    def __call__(self, request: GenerationRequest) -> Any:
        raise TypeError(f"the callable {self.__qualname__!r} runs in the backend's own process, not this one")


class RuleBuilder:
    """``backend.on(prompt=..., ...)``: say what to answer with :meth:`reply`."""

    def __init__(self, add: Callable[[Rule], Rule], **matchers: Any) -> None:
        self._add = add
        self._matchers = {key: value for key, value in matchers.items() if value is not None}

    def reply(self, *replies: Any, times: int | None = None, name: str = "") -> Rule:
        """Answer matching requests with ``replies`` (in turn), for ever or ``times`` times; or, given one
        callable, with what it returns for each request (see :attr:`Rule.answer`)."""
        if len(replies) == 1 and callable(replies[0]):
            return self._add(Rule((), **self._matchers, times=times, name=name, answer=replies[0]))
        return self._add(Rule(tuple(replies), **self._matchers, times=times, name=name))


class ScriptFull(ValueError):
    """A reply or rule past the script's bounds (``max_queued_replies``, ``max_rules``, ``max_script_bytes``)."""


def _reply_size(reply: Reply) -> int:
    return len(json.dumps(reply_to_json(reply), default=str))


class Script:
    """A backend's scripted replies (a queue) and rules, safe to use from handler threads.

    Bounded, as anything a client can fill over the control API is: at most ``max_replies``
    queued replies, ``max_rules`` rules, and ``max_bytes`` of their JSON in all; past a bound,
    :class:`ScriptFull` names it and nothing is added.
    """

    def __init__(self, max_replies: int = 10_000, max_rules: int = 1_000, max_bytes: int = 16 * 1024 * 1024) -> None:
        self._lock = threading.Lock()
        self._queue: deque[tuple[Reply, int]] = deque()
        self._rules: list[tuple[Rule, int]] = []
        self._numbers = itertools.count(1)
        self.max_replies, self.max_rules, self.max_bytes = max_replies, max_rules, max_bytes
        self.total_bytes = 0

    def queue(self, replies: Iterable[Any]) -> None:
        checked = [normalize_reply(reply) for reply in replies]
        sizes = [_reply_size(reply) for reply in checked]
        with self._lock:
            if len(self._queue) + len(checked) > self.max_replies:
                raise ScriptFull(f"{len(self._queue) + len(checked):,} queued replies would pass max_queued_replies "
                                 f"({self.max_replies:,})")
            self._check_bytes(sum(sizes))
            self._queue.extend(zip(checked, sizes))
            self.total_bytes += sum(sizes)

    def add_rule(self, rule: Rule) -> Rule:
        size = len(json.dumps(rule.to_json(), default=str))
        with self._lock:
            if len(self._rules) >= self.max_rules:
                raise ScriptFull(f"a rule past max_rules ({self.max_rules:,})")
            self._check_bytes(size)
            if not rule.name:
                rule.name = f"rule-{next(self._numbers)}"
            self._rules.append((rule, size))
            self.total_bytes += size
        return rule

    def _check_bytes(self, size: int) -> None:
        if self.total_bytes + size > self.max_bytes:
            raise ScriptFull(f"{self.total_bytes + size:,} bytes of scripted replies and rules would pass "
                             f"max_script_bytes ({self.max_bytes:,})")

    @property
    def rules(self) -> list[Rule]:
        with self._lock:
            return [rule for rule, _ in self._rules]

    def clear(self) -> None:
        with self._lock:
            self._queue.clear()
            self._rules.clear()
            self.total_bytes = 0
            self._numbers = itertools.count(1)

    def clear_rules(self) -> None:
        """Forget every rule (queued replies stay)."""
        with self._lock:
            self.total_bytes -= sum(size for _, size in self._rules)
            self._rules.clear()

    def next_reply(self, request: GenerationRequest) -> tuple[Reply | None, str | None]:
        """The reply for ``request`` and the name of the rule that gave it (None: the queue, or nothing)."""
        with self._lock:
            for rule, _ in self._rules:
                if rule.matches(request):
                    if rule.answer is None:
                        return rule.take(), rule.name
                    rule.hits += 1
                    break
            else:
                if not self._queue:
                    return None, None
                reply, size = self._queue.popleft()
                self.total_bytes -= size
                return reply, None
        return rule.answer_for(request), rule.name  # a callable's: run outside the lock


def load_conversation(path: str | Path) -> list[Rule]:
    """Rules that replay a recorded conversation: one per JSONL line.

    Each line is ``{"messages": [...], "reply": ...}`` (or ``{"request":
    {"messages": [...]}, "reply": ...}``, as a gateway's log keeps it): the
    request whose last user message is the recorded one gets the recorded
    reply (any reply form; an OpenAI assistant message with ``content`` or
    ``tool_calls`` is read too).
    """
    rules = []
    for number, line in enumerate(Path(path).read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
            messages = (entry.get("request") or entry)["messages"]
            users = [m for m in messages if m.get("role") == "user"]
            text = users[-1]["content"] if users else messages[-1]["content"]
            if not isinstance(text, str):
                text = "".join(part.get("text", "") for part in text if isinstance(part, dict))
            rules.append(Rule((_recorded_reply(entry["reply"]),), prompt=f"\\A{escape_pattern(text)}\\z",
                              name=f"{Path(path).name}:{number}"))
        except (ValueError, KeyError, TypeError, AttributeError, IndexError) as error:
            raise ValueError(f"{path}, line {number}: not a recorded exchange ({error})") from None
    return rules


def _recorded_reply(reply: Any) -> Reply:
    if isinstance(reply, dict) and "role" in reply:  # an assistant message as the API returned it
        if reply.get("tool_calls"):
            return [ToolCall(call["function"]["name"], call["function"].get("arguments") or "{}")
                    for call in reply["tool_calls"]]
        return str(reply.get("content") or "")
    return reply_from_json(reply)
