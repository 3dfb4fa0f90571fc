"""The shared request model and the protocol-blind error.

Every wire API parses its body into a :class:`GenerationRequest`; the
simulator plans, schedules and accounts it without asking which API it came
from. Anything the simulator refuses is a :class:`SimError`, which each API
renders in its own error shape.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .context_edits import AppliedEdit, ContextEdit
from .tokens import ChatMessage

__all__ = ["ChatMessage", "GenerationRequest", "OutputFormat", "RateLimitStatus", "ReasoningAsk", "SimError",
           "ToolSpec", "ToolUse", "invalid"]


@dataclass(frozen=True)
class RateLimitStatus:
    """Where a request left the simulated rate limits; each API renders it as its own headers.

    ``None`` limits are not set. ``reset`` is wall seconds until the window
    frees up (the speed factor applied).
    """

    rpm: int | None
    tpm: int | None
    requests_remaining: int
    tokens_remaining: int
    reset: float


class SimError(Exception):
    """A refusal, protocol-blind: an HTTP status and what went wrong.

    ``type`` is the error's category in OpenAI's vocabulary
    (``invalid_request_error``, ``server_error``, ``requests``, ``tokens``);
    adapters of other APIs map the status (and this category) onto their own.
    ``param`` names the offending field, ``code`` is a stable machine-readable
    reason, and ``headers`` go out with the answer (``Retry-After``);
    ``rate_limit``, for a 429 of the simulated limits, is rendered by the API
    as its rate-limit headers. ``details`` holds the figures of a limit
    (``model``, ``requested``, ``maximum``...) for APIs that word it their own way.
    """

    def __init__(self, status: int, message: str, *, type: str = "invalid_request_error",
                 param: str | None = None, code: str | None = None,
                 headers: Mapping[str, str] | None = None, rate_limit: RateLimitStatus | None = None,
                 details: Mapping[str, Any] | None = None) -> None:
        super().__init__(message)
        self.details = dict(details or {})
        self.rate_limit = rate_limit
        self.status = status
        self.message = message
        self.type = type
        self.param = param
        self.code = code
        self.headers = dict(headers or {})

    def fields(self) -> dict[str, Any]:
        """``message``, ``type``, ``param`` and ``code``, as the request log keeps them."""
        return {"message": self.message, "type": self.type, "param": self.param, "code": self.code}


def invalid(message: str, param: str | None, code: str | None = None) -> SimError:
    """A 400 for bad input, naming the field."""
    return SimError(400, message, param=param, code=code)


@dataclass(frozen=True)
class ToolSpec:
    """A function the request offers: its name and the JSON Schema of its arguments.

    ``param`` names the schema's field for errors; the schema is checked against its
    metaschema by :func:`check_schemas`, after the request's cheap limits (its length).
    """

    name: str
    parameters: dict[str, Any]
    param: str = "tools"
    # A tool the backend runs itself (a provider's server tool): its API's options for rendering the result;
    # the reply shows the call and its result, then goes on to answer (None: the client runs it).
    server: dict[str, Any] | None = None


@dataclass(frozen=True)
class ToolUse:
    """The tools a request offers and how it lets the model use them.

    ``choice`` is ``"none"``, ``"auto"``, ``"required"`` or ``"function"``
    (then ``function`` names the one to call).
    """

    tools: tuple[ToolSpec, ...]
    choice: str = "auto"
    function: str | None = None
    parallel: bool = True

    def named(self, name: object) -> ToolSpec | None:
        return next((tool for tool in self.tools if tool.name == name), None)


@dataclass(frozen=True)
class OutputFormat:
    """A structured-output request: ``kind`` ``json_object`` (any object) or ``json_schema``."""

    kind: str
    schema: dict[str, Any] | None = None
    name: str | None = None
    param: str = "response_format"


@dataclass(frozen=True)
class ReasoningAsk:
    """A request for a reasoning model's thinking: ``budget`` tokens at most (Anthropic's ``budget_tokens``),
    or an ``effort`` (``minimal``, ``low``, ``medium``, ``high``) that sets a typical length; ``param`` names
    the field that asked, for errors."""

    effort: str = "medium"
    budget: int | None = None
    param: str = "reasoning"


@dataclass(slots=True)
class GenerationRequest:
    """A validated generation request, reduced to what the simulation uses.

    ``kind`` says how the prompt is given: ``"chat"`` (``messages``, counted
    with chat framing) or ``"completion"`` (``prompts``: text or token ids,
    one sequence per prompt and choice). ``max_tokens`` is None when the
    request set no limit; ``max_tokens_param`` names the field that set it,
    for error messages. ``prompt_defaulted`` means the prompt is the
    document separator token (a completions ``prompt: null``).
    ``cache_breakpoint``: the request marks its first that many messages as
    a cacheable prefix (Anthropic's ``cache_control``); APIs that report
    cache use only for a marked prefix read it. ``previous_id``: the stored
    exchange this request continues (its messages go first; ``previous_param``
    names the field that asked, ``cache_continued`` marks those messages as
    the cached prefix, as Gemini's ``cachedContent`` is); ``store``:
    keep this exchange for later requests to continue and to retrieve;
    ``preamble``: how many leading messages belong to this request alone
    (instructions: the stored history goes after them, and they are not
    stored). ``tool_use``: the tools offered and how they may be used;
    ``output_format``: structured output asked for; ``logprobs``: None, or
    how many alternatives each token's logprobs list (0: only the chosen).
    ``kind`` ``"embedding"`` reads ``prompts`` like a completion and
    generates nothing; ``dimensions`` shortens its vectors.
    ``api`` names the wire API (``openai.chat``…), for rules that match on
    it; ``rule`` is set to the scripted rule that answered, if one did.
    ``wire`` holds fields the API echoes back in its answers; the simulator
    never reads it. ``keep_alive``: the API loads models on demand (Ollama):
    how long the model stays loaded after this request, in simulated
    seconds (infinite: for ever); None for APIs whose models are always loaded.
    ``ignored_fields``: the body's fields no version of the API defines
    (accepted, no effect; refused under ``strict_fields``). ``run_to_limit``:
    the answer runs to ``max_tokens`` (vLLM's ``ignore_eos``), never ending
    naturally before it. ``reasoning``: the answer starts with thinking
    (a reasoning model's), within ``max_tokens``. ``background``: the server
    answers at once and runs the generation with no client attached (the
    simulator runs it like any other). ``credential``: the ``api_keys`` key the
    request presented (its own rate limits apply).
    """

    kind: str
    model: str
    stream: bool
    include_usage: bool
    max_tokens: int | None
    n: int
    stops: list[str]
    seed: int | None
    messages: list[ChatMessage] = field(default_factory=list)
    tools_text: str = ""
    prompts: list[str | list[int]] = field(default_factory=list)
    echo: bool = False
    max_tokens_param: str = "max_tokens"
    prompt_defaulted: bool = False
    prompt_param: str = ""
    cache_breakpoint: int | None = None
    previous_id: str | None = None
    previous_param: str = "previous_response_id"
    cache_continued: bool = False
    store: bool = False
    preamble: int = 0
    tool_use: ToolUse | None = None
    output_format: OutputFormat | None = None
    logprobs: int | None = None
    dimensions: int | None = None
    api: str = ""
    rule: str | None = None
    wire: dict[str, Any] = field(default_factory=dict)
    keep_alive: float | None = None
    ignored_fields: list[str] = field(default_factory=list)
    run_to_limit: bool = False
    reasoning: ReasoningAsk | None = None
    background: bool = False
    credential: str | None = None
    # a bad_tool_call fault's word for how this answer's tool calls come out broken (None: whole)
    tool_call_fault: str | None = None
    # a bad_usage fault's factor: the answer's usage reports this many times the tokens it sent
    usage_factor: float = 1.0
    # a scenario's phases aimed at this request (set with its fault): its latency's shape over time, and the
    # rate limiters of the phases active when it arrived
    latency_shape: Any = None
    scenario_limiters: tuple[Any, ...] = ()
    # the request's headers (case-insensitive), for rules that match on one; None where it had none (a batch's)
    headers: Any = None
    # parts of the prompt the client asked the server to clear (Anthropic's context editing), and once the
    # prompt is counted: its tokens before them, and what each did
    context_edits: tuple[ContextEdit, ...] = ()
    unedited_prompt_tokens: int | None = None
    applied_edits: tuple[AppliedEdit, ...] = ()

    @property
    def after_tool_result(self) -> bool:
        """The conversation's last message is a tool's result (an agent loop's next turn)."""
        return bool(self.messages) and self.messages[-1].role == "tool"

    def prompt_text(self) -> str:
        """What rules match ``prompt`` against: the last user message, or the first text prompt."""
        if self.kind == "chat":
            users = [m.content for m in self.messages if m.role == "user"]
            return users[-1] if users else (self.messages[-1].content if self.messages else "")
        return next((p for p in self.prompts if isinstance(p, str)), "")  # completions, embeddings

    def __post_init__(self) -> None:
        if not self.prompt_param:
            self.prompt_param = "messages" if self.kind == "chat" else "prompt"
