"""One simulated backend without the HTTP: its settings and state, and a request's way into the engine.

The server turns HTTP into :meth:`Simulator.start` calls; the test's
:class:`~pytest_llmsim.backend.LLMBackend` reads and steers the same object.
What a request passes before the engine (keys, faults, capacity, rate limits)
is :class:`~.admission.Admission`'s; what is kept of it once it is over (the
metrics, the log, the trace) is :class:`~.accounting.Accounting`'s.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from .accounting import Accounting
from .admission import Admission
from .config import SimConfig
from .content_model import ContentModel, Planner, ScriptBook
from .conversations import ConversationStore, StoredExchange
from .engine import SimSequence
from .faults import Fault, FaultInjector, HeaderLookup
from .generation import Generation, Outcome
from .load_history import LoadHistory
from .lora_adapters import LoraAdapters
from .metrics import Metrics, MetricsSnapshot
from .model_residency import ModelResidency
from .planned import filtered
from .prompts import continue_conversation, prompt_ids
from .request import ChatMessage, GenerationRequest, SimError, invalid
from .request_limits import check_embedding, check_work, queue_full, token_budgets
from .request_log import RequestLog, RequestRecord
from .runtime import Runtime
from .scenario import Phase
from .session_log import SessionLog
from .token_feed import hold
from .tokens import PlannedOutput, Tokenizer, load_encoding
from .trace import TraceRecorder

__all__ = ["ContentModel", "Generation", "Outcome", "Planner", "ScriptBook", "Simulator"]

class Simulator:
    """The state of one backend, safe to use from handler threads and the test."""

    def __init__(self, config: SimConfig | None, content: ContentModel, replica: int = 1) -> None:
        self._lock = threading.Lock()
        self._content = content
        self._base = config or SimConfig()
        self.config = self._base
        self.runtime = Runtime(self.config, self._counts_changed)
        self.accounting = Accounting(self.config, self.runtime)
        self.admission = Admission(self.config, self.runtime, replica)
        self.conversations = ConversationStore(self.config.max_stored_responses, self.config.max_stored_response_bytes)
        self.residency = ModelResidency()  # models loaded on demand (Ollama's API)
        self.sessions = SessionLog()  # WebSocket sessions, open and ended
        self.tokenizer = Tokenizer(load_encoding(self.config.model))
        self._filler = self.tokenizer.filler_source(self.config.seed)
        self.planner = content.planner(self.tokenizer, self._filler, self.config)
        self.script = content.script(self.config)
        self.adapters = LoraAdapters(dict.fromkeys(self.config.lora_adapters, ""))  # LoRA name -> path
        self._epoch = 0  # bumped by reset(); requests from an older epoch are not counted
        self._wake_stalls = threading.Event()  # set by reset/stop: stalled handlers give up

    # --- the accounts and the door, as every handle reads them ---

    @property
    def metrics(self) -> Metrics:
        return self.accounting.metrics

    @property
    def log(self) -> RequestLog:
        return self.accounting.log

    @property
    def trace(self) -> TraceRecorder:
        return self.accounting.trace

    @property
    def history(self) -> LoadHistory:
        """The live page's charts: kept whether a page is open or not."""
        return self.accounting.history

    @property
    def faults(self) -> FaultInjector:
        return self.admission.faults

    @property
    def after_request(self) -> Callable[[], None] | None:
        """Called after each request's accounting (llmsim serve paces garbage collection with it)."""
        return self.accounting.after_request

    @after_request.setter
    def after_request(self, callback: Callable[[], None] | None) -> None:
        self.accounting.after_request = callback

    # --- steering ---

    def configure(self, **settings: Any) -> SimConfig:
        """Change settings from now on (validated; raises ConfigError)."""
        with self._lock:
            config = self.config.replace(**settings)
            self.runtime.update(config)  # first: it may refuse (a scheduler change with requests in flight)
            self._apply(config)
            return config

    @property
    def base(self) -> SimConfig:
        """The settings a :meth:`reset` goes back to."""
        return self._base

    def wait_idle(self, timeout: float = 5.0) -> bool:
        """Wait (wall seconds) until no request is in flight; True if it got there.

        One operation for every handle: ``LLMBackend.wait_idle``, the control API's
        ``POST /llmsim/v1/wait-idle`` (and so ``RemoteBackend.wait_idle``).
        """
        deadline = time.monotonic() + max(0.0, timeout)
        while self.runtime.in_flight or self.accounting.busy:  # in the engine, or being accounted
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.002)
        return True

    def reset(self, base: SimConfig | None = None) -> None:
        """Back to ``base`` (or the starting settings) with empty state."""
        with self._lock:
            if base is not None:
                self._base = base
            config = self._base
            self._apply(config)
            self.runtime.reset(config)
            self.accounting.reset(config)
            self.admission.reset(config)
            self.conversations = ConversationStore(config.max_stored_responses, config.max_stored_response_bytes)
            self.script.clear()
            self.residency.clear()
            self.sessions = SessionLog()
            self.adapters = LoraAdapters(dict.fromkeys(config.lora_adapters, ""))
            self._epoch += 1
            self._wake_stalls.set()
            self._wake_stalls = threading.Event()

    def _counts_changed(self, now: float, running: int, waiting: int) -> None:
        """The engine's batch or queue changed (under the runtime's lock): the accounts note it."""
        self.accounting.counts_changed(now, running, waiting)

    def _apply(self, config: SimConfig) -> None:
        if config.model != self.config.model:
            self.tokenizer = Tokenizer(load_encoding(config.model))
        if config.model != self.config.model or config.seed != self.config.seed:
            self._filler = self.tokenizer.filler_source(config.seed)
        self.accounting.apply(self.config, config)
        self.admission.apply(self.config, config)
        self.planner = self._content.planner(self.tokenizer, self._filler, config)
        if config.lora_adapters != self.config.lora_adapters:
            self.adapters = LoraAdapters((name, self.adapters.get(name, "")) for name in config.lora_adapters)
        script = self.script
        script.max_replies, script.max_rules, script.max_bytes = (config.max_queued_replies, config.max_rules,
                                                                  config.max_script_bytes)
        self.conversations.max_entries = config.max_stored_responses
        self.conversations.max_bytes = config.max_stored_response_bytes
        self.config = config

    def reply_with(self, replies: Iterable[Any]) -> None:
        """Queue scripted replies (see :mod:`pytest_llmsim.content.replies`), one per request, in order."""
        self.script.queue(replies)

    def add_rule(self, rule: Any) -> Any:
        """Answer the requests ``rule`` matches with its replies (first matching rule wins)."""
        return self.script.add_rule(rule)

    # --- models and LoRA adapters ---

    def served_models(self) -> list[str]:
        """Every model name this backend answers to: the base, ``served_models``, loaded adapters."""
        config = self.config
        return list(dict.fromkeys([config.model, *config.served_models, *self.adapters]))

    def load_adapter(self, name: str, path: str) -> None:
        """Load a LoRA adapter (vLLM's ``/v1/load_lora_adapter``); 400 if one of that name is loaded, or
        ``MAX_LORA_ADAPTERS`` are."""
        with self._lock:
            self.adapters.load(name, path)

    def unload_adapter(self, name: str) -> None:
        """Unload a LoRA adapter; 404 when none of that name is loaded."""
        with self._lock:
            self.adapters.unload(name)

    def _check_model(self, request: GenerationRequest) -> str | None:
        """The LoRA adapter a request names (None: the base model); 404 for an unknown model when strict."""
        if request.model in self.adapters:
            return request.model
        if self.config.strict_models and request.model not in self.served_models():
            raise SimError(404, f"The model `{request.model}` does not exist.", param="model",
                           code="model_not_found")
        return None

    def stop(self) -> None:
        """Stop the engine thread; stalled handlers and in-flight requests end now."""
        self._wake_stalls.set()
        self.runtime.stop()

    def resume(self) -> None:
        """Serve again after :meth:`stop` (a restarted backend), with an empty engine."""
        if self.runtime.stopped:
            self._wake_stalls = threading.Event()
            self.runtime.restart()

    # --- faults ---

    def add_fault(self, kind: str, **params: Any) -> Fault:
        """Arm a fault (validated; raises ``FaultError`` naming a bad kind or parameter)."""
        return self.faults.add(Fault.build(kind, **params))

    def set_scenario(self, phases: tuple[Phase, ...]) -> None:
        """Replace the scenario by ``phases`` (none: no scenario), its time counted from now."""
        self.admission.set_scenario(self.config, phases)

    def scenario_state(self) -> dict[str, Any]:
        """The scenario's phases, which are active, and the simulated seconds since it started (``{}``: none)."""
        scenario = self.admission.scenario
        return {} if scenario is None else scenario.describe(self.runtime.virtual_now())

    def scenario_spans(self) -> list[tuple[str, float, float]]:
        """The scenario's phases as (name, start, end) in simulated time, for the timeline (none: no scenario)."""
        scenario = self.admission.scenario
        return [] if scenario is None else scenario.spans()

    def check_credentials(self, headers: HeaderLookup, query_string: str = "") -> str | None:
        """With ``required_api_key`` or ``api_keys`` set: the key the request presents, or a refusal
        (:func:`.secrets.accepted_key`). None when any key will do."""
        return self.admission.check_credentials(self.config, headers, query_string)

    def count_request(self) -> int:
        """Number the arriving generation request (1-based), for ``nth`` and ``rate`` faults."""
        return self.admission.count_request()

    def pick_fault(self, number: int, headers: HeaderLookup, request: GenerationRequest,
                   route: str | None = None, query_string: str = "") -> Fault | None:
        """The fault that applies to request ``number``, if any."""
        def prompt_text() -> str:  # only built when a fault matches on the prompt
            if request.kind == "chat":
                return "\n".join(message.content for message in request.messages)
            tokenizer = self.tokenizer
            return "\n".join(p if isinstance(p, str) else tokenizer.encoding.decode(
                [t for t in p if tokenizer.valid_token_id(t)]) for p in request.prompts)

        return self.admission.pick_fault(number, headers, request, route, query_string, prompt_text)

    def stall(self, seconds: float, client_gone: Callable[[], bool] | None = None) -> bool:
        """Hold the calling handler for ``seconds`` of wall time (:func:`.feed.hold`); ends early on reset
        or stop, and returns True, early, when ``client_gone`` says the client hung up."""
        return hold(seconds, self._wake_stalls, client_gone)

    # --- serving ---

    def start(self, request: GenerationRequest, arrived_at: float | None = None,
              latency_scale: float = 1.0, content_filter: tuple[int, str] | None = None) -> Generation:
        """Check the request against the model's limits and the backend's capacity, then enter the engine.

        Every check that can refuse a request runs before its outputs are
        planned, so a refused request costs no more than its prompt's tokens.
        ``content_filter``: ``(after_tokens, finish_reason)``, a content filter
        stops every answer after that many tokens (``content_filter``; a
        blocked prompt: 0 and ``prompt_filter``).
        """
        config, tokenizer = self.config, self.tokenizer
        if request.ignored_fields and config.strict_fields:
            name = request.ignored_fields[0]
            raise SimError(400, f"Unrecognized request argument supplied: {name}", param=name,
                           code="unknown_parameter", details={"field": name})
        adapter = self._check_model(request)
        self._continue(request)
        prompts, echo_sources = self._prompts(request, tokenizer)
        if request.kind == "embedding":
            check_embedding(request, prompts, self.config)
        budgets, limit = token_budgets(request, prompts, config)
        check_work(request, prompts, budgets, self.config)
        self._check_schemas(request)  # after the cheap limits: thousands of schemas cost seconds
        rate_limit = self.admission.admit(config, request, prompts, budgets)
        reply, request.rule = self.script.next_reply(request)
        outputs: list[PlannedOutput] = []
        sequences: list[SimSequence] = []
        echo_prefixes: list[str] = []
        planner = self.planner
        for prompt_index, (ids, source, max_tokens) in enumerate(zip(prompts, echo_sources, budgets)):
            prompt_key = hash(tuple(ids))  # ints hash the same in every process
            echo_tokens = tokenizer.encode(source) if reply is None and config.output == "echo" else None
            for choice in range(request.n):
                key = hash((request.seed or 0, prompt_key, choice)) & 0xFFFFFFFFFFFF
                output = planner.plan(request, key, reply, echo_tokens, max_tokens, limit - len(ids))
                if content_filter is not None:
                    output = filtered(output, *content_filter)
                outputs.append(output)
                echo_prefixes.append(source if request.echo else "")
                sequences.append(SimSequence(ids, output.length, latency_scale=latency_scale,
                                             index=prompt_index * request.n + choice, adapter=adapter,
                                             latency_shape=request.latency_shape, reserve_tokens=max_tokens))
        load_time = 0.0
        if request.keep_alive is not None:
            load_time = self.residency.acquire(request.model, self.runtime.virtual_now(), config.ollama_load_seconds,
                                               request.keep_alive)
        feed = self.runtime.submit(sequences, arrived_at, wants_tokens=request.stream, delay=load_time)
        if not feed.accepted:
            feed.wait()
            self.runtime.release(feed)
            self._release_model(request)
            raise queue_full(config, len(sequences))
        marked = None
        if request.cache_breakpoint is not None:
            marked_messages = request.messages[:request.cache_breakpoint]
            marked = min(len(prompts[0]), self.tokenizer.chat_prefix_length(marked_messages))
        logprobs = self._content.logprobs(tokenizer, config.seed) if request.logprobs is not None else None
        return Generation(request, [len(ids) for ids in prompts], outputs, sequences, feed,
                          echo_prefixes, self._epoch, rate_limit, marked, logprobs, config.embedding_size,
                          config.seed, self._content.embed if request.kind == "embedding" else None,
                          load_time=load_time, max_tokens=max(budgets, default=0))

    def _release_model(self, request: GenerationRequest) -> None:
        if request.keep_alive is not None:
            self.residency.release(request.model, self.runtime.virtual_now())

    def _continue(self, request: GenerationRequest) -> None:
        continue_conversation(request, self.conversations, lambda: sum(
            len(ids) for ids in self._prompts(request, self.tokenizer)[0]))

    def keep_prefix(self, name: str, request: GenerationRequest,
                    body_of: Callable[[int], dict[str, Any]]) -> dict[str, Any]:
        """Store ``request``'s messages under ``name`` for later requests to continue (a named cached
        prompt, Gemini's ``cachedContents``), with the body ``body_of(token count)``; returns the body."""
        self.count_prompt(request)  # the checks a prompt gets (tokenizable, valid schemas)
        body = body_of(self.tokenizer.chat_prefix_length(request.messages))  # as a request's cached prefix counts
        self.conversations.put(name, StoredExchange(tuple(request.messages), body, request.credential))
        return body

    def remember(self, response_id: str, generation: Generation, body: dict[str, Any]) -> None:
        """Store a complete exchange (its conversation plus the answer) for chaining and retrieval."""
        request = generation.request
        output = generation.outputs[0]
        said = generation.texts()[0] if not output.calls else json.dumps(
            [{"name": call.name, "arguments": call.arguments} for call in output.calls])
        messages = (*request.messages[request.preamble:], ChatMessage("assistant", said))
        self.conversations.put(response_id, StoredExchange(messages, body, request.credential))

    def count_prompt(self, request: GenerationRequest) -> int:
        """Prompt tokens of ``request`` as the engine would count them (nothing is run)."""
        self._continue(request)
        prompts, _ = self._prompts(request, self.tokenizer)
        self._check_schemas(request)
        return sum(len(ids) for ids in prompts)

    def _check_schemas(self, request: GenerationRequest) -> None:
        problem = self._content.schema_problem(request)
        if problem is not None:
            raise invalid(problem[0], problem[1], "invalid_schema")

    def _prompts(self, request: GenerationRequest, tokenizer: Tokenizer) -> tuple[list[list[int]], list[str]]:
        return prompt_ids(request, tokenizer, self.config.output == "echo")

    def note_lag(self, generation: Generation, due: float) -> None:
        """Tokens due at virtual time ``due`` just went out: keep how late (wall seconds)."""
        self.accounting.note_lag(generation, due)

    def cancel(self, generation: Generation) -> None:
        self.runtime.cancel(generation.feed)

    def finish(self, record: RequestRecord, generation: Generation | None = None,
               outcome: Outcome = Outcome.COMPLETE, delivered: int | None = None) -> None:
        """Account for a request that is over (success, error, hang-up or cut by a fault).

        ``delivered`` is how many tokens the client was sent when the answer
        was not complete; a hang-up (``Outcome.CLIENT_GONE``) is logged with
        status 499 and ``cancelled=True``.
        """
        self.accounting.finish(record, generation, outcome, delivered, self._epoch, self._release_model)

    # --- reading ---

    def snapshot(self) -> MetricsSnapshot:
        sessions = self.sessions
        heard, said = sessions.audio_seconds
        return dataclasses.replace(self.accounting.snapshot(), sessions_open=sessions.open_count,
                                   sessions_total=sessions.total, session_audio_input_seconds=heard,
                                   session_audio_output_seconds=said)

    def prometheus_text(self) -> bytes:
        sessions = self.sessions
        return self.accounting.prometheus_text(self.config, bool(self.adapters),
                                               (sessions.open_count, sessions.total, *sessions.audio_seconds))
