"""Plan one choice's answer: scripted, tool calls, JSON from a schema, echo, or seeded filler.

In that order: a scripted reply (queued or from a rule) wins; then, when
the request offers tools, the tool rules of :mod:`.tools`; then structured
output; then the backend's ``output`` setting (echo or filler).

Budgets. An answer the model ends itself (a tool call's arguments, a JSON
instance) is not cut by the backend's ``default_max_tokens`` when the
request set no limit: only by the context room, as a real server does. A
limit the request set cuts it like any answer: ``finish_reason`` ``length``
and a prefix of the text.
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..sim.request import ReasoningAsk, SimError, ToolSpec, invalid
from ..sim.tokens import FillerSource, PlannedCall, PlannedOutput, Tokenizer
from .replies import ErrorReply, Reply, ToolCall
from .schema import SchemaError, SchemaTooLarge, generate_instance
from .tools import NO_ARGUMENTS, choose_tools

if TYPE_CHECKING:
    from ..sim import GenerationRequest
    from ..sim.config import SimConfig

__all__ = ["MAX_CHARS_PER_TOKEN", "REASONING_TOKENS", "ContentPlanner"]

#: Typical thinking length per reasoning effort (a seeded length between half and all of it); Anthropic's
#: budget_tokens caps it.
REASONING_TOKENS = {"none": 0, "minimal": 16, "low": 64, "medium": 192, "high": 512, "xhigh": 1024, "max": 1024}
_REASONING_SALT = 0x5EA50
_SERVED_SALT = 0x5E4FED  # the answer after a server tool's result draws apart from the call

#: A generated JSON answer may take this many characters per token of its budget: a token of JSON is
#: rarely longer than a few characters, so an instance past it could never be sent whole or cut as built.
MAX_CHARS_PER_TOKEN = 32


def _compact(value: object) -> str:
    return json.dumps(value, separators=(",", ":"))


class ContentPlanner:
    """Turns a request (and the script's reply for it) into each choice's :class:`PlannedOutput`."""

    def __init__(self, tokenizer: Tokenizer, filler: FillerSource, config: SimConfig) -> None:
        self.tokenizer = tokenizer
        self.filler = filler
        self.config = config

    def plan(self, request: GenerationRequest, key: int, reply: Reply | None, echo: list[int] | None,
             budget: int, room: int) -> PlannedOutput:
        """One choice's answer. ``key`` seeds it; ``budget`` is its max_tokens (the request's, or the
        default); ``room`` is what the context has left; ``echo`` is the echoed prompt's tokens, in echo mode.

        Raises :class:`SimError` for a scripted error reply or a schema no instance satisfies.
        """
        if isinstance(reply, ErrorReply):
            raise SimError(reply.status, reply.message, type=reply.type or _error_type(reply.status),
                           code=reply.code)
        if request.kind == "embedding":
            return PlannedOutput([], [], "stop")  # nothing is generated: the answer is the vectors
        if request.reasoning is None:
            return self._answer(request, key, reply, echo, budget, room)
        thinking = self._reasoning_length(request.reasoning, key)
        if request.max_tokens is None:  # no limit set: the thinking comes on top of the default answer
            thinking = min(thinking, max(0, room - budget))
            budget += thinking
        thinking = min(thinking, budget)
        if thinking >= budget:  # the thinking took all of max_tokens: no answer, cut
            answer = PlannedOutput([], [], "length")
        else:
            answer = self._answer(request, key, reply, echo, budget - thinking, room - thinking)
        tokens, pieces = self.filler.take(key ^ _REASONING_SALT, thinking)
        return answer.with_reasoning(tokens, pieces)

    @staticmethod
    def _reasoning_length(ask: ReasoningAsk, key: int) -> int:
        """Seeded thinking length: between half and all of the effort's typical length (a budget caps it)."""
        typical = REASONING_TOKENS.get(ask.effort, REASONING_TOKENS["medium"])
        if ask.budget is not None:
            typical = min(typical, ask.budget)
        if typical <= 0:
            return 0
        return typical // 2 + (key >> 12) % (typical - typical // 2 + 1)

    def _answer(self, request: GenerationRequest, key: int, reply: Reply | None, echo: list[int] | None,
                budget: int, room: int) -> PlannedOutput:
        """The answer proper (after any thinking)."""
        limit = budget if request.max_tokens is not None else room  # a model-ended answer: only the room
        if isinstance(reply, (ToolCall, list)):
            calls = [reply] if isinstance(reply, ToolCall) else reply
            return self._calls([(call.name, call.arguments_text) for call in calls], limit, request)
        if isinstance(reply, dict):
            return self.tokenizer.plan(self.tokenizer.encode(_compact(reply)), limit, request.stops)
        if isinstance(reply, str):
            return self.tokenizer.plan(self.tokenizer.encode(reply), budget, request.stops)
        if request.tool_use is not None or request.output_format is not None:
            structured = self._structured(request, key, limit, budget)
            if structured is not None:
                return structured
        if echo is not None:
            return self.tokenizer.plan(echo, budget, request.stops)
        return self._filler(request, key, budget)

    def _structured(self, request: GenerationRequest, key: int, limit: int, budget: int,
                    served: bool = False) -> PlannedOutput | None:
        """Tool calls, or JSON for a requested format, seeded by ``key``; None when the tool rules say text.

        A server tool's call (``ToolSpec.server``) is followed by the answer, planned here again with the
        tokens left and no more tools (``served``): one round of server tools per reply.
        """
        rng = random.Random(key)  # only built here: plain answers draw nothing from it
        max_chars = MAX_CHARS_PER_TOKEN * limit + 256  # past this, no cut of the answer is what it would be
        rate = self.config.optional_property_rate
        where = ""
        try:
            tools = [] if served else choose_tools(request.tool_use, request.after_tool_result, rng,
                                                   self.config.tool_call_rate, self.config.tool_calls_per_reply)
            client_tools = [tool for tool in tools if tool.server is None]
            if tools and not client_tools:  # only server tools: the backend runs them, then answers
                return self._after_server_tools(request, key, tools[:1], rng, limit, budget)
            if client_tools:
                calls = []
                for tool in client_tools:
                    where = f"tool {tool.name!r}: "
                    calls.append((tool.name, _compact(generate_instance(tool.parameters or NO_ARGUMENTS, rng,
                                                                        max_chars, rate))))
                return self._calls(calls, limit, request)
            output_format = request.output_format
            if output_format is not None:
                schema = output_format.schema if output_format.kind == "json_schema" else _ANY_OBJECT
                text = _compact(generate_instance(schema, rng, max_chars, rate))
                return self.tokenizer.plan(self.tokenizer.encode(text), limit, request.stops)
        except SchemaError as error:
            room = (f" ({request.max_tokens_param}={limit} tokens)" if request.max_tokens is not None
                    else f" ({limit} tokens of context left)")
            raise invalid(f"pytest-llmsim cannot generate an instance of the schema: {where}{error}"
                          f"{room if isinstance(error, SchemaTooLarge) else ''}",
                          "tools" if request.tool_use else "response_format", "invalid_schema") from None
        return None

    def _after_server_tools(self, request: GenerationRequest, key: int, tools: list[ToolSpec], rng: random.Random,
                            limit: int, budget: int) -> PlannedOutput:
        """The server tools' calls, then the answer in the tokens left (cut: no answer)."""
        max_chars = MAX_CHARS_PER_TOKEN * limit + 256
        served = self._calls([(tool.name, _compact(generate_instance(tool.parameters, rng, max_chars, 1.0)))
                              for tool in tools], limit)
        if served.finish_reason == "length":
            return PlannedOutput(served.tokens, served.pieces, "length", served=served.calls)
        used = served.length
        answer = self._structured(request, key ^ _SERVED_SALT, limit - used, budget - used, served=True)
        if answer is None:
            answer = self._filler(request, key ^ _SERVED_SALT, max(0, budget - used))
        return answer.after_served(served)

    def _calls(self, calls: Sequence[tuple[str, str]], limit: int,
               request: GenerationRequest | None = None) -> PlannedOutput:
        """Tool calls whose arguments are the answer's tokens, cut at ``limit`` tokens; broken as the
        ``request``'s ``bad_tool_call`` fault says, if it has one."""
        breaks = request.tool_call_fault if request is not None else None
        if breaks is not None:
            offered = {tool.name for tool in request.tool_use.tools} if request and request.tool_use else set()
            calls = _broken(list(calls), breaks, offered)
        tokens: list[int] = []
        pieces: list[str] = []
        planned: list[PlannedCall] = []
        finish = "tool_calls"
        for name, arguments in calls:
            ids = self.tokenizer.encode(arguments) or self.tokenizer.encode("{}")
            if len(tokens) + len(ids) > limit:
                ids, finish = ids[:limit - len(tokens)], "length"
                if not ids:
                    break
            call_pieces = self.tokenizer.pieces(ids)
            start = len(tokens)
            tokens.extend(ids)
            pieces.extend(call_pieces)
            key = planned[0].key if breaks == "id" and planned else os.urandom(12).hex()  # "id": one for all
            planned.append(PlannedCall(key, name, "".join(call_pieces), start, len(tokens)))
            if finish == "length":
                break
        return PlannedOutput(tokens, pieces, finish, calls=tuple(planned))

    def _filler(self, request: GenerationRequest, key: int, max_tokens: int) -> PlannedOutput:
        wanted = self.config.answer_length
        cap = self.config.natural_answer_cap
        if wanted is None and cap and max_tokens > cap and not request.run_to_limit:
            # A client's large default (64,000) is a ceiling, not a wish: the model stops on its own.
            length = cap // 2 + (key >> 8) % (cap - cap // 2 + 1)
        elif wanted is None:
            length = max_tokens
        elif isinstance(wanted, int):
            length = wanted
        else:
            low, high = wanted
            length = low + (key >> 8) % (high - low + 1)
        tokens, pieces = self.filler.output(key, min(length, max_tokens))
        # Only a limit the request set itself ends an answer with "length"; with none,
        # the default budget is where the simulated model chose to stop.
        natural = length < max_tokens or request.max_tokens is None
        return self.tokenizer.plan(tokens, max_tokens, request.stops, natural_end=natural, pieces=pieces)


