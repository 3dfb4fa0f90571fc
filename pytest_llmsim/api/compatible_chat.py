"""OpenAI-compatible providers' chat completions: OpenAI's wire format with each provider's own fields, usage,
reasoning, extras and errors, and the dispatch of a path several providers share.

A provider (:mod:`.chat_providers`) subclasses :class:`ProviderChat` and says what differs from OpenAI's chat:
its field table (``fields``; ``strict``: refuse a field it does not define, as Mistral does), how it shows
a reasoning model's thinking (a message field, ``<think>`` tags in the content, or not at all), where a stream
carries usage (``usage_in_stream``), its usage object, what its answers and chunks carry besides (``extras``,
``chunk_extras``) and its error body. Everything else (messages, tools, structured output, logprobs, faults,
latency) is OpenAI's chat, unchanged.

Several providers are served on OpenAI's own path (Mistral, Together, DeepSeek and xAI all answer
``/v1/chat/completions``): :class:`ChatByProvider` reads the body's model name and the fields only one
provider defines, parses with that provider's rules and hands the request to it
(:meth:`~.base.WireAPI.answered_by`); a request header ``x-llmsim-provider: NAME`` (a guarded route) settles it
whatever the body says.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from ..sim import GenerationRequest, RateLimitStatus, SimError, invalid
from ..sim.request import ReasoningAsk
from .base import NO_TARGET, RequestTarget, WireAPI
from .field_policy import FieldPolicy
from .openai_chat import CHAT_FIELDS, ChatStream, OpenAIChat, parse_chat
from .openai_chat import call_id as openai_call_id
from .openai_common import DONE, envelope, generation_usage, openai_error_body, sse
from .routing import Guard

if TYPE_CHECKING:
    from ..sim.generation import Generation
    from ..sim.tokens import PlannedCall

__all__ = ["PROVIDER_HEADER", "ChatByProvider", "ProviderChat", "ProviderStream", "chat_fields", "provider_guard"]

#: The request header that names the provider a shared path's request is for, whatever its body says.
PROVIDER_HEADER = "x-llmsim-provider"
_PROVIDER_ENVIRON = "HTTP_" + PROVIDER_HEADER.upper().replace("-", "_")
MODELS_REMEMBERED = 1024  # model names whose provider a shared path remembers (a test's few, a fuzzer's many)

#: Where a reasoning model's thinking goes: a message (and delta) field of that name, ``<think>`` tags at the
#: start of the content, or nowhere (it only takes its time, as on OpenAI's chat).
Shown = str | None
TAGS = "<think>"


def chat_fields(honoured: Iterable[str] = (), no_effect: Iterable[str] = (), refused: Mapping[str, str] | None = None,
                without: Iterable[str] = ()) -> FieldPolicy:
    """OpenAI chat's field table with a provider's own fields added (and ``without``: OpenAI's it does not define)."""
    gone = set(without)
    return FieldPolicy.of([*(CHAT_FIELDS.honoured - gone), *honoured], [*(CHAT_FIELDS.no_effect - gone), *no_effect],
                          {**{k: v for k, v in CHAT_FIELDS.refused.items() if k not in gone}, **(refused or {})})


def provider_guard(name: str) -> Guard:
    """A route guard: the request's ``x-llmsim-provider`` header names ``name``."""
    def names_provider(environ: dict[str, Any]) -> bool:
        value = environ.get(_PROVIDER_ENVIRON)  # asked of every request on the path: None at once, mostly
        return value is not None and value.strip().lower() == name
    names_provider.__name__ = f"names_{name}"
    return names_provider


class ProviderChat(OpenAIChat):
    """OpenAI's chat as one OpenAI-compatible provider serves it (a subclass per provider says what differs)."""

    provider: ClassVar[str]  # its name in x-llmsim-provider and the docs, e.g. "mistral"
    fields: ClassVar[FieldPolicy] = CHAT_FIELDS
    strict: ClassVar[bool] = False  # refuse a top-level field the provider does not define
    #: Model names (prefixes) that are this provider's on a path it shares, and fields only its requests carry.
    models: ClassVar[tuple[str, ...]] = ()
    marks: ClassVar[frozenset[str]] = frozenset()
    #: Where a streamed answer carries usage: "asked" (OpenAI's: a last chunk, when stream_options asks), "finish"
    #: (on the last choice's finish chunk, always), "always" (OpenAI's last chunk, asked or not).
    usage_in_stream: ClassVar[Literal["asked", "finish", "always"]] = "asked"
    role_in_deltas: ClassVar[bool] = False  # every delta names its role (Together's SDK requires it)
    #: OpenAI's fields the provider reads its own way in :meth:`read` (other values), kept from OpenAI's checks.
    own: ClassVar[frozenset[str]] = frozenset()

    def __init__(self) -> None:
        self.name = f"{self.provider}.chat"

    # --- what a subclass says ---

    def claims(self, model: str) -> bool:
        """Whether ``model`` (lower-cased) names one of this provider's models, on a path it shares."""
        return model.startswith(self.models) if self.models else False

    def read(self, body: dict[str, Any], request: GenerationRequest) -> None:
        """The provider's own fields, read into ``request`` (after OpenAI's are checked); raise for a bad one."""

    def shown(self, request: GenerationRequest) -> Shown:
        """Where this request's thinking is shown (see :data:`Shown`): nowhere by default."""
        return None

    def usage(self, generation: Generation) -> dict[str, Any]:
        """The answer's usage object."""
        return generation_usage(generation)

    def extras(self, generation: Generation, response_id: str) -> dict[str, Any]:
        """Top-level fields a whole answer carries besides OpenAI's."""
        return {}

    def chunk_extras(self, generation: Generation, response_id: str, first: bool, last: bool) -> dict[str, Any]:
        """Top-level fields a stream chunk carries besides OpenAI's (``first``: the opening chunk; ``last``: the
        last choice's finish chunk)."""
        return {}

    def choice_extras(self) -> dict[str, Any]:
        """Fields every choice (whole or streamed) carries besides OpenAI's."""
        return {}

    def call_id(self, call: PlannedCall) -> str:
        """A tool call's id as the provider makes them (OpenAI's ``call_...`` by default)."""
        return openai_call_id(call)

    def error_body(self, error: SimError) -> dict[str, Any]:
        """The provider's error body (OpenAI's by default)."""
        return openai_error_body(error)

    def unknown_field(self, name: str, value: Any) -> SimError:
        """The refusal of a field the provider does not define (only when :attr:`strict`)."""
        return invalid(f"Unrecognized request argument supplied: {name}", name, "unknown_parameter")

    # --- OpenAI's chat, reshaped ---

    def parse(self, body: Any, target: RequestTarget = NO_TARGET) -> GenerationRequest:
        openai_body = body
        if self.own and isinstance(body, dict) and not self.own.isdisjoint(body):
            openai_body = {key: value for key, value in body.items() if key not in self.own}
        request = parse_chat(openai_body, self.fields)
        if self.strict and request.ignored_fields:
            name = request.ignored_fields[0]
            raise self.unknown_field(name, body[name])
        self.read(body, request)
        request.wire["shown"] = self.shown(request) if request.reasoning is not None else None
        return request

    def response_body(self, generation: Generation, response_id: str) -> dict[str, Any]:
        body = super().response_body(generation, response_id)
        shown = generation.request.wire.get("shown")
        extra = self.choice_extras()
        for choice, output in zip(body["choices"], generation.outputs):
            message = choice["message"]
            if shown == TAGS and output.reasoning and not output.calls:
                message["content"] = f"<think>{output.reasoning_text}</think>{message['content'] or ''}"
            elif shown and output.reasoning:
                message[shown] = output.reasoning_text
            for entry, call in zip(message.get("tool_calls") or (), output.calls):
                entry["id"] = self.call_id(call)
            choice.update(extra)
        body["usage"] = self.usage(generation)
        body.update(self.extras(generation, response_id))
        return body

    def stream(self, generation: Generation, response_id: str) -> ProviderStream:
        return ProviderStream(self, generation, response_id)

    def render_error(self, error: SimError) -> tuple[int, dict[str, Any], dict[str, str]]:
        headers = error.headers
        if error.rate_limit is not None:
            headers = {**headers, **self.rate_limit_headers(error.rate_limit)}
        return error.status, self.error_body(error), headers


def reasoning_effort(body: dict[str, Any], param: str, efforts: Sequence[str]) -> ReasoningAsk | None:
    """A ``reasoning_effort``-like field: one of ``efforts``, asking for thinking of that length."""
    effort = body.get(param)
    if effort is None:
        return None
    if effort not in efforts:
        raise invalid(f"Invalid value for '{param}': {effort!r}; expected one of {', '.join(efforts)}.", param,
                      "invalid_value")
    return ReasoningAsk(effort="medium" if effort in ("default", "auto") else effort, param=param)


class ProviderStream(ChatStream):
    """OpenAI's chat stream with a provider's thinking, usage placement and extras."""

    def __init__(self, api: ProviderChat, generation: Generation, response_id: str) -> None:
        role = {"role": "assistant"} if api.role_in_deltas else {}
        choice_extra = api.choice_extras()

        def choice(index: int, text: str, finish: str | None) -> dict[str, Any]:
            delta = {**role, "content": text} if finish is None else dict(role)
            return {"index": index, "delta": delta, "finish_reason": finish, **choice_extra}

        super().__init__(generation, response_id, "chat.completion.chunk", choice)
        self._api = api
        self._shown = generation.request.wire.get("shown")
        self._finished = 0
        self._first = True
        if api.usage_in_stream == "always":
            self._usage = True

    def event(self, choice: dict[str, Any] | None, usage: dict[str, Any] | None = None, last: bool = False) -> bytes:
        body = envelope(self._id, self._obj, self._model, self._created)
        body["choices"] = [] if choice is None else [{"logprobs": None, **choice}]
        if self._usage or usage is not None:
            body["usage"] = usage
        first, self._first = self._first, False
        body.update(self._api.chunk_extras(self._generation, self._id, first, last))
        return sse(body)

    def token(self, index: int, position: int, piece: str) -> bytes:
        output = self._generation.outputs[index]
        if position < output.reasoning:
            shown = self._shown
            if not shown:
                return b""
            if shown == TAGS:
                text = ("<think>" if position == 0 else "") + piece + (
                    "</think>" if position == output.reasoning - 1 else "")
                return self.event(self._choice(index, text, None))
            choice = self._choice(index, "", None)
            choice["delta"] = {**{k: v for k, v in choice["delta"].items() if k != "content"}, shown: piece}
            return self.event(choice)
        return super().token(index, position, piece)

    def token_choice(self, index: int, position: int, piece: str) -> dict[str, Any]:
        choice = super().token_choice(index, position, piece)
        calls = choice["delta"].get("tool_calls")
        if calls and "id" in calls[0]:  # a call's first fragment names it
            calls[0]["id"] = self._api.call_id(self._generation.outputs[index].call_at(position)[1])
        return choice

    def finish(self, index: int) -> bytes:
        self._finished += 1
        last = self._finished == len(self._generation.outputs)
        usage = self._api.usage(self._generation) if last and self._api.usage_in_stream == "finish" else None
        return self.event(self._choice(index, "", self._generation.outputs[index].finish_reason), usage, last)

    def closing(self) -> bytes:
        if self._usage and self._api.usage_in_stream != "finish":
            return self.event(None, self._api.usage(self._generation)) + DONE
        return DONE

    def error(self, error: SimError) -> bytes:
        return sse(self._api.error_body(error))


class ChatByProvider(WireAPI):
    """A chat path several providers share: the body's model name (or a field only one provider defines) says
    whose rules parse it and who answers; anything else is ``default``'s (OpenAI's chat, Azure's)."""

    def __init__(self, default: WireAPI, providers: Sequence[ProviderChat]) -> None:
        self._default = default
        self._providers = tuple(providers)
        self._marks = tuple((mark, api) for api in providers for mark in api.marks)
        self._any_mark = frozenset(mark for mark, _ in self._marks)
        self._by_model: dict[str, WireAPI] = {}  # model name -> whose it is (bounded: MODELS_REMEMBERED)
        self.name = default.name
        self.id_prefix = default.id_prefix
        self.request_id_header = default.request_id_header

    def provider_of(self, body: Any) -> WireAPI:
        """The provider whose request ``body`` is (``default`` when no model name or field says)."""
        if type(body) is not dict:
            return self._default
        model = body.get("model")
        if type(model) is str:
            known = self._by_model.get(model)
            if known is None:
                lowered = model.lower()
                known = next((api for api in self._providers if api.claims(lowered)), self._default)
                if len(self._by_model) < MODELS_REMEMBERED:
                    self._by_model[model] = known
            if known is not self._default:
                return known
        if not self._any_mark.isdisjoint(body):  # most bodies carry none of the providers' own fields
            for mark, api in self._marks:
                if mark in body:
                    return api
        return self._default

    def answered_by(self, body: Any, target: RequestTarget) -> WireAPI:
        return self.provider_of(body)

    def parse(self, body: Any, target: RequestTarget = NO_TARGET) -> GenerationRequest:
        return self.provider_of(body).parse(body, target)

    # the default's answers (the server hands a request to the API answered_by() names; these are for errors
    # raised before the body was read, as a wrong key)
    def response_body(self, generation: Generation, response_id: str) -> dict[str, Any]:
        return self._default.response_body(generation, response_id)

    def stream(self, generation: Generation, response_id: str) -> Any:
        return self._default.stream(generation, response_id)

    def rate_limit_headers(self, status: RateLimitStatus) -> dict[str, str]:
        return self._default.rate_limit_headers(status)

    def render_error(self, error: SimError) -> tuple[int, dict[str, Any], dict[str, str]]:
        return self._default.render_error(error)

    def new_request_id(self) -> str:
        return self._default.new_request_id()

    def answer_headers(self) -> dict[str, str]:
        return self._default.answer_headers()

    def content_filter(self, message: str, prompt: bool) -> SimError | None:
        return self._default.content_filter(message, prompt)
