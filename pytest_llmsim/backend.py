"""LLMBackend: the handle a test holds on one simulated backend."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

from .assertions import BackendAssertions
from .content.model import MODEL_CONTENT
from .content.replies import Reply, Rule, RuleBuilder
from .recording.content import rules_from_cassette
from .sdk_environment import DEFAULT_KEY, sdk_environment
from .server.app import SimulatorServer
from .server.backend_operations import BackendOperations
from .server.control import host_name
from .sim.config import SimConfig
from .sim.faults import Fault, FaultState
from .sim.metrics import MetricsSnapshot
from .sim.request_log import RequestRecord
from .sim.scenario import Phase
from .sim.session_log import SessionRecord
from .sim.simulator import Simulator

__all__ = ["LLMBackend"]


class LLMBackend(BackendAssertions):
    """An OpenAI-compatible simulated LLM backend on a loopback port.

    Use it as a context manager, or call :meth:`start` and :meth:`stop`.
    Point a client at :attr:`base_url`; steer it with :meth:`configure` and
    :meth:`reply_with`; read what happened in :attr:`metrics` and
    :attr:`requests`, or check it with the ``assert_*`` helpers.
    """

    def __init__(self, config: SimConfig | None = None, host: str = "127.0.0.1", port: int = 0,
                 control_token: str | None = None, allowed_hosts: Iterable[str] = (), *,
                 shared_port: bool = False, own_port: int = 0, replica: int = 1, **settings: Any) -> None:
        """``shared_port``: bind ``port`` with ``SO_REUSEPORT``, so backends in several processes listening
        on it share its connections (``llmsim serve --replicas N --shared-port``), and listen on ``own_port``
        too (0: a free one; see :attr:`own_url`), where this backend alone answers. ``replica``: which
        replica of a fleet this is (faults aimed with ``replica=N`` apply only on replica N)."""
        base = (config or SimConfig()).replace(**settings)
        self._simulator = Simulator(base, MODEL_CONTENT, replica)
        self._server = SimulatorServer(self._simulator, host, port)
        if shared_port:
            self._server.reuse_port = True
            self._server.own_port = own_port
        self._operations = BackendOperations(self._server)  # the operations the control API serves too
        # the control API (/llmsim/v1/...) then needs "Authorization: Bearer <token>"
        self._server.control.token = control_token
        # Host names the control API answers to besides loopback and the listen address (DNS rebinding)
        self._server.control.allowed_hosts = frozenset(host_name(name) for name in allowed_hosts)

    # --- lifecycle ---

    def start(self) -> LLMBackend:
        """Start listening; returns self.

        A stopped backend starts again on the same port with an empty engine
        (an outage-and-recovery test), keeping its settings, metrics and log.
        Raises ``OSError`` ("cannot listen on HOST:PORT: ...") when the
        address is taken.
        """
        self._simulator.resume()
        self._server.start()
        return self

    def stop(self) -> None:
        """Stop the server and the engine thread; in-flight requests end as cancelled.

        Returns within about a second whatever the clients do: open
        connections (idle, half-sent, or not reading) are cut.
        """
        self._simulator.stop()  # first: streams still open end now, freeing their threads
        if self._server.is_running():
            self._server.stop()

    def __enter__(self) -> LLMBackend:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    @property
    def is_running(self) -> bool:
        return self._server.is_running()

    # --- addresses ---

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT/v1``, ready for ``openai.OpenAI(base_url=...)``."""
        return self.url_for("/v1")

    @property
    def root_url(self) -> str:
        """``http://127.0.0.1:PORT``, for SDKs that add ``/v1/...`` themselves.

        ``anthropic.Anthropic(base_url=llm_backend.root_url)`` posts to
        ``/v1/messages``; ``base_url`` (ending in ``/v1``) would give ``/v1/v1/messages``.
        """
        return self.url_for("").rstrip("/")

    def url_for(self, path: str) -> str:
        """Absolute URL of ``path`` on this backend."""
        return self._server.url_for(path)

    def env(self, api_key: str = DEFAULT_KEY) -> dict[str, str]:
        """The official SDKs' environment variables pointed at this backend (``OPENAI_BASE_URL``,
        ``ANTHROPIC_BASE_URL``, ...; see :mod:`pytest_llmsim.sdk_environment`), for code that builds its
        own clients or a gateway started as a process."""
        return sdk_environment(self.root_url, api_key)

    @property
    def own_url(self) -> str | None:
        """With ``shared_port``: ``http://127.0.0.1:OWN_PORT``, this backend's own address (its ``/metrics`` and
        control API, which the shared port would hand to any backend listening on it); else None."""
        own = self._server.own_port
        if own is None:
            return None
        return f"{self.root_url.rsplit(':', 1)[0]}:{own}"

    @property
    def ca_file(self) -> str:
        """The PEM file of the certificate authority HTTPS answers are signed by (``tls = true``).

        Trust it in a client: ``httpx.Client(verify=ssl.create_default_context(cafile=llm_backend.ca_file))``,
        or ``SSL_CERT_FILE`` for a gateway in another process. Made on first use, removed with the backend.
        """
        return self._server.ca_file

    @property
    def host(self) -> str:
        return self._server.host

    @property
    def port(self) -> int:
        return self._server.port

    @property
    def httpserver(self) -> SimulatorServer:
        """The underlying pytest-httpserver ``HTTPServer``: add routes with ``expect_request``."""
        return self._server

    # --- steering ---

    @property
    def config(self) -> SimConfig:
        """The settings in force."""
        return self._operations.config

    def configure(self, **settings: Any) -> SimConfig:
        """Change settings for the rest of this test (validated; raises ``ConfigError``).

        Keys: every :class:`~pytest_llmsim.SimConfig` field, e.g. ``ttft``,
        ``itl``, ``max_batch_size``, ``cache_hit_rate``, ``output``, ``speed``.
        """
        return self._operations.configure(**settings)

    def reply_with(self, *replies: Reply) -> None:
        """Queue scripted replies: each request takes the next one, in order.

        A reply is text, a dict (answered as its JSON text), a
        :class:`~pytest_llmsim.ToolCall` or a list of them (answered as tool
        calls in every API), or an :class:`~pytest_llmsim.ErrorReply`
        (answered as that error, in the API's error shape).
        """
        self._operations.reply_with(replies)

    def on(self, prompt: str | None = None, *, model: str | None = None, tool: str | None = None,
           api: str | None = None, turn: int | None = None, tool_result: str | None = None,
           previous: str | None = None, header: str | None = None) -> RuleBuilder:
        """A rule: requests that match every matcher given get the reply set with ``.reply(...)``.

        ``prompt`` is a regular expression searched in the last user message;
        ``model`` the request's model; ``tool`` a function the request offers;
        ``api`` ``chat``, ``completions``, ``responses``, ``messages`` or
        ``embeddings``; ``turn`` the conversation's turn (1 for the first user message); ``tool_result`` and
        ``previous`` regular expressions searched in the latest tool result and assistant message; ``header``
        ``"Name: regex"`` on a request header. ``backend.on(prompt=r"weather").reply(ToolCall("get_weather",
        {...}), times=1)``.
        Rules are tried in the order added, before queued replies; the
        request log names the rule that answered (``record.rule``).
        ``.reply(fn)`` with one callable answers each matching request with what
        ``fn(request)`` returns (any reply form; None for the backend's own answer).
        """
        return RuleBuilder(self._operations.add_rule, prompt=prompt, model=model, tool=tool, api=api, turn=turn,
                           tool_result=tool_result, previous=previous, header=header)

    def add_rule(self, rule: Rule) -> Rule:
        """Add a :class:`~pytest_llmsim.Rule` built elsewhere (e.g. :func:`~pytest_llmsim.load_conversation`)."""
        self._operations.add_rule(rule)  # names it, if it has no name
        return rule

    def play_cassette(self, path: str | Path, mode: str = "simulate") -> list[Rule]:
        """Answer as a cassette ``llmsim record`` wrote did: a rule per recorded answer, timed by this backend's
        engine (``mode``: ``simulate``, any request with the recorded prompt, or ``content``, only the recorded
        request; see ``pytest_llmsim.recording.content``). Returns the rules as added."""
        return [self.add_rule(rule) for rule in rules_from_cassette(path, mode)]

    def trace(self) -> dict[str, Any]:
        """What the backend did since the last reset, as Chrome trace-event JSON (Perfetto, chrome://tracing).

        One track per request (queued, prefill and decode spans; faults, errors and hang-ups as
        instants), counter tracks for the batch and the prefix-cache hit rate; simulated time.
        """
        return self._operations.trace(self.label)

    def trace_svg(self, title: str = "") -> str:
        """The same as an SVG timeline: requests as bars coloured by phase, the batch under them."""
        return self._operations.trace_svg(self.label, title)

    @property
    def label(self) -> str:
        """``model:port``, how reports and trace files name this backend."""
        return self._operations.label(self.port)

    @property
    def rules(self) -> list[Rule]:
        """The rules in force, with how often each answered (``rule.hits``)."""
        return self._operations.rules

    def add_fault(self, kind: str, **params: Any) -> Fault:
        """Arm a fault: ``kind`` (what) plus parameters and conditions (when).

        Kinds: the HTTP errors ``rate_limit`` (429), ``server_error`` (500),
        ``bad_gateway`` (502), ``overloaded`` (503), ``timeout`` (504),
        ``invalid_api_key`` (401), ``context_length`` (400),
        ``model_not_found`` (404), ``http_error`` (any ``status``); mid-stream
        ``error_event``, ``drop``, ``malformed`` (after ``after_tokens``),
        ``drop_before_headers``, ``empty``; ``stall`` (``seconds`` of wall
        time), ``slow`` (latency times ``factor``) and ``content_filter`` (``side`` ``prompt`` or
        ``completion``, in each API's own shape). Conditions: ``times``,
        ``nth``, ``rate``, ``prompt`` (regex), ``model``, ``header_only``.
        A request with the header ``x-llmsim-fault: KIND`` gets that kind.
        See the fault reference in the docs for the details.
        """
        return self._operations.add_fault(kind, **params)

    @property
    def faults(self) -> list[Fault]:
        """The faults armed, in the order they are tried (a spent ``times`` fault is no longer armed)."""
        return self._operations.faults

    @property
    def fault_states(self) -> list[FaultState]:
        """Every fault added since the last clear: each one's ``hits`` and whether it is ``spent``."""
        return self._operations.fault_states

    def clear_faults(self) -> None:
        """Disarm every fault."""
        self._operations.clear_faults()

    def clear_rules(self) -> None:
        """Remove every rule (queued replies stay)."""
        self._operations.clear_rules()

    def scenario(self, *phases: Phase | Mapping[str, Any]) -> tuple[Phase, ...]:
        """Replace the scenario: latency, faults and rate limits that change on a schedule in simulated seconds
        counted from now. ``scenario(step(10, ttft=0.5), ramp(20, 30, itl=(0.02, 0.2)), spike(40, 5, factor=10),
        window(50, 60, fault=Fault("rate_limit")))`` (phases from ``pytest_llmsim``, or their TOML/JSON form as
        mappings; each aimed by ``model``, ``route``, ``key`` or ``replica``). No phases: no scenario."""
        return self._operations.set_scenario(phases)

    def scenario_state(self) -> dict[str, Any]:
        """The scenario's phases, each with ``active``, and its ``elapsed`` simulated seconds (``{}``: none)."""
        return self._operations.scenario_state()

    def check(self) -> None:
        """Raise the first internal error the simulator hit while serving (a bug), if any."""
        self._server.check_handler_errors()

    def on_request_done(self, callback: Callable[[], None] | None) -> None:
        """Call ``callback`` (no arguments) after each request's accounting, from the thread that
        finished it; ``None`` stops it. ``llmsim serve`` paces the garbage collector so."""
        self._simulator.after_request = callback

    def reset(self, config: SimConfig | None = None) -> None:
        """Back to the starting settings (or ``config``) with empty cache, metrics and log."""
        self._operations.reset(config)

    def wait_idle(self, timeout: float = 5.0) -> bool:
        """Wait (wall seconds) until no request is in flight; True if it got there.

        Useful after a client disconnects: the server notices at its next
        write, then accounts the request as cancelled.
        """
        return self._operations.wait_idle(timeout)

    # --- reading ---

    @property
    def running(self) -> int:
        """Sequences in the running batch now (``vllm:num_requests_running``)."""
        return self._simulator.runtime.running_and_waiting()[0]

    @property
    def waiting(self) -> int:
        """Sequences waiting for a batch slot now (``vllm:num_requests_waiting``)."""
        return self._simulator.runtime.running_and_waiting()[1]

    @property
    def in_flight(self) -> int:
        """HTTP requests inside the engine now (submitted, not yet accounted)."""
        return self._simulator.runtime.in_flight

    @property
    def metrics(self) -> MetricsSnapshot:
        """A snapshot of the counters and latency distributions since the last reset."""
        return self._operations.snapshot()

    @property
    def requests(self) -> list[RequestRecord]:
        """The request log (most recent ``max_log_entries``), oldest first."""
        return self._operations.requests()

    @property
    def sessions(self) -> list[SessionRecord]:
        """The WebSocket sessions (Realtime, Gemini Live, the Responses API's WebSocket mode): every open one and
        the newest 1,000 ended, in the order they opened; each response in one is also in :attr:`requests`."""
        return self._operations.sessions()

    def prometheus_text(self) -> str:
        """What ``GET /metrics`` would answer now."""
        return self._simulator.prometheus_text().decode()

    @property
    def speed(self) -> float:
        """Simulated seconds per wall second."""
        return self._simulator.config.speed

    def to_wall(self, sim_seconds: float) -> float:
        """Wall-clock seconds that ``sim_seconds`` of simulated time take at this speed."""
        return self._simulator.runtime.to_wall(sim_seconds)

    def __repr__(self) -> str:
        state = self.base_url if self.is_running else "stopped"
        return f"<LLMBackend {state} model={self.config.model!r} speed={self.speed:g}>"