_ANY_OBJECT = {"type": "object", "properties": {"answer": {"type": "string"}, "confidence": {"type": "number",
               "minimum": 0, "maximum": 1}}, "required": ["answer"]}


def _broken(calls: list[tuple[str, str]], breaks: str, offered: set[str]) -> list[tuple[str, str]]:
    """``calls`` (name, arguments) as a ``bad_tool_call`` fault leaves them (``id`` is made in ``_calls``)."""
    if breaks == "arguments":  # cut mid-JSON
        return [(name, arguments[:max(1, len(arguments) // 2)]) for name, arguments in calls]
    if breaks == "schema":  # none of the schema's properties, and one it does not define
        return [(name, _UNEXPECTED_ARGUMENTS) for name, _ in calls]
    if breaks == "name":  # a tool the request did not offer
        renamed = []
        for name, arguments in calls:
            unoffered = f"{name}_not_offered"
            while unoffered in offered:
                unoffered += "_"
            renamed.append((unoffered, arguments))
        return renamed
    return calls + calls[:1] if len(calls) == 1 else calls  # "id": two calls at least, to share one id


_UNEXPECTED_ARGUMENTS = '{"pytest_llmsim_unexpected":true}'


def _error_type(status: int) -> str:
    if status == 429:
        return "requests"
    return "server_error" if status >= 500 else "invalid_request_error"
