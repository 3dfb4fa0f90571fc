"""RemoteBackend: the handle of a backend in another process, over the control API.

The same interface as :class:`~pytest_llmsim.backend.LLMBackend` (all but
``httpserver``, ``start`` and ``stop``, which belong to whoever runs the
server), so one test can drive a backend in its own process or one started
with ``llmsim serve`` elsewhere. Only the standard library is used.
"""

from __future__ import annotations

import json
import math
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .assertions import BackendAssertions
from .content.replies import Reply, Rule, RuleBuilder, normalize_reply, reply_to_json
from .recording.content import rules_from_cassette
from .sdk_environment import DEFAULT_KEY, sdk_environment
from .server.loopback import DIRECT, is_loopback
from .sim.config import ConfigError, SimConfig
from .sim.control_json import CONTROL_PREFIX, fault_from_json, record_from_json, snapshot_from_json
from .sim.faults import Fault, FaultError, FaultState
from .sim.metrics import MetricsSnapshot
from .sim.request_log import RequestRecord
from .sim.scenario import Phase, phase_from_mapping
from .sim.session_log import SessionRecord

__all__ = ["RemoteBackend", "RemoteError"]


class RemoteError(RuntimeError):
    """The remote backend answered the control call with an error (or not at all)."""


class RemoteBackend(BackendAssertions):
    """A backend reached at ``url`` (``http://HOST:PORT``, with or without ``/v1``).

    ``token`` is the control token the server was started with
    (``llmsim serve --control-token``), if any.
    """

    def __init__(self, url: str, token: str | None = None, timeout: float = 30.0) -> None:
        root = url.rstrip("/")
        self._root = root[:-3] if root.endswith("/v1") else root
        self._token = token
        self._timeout = timeout
        parsed = urllib.parse.urlsplit(self._root)
        self._host, self._port = parsed.hostname or "127.0.0.1", parsed.port or 80
        # On this machine: never through a proxy; elsewhere: the environment's proxies.
        self._open = DIRECT.open if is_loopback(self._host) else urllib.request.urlopen
        self._tls: bool | None = None  # whether the backend serves HTTPS (tls = true); asked when first needed

    # --- transport ---

    def _call(self, method: str, name: str, body: Any = None, query: str = "", raw: bool = False) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(f"{self._root}{CONTROL_PREFIX}{name}{query}", data=data, method=method)
        request.add_header("Content-Type", "application/json")
        if self._token is not None:
            request.add_header("Authorization", f"Bearer {self._token}")
        try:
            with self._open(request, timeout=self._timeout) as response:
                data = response.read()
                return data.decode() if raw else json.loads(data)
        except urllib.error.HTTPError as error:
            try:
                message = json.loads(error.read())["error"]["message"]
            except Exception:
                message = str(error)
            if error.code == 400 and name in ("config", "reset"):
                raise ConfigError(message) from None
            if error.code == 400 and name == "faults":
                raise FaultError(message) from None
            raise RemoteError(f"{method} {CONTROL_PREFIX}{name}: {error.code} {message}") from None
        except OSError as error:
            raise RemoteError(f"{method} {CONTROL_PREFIX}{name}: {error}") from None

    # --- addresses ---

    @property
    def base_url(self) -> str:
        """``http://HOST:PORT/v1`` (``https://`` with ``tls`` on), for ``openai.OpenAI(base_url=...)``."""
        return self.root_url + "/v1"

    @property
    def root_url(self) -> str:
        """``http://HOST:PORT`` (``https://`` with ``tls`` on), for SDKs that add ``/v1/...`` themselves.

        The control API itself stays on the URL this handle was given (it answers plain HTTP either way).
        """
        if self._tls is None:
            try:
                self._note_tls(self._call("GET", "config"))
            except RemoteError:
                return self._root  # not answering: as given
        if self._tls and self._root.startswith("http://"):
            return "https://" + self._root[len("http://"):]
        return self._root

    def url_for(self, path: str) -> str:
        """Absolute URL of ``path`` on this backend."""
        return self.root_url + "/" + path.lstrip("/")

    def env(self, api_key: str = DEFAULT_KEY) -> dict[str, str]:
        """The official SDKs' environment variables pointed at this backend (``OPENAI_BASE_URL``,
        ``ANTHROPIC_BASE_URL``, ...; see :mod:`pytest_llmsim.sdk_environment`), for code that builds its
        own clients or a gateway started as a process."""
        return sdk_environment(self.root_url, api_key)

    @property
    def ca_file(self) -> str:
        """The PEM file of the certificate authority the backend's HTTPS answers are signed by (on its machine)."""
        return str(self._call("GET", "tls")["ca_file"])

    def _note_tls(self, settings: dict[str, Any]) -> dict[str, Any]:
        self._tls = bool(settings.get("tls", False))
        return settings

    @property
    def host(self) -> str:
        return self._host

    @property
    def port(self) -> int:
        return self._port

    @property
    def is_running(self) -> bool:
        try:
            self._call("GET", "config")
        except RemoteError:
            return False
        return True

    # --- steering ---

    @property
    def config(self) -> SimConfig:
        """The settings in force."""
        return SimConfig().replace(**_config_values(self._note_tls(self._call("GET", "config"))))

    def configure(self, **settings: Any) -> SimConfig:
        """Change settings for the rest of this test (validated remotely; raises ``ConfigError``)."""
        return SimConfig().replace(**_config_values(self._note_tls(self._call("PATCH", "config", _jsonable(settings)))))

    def reset(self, config: SimConfig | None = None) -> None:
        """Back to the starting settings (or ``config``) with empty cache, metrics, log and faults."""
        body = {} if config is None else {"settings": _jsonable(config.as_dict())}
        self._call("POST", "reset", body)
        self._tls = None

    def reply_with(self, *replies: Reply) -> None:
        """Queue scripted replies: each request takes the next one, in order (see ``LLMBackend.reply_with``)."""
        self._call("POST", "replies", {"replies": [reply_to_json(normalize_reply(reply)) for reply in replies]})

    def on(self, prompt: str | None = None, *, model: str | None = None, tool: str | None = None,
           api: str | None = None, turn: int | None = None, tool_result: str | None = None,
           previous: str | None = None, header: str | None = None) -> RuleBuilder:
        """A rule (see ``LLMBackend.on``); the returned :class:`Rule` is a copy: read ``rules`` for hit counts."""
        return RuleBuilder(self.add_rule, prompt=prompt, model=model, tool=tool, api=api, turn=turn,
                           tool_result=tool_result, previous=previous, header=header)

    def add_rule(self, rule: Rule) -> Rule:
        """Add a rule on the remote backend; returns it as the backend stored it (named). A rule that answers
        with a callable is refused (TypeError): the callable would have to run in the backend's process."""
        if rule.answer is not None:
            raise TypeError("a rule that answers with a callable runs it in the backend's own process, and this "
                            "backend runs in another (RemoteBackend, --llmsim-isolation=process): give it fixed "
                            "replies, matched by prompt, model, tool or api")
        return Rule.from_json(self._call("POST", "rules", rule.to_json()))

    def play_cassette(self, path: str | Path, mode: str = "simulate") -> list[Rule]:
        """Answer as a cassette ``llmsim record`` wrote did: a rule per recorded answer, timed by this backend's
        engine (``mode``: ``simulate``, any request with the recorded prompt, or ``content``, only the recorded
        request; see ``pytest_llmsim.recording.content``). Returns the rules as added."""
        return [self.add_rule(rule) for rule in rules_from_cassette(path, mode)]

    def trace(self) -> dict[str, Any]:
        """The remote backend's trace as Chrome trace-event JSON (see ``LLMBackend.trace``)."""
        return dict(self._call("GET", "trace"))

    def trace_svg(self, title: str = "") -> str:
        """The remote backend's SVG timeline (see ``LLMBackend.trace_svg``)."""
        return str(self._call("GET", "trace", query="?" + urllib.parse.urlencode({"format": "svg", "title": title}),
                              raw=True))

    @property
    def label(self) -> str:
        """``model:port``, how reports and trace files name this backend."""
        return f"{self.config.model}:{self.port}"

    @property
    def rules(self) -> list[Rule]:
        """The rules in force remotely, with their hit counts."""
        rules = []
        for data in self._call("GET", "rules"):
            rule = Rule.from_json(data)
            rule.hits = data.get("hits", 0)
            rules.append(rule)
        return rules

    def add_fault(self, kind: str, **params: Any) -> Fault:
        """Arm a fault (see ``LLMBackend.add_fault``)."""
        return fault_from_json(self._call("POST", "faults", {"kind": kind, **params}))

    @property
    def faults(self) -> list[Fault]:
        """The faults armed, in the order they are tried (a spent ``times`` fault is no longer armed)."""
        return [state.fault for state in self.fault_states if not state.spent]

    @property
    def fault_states(self) -> list[FaultState]:
        """Every fault added since the last clear: each one's ``hits`` and whether it is ``spent``."""
        states = []
        for item in self._call("GET", "faults"):
            hits, spent = int(item.pop("hits", 0)), bool(item.pop("spent", False))
            states.append(FaultState(fault_from_json(item), hits, spent))
        return states

    def clear_faults(self) -> None:
        """Disarm every fault."""
        self._call("DELETE", "faults")

    def clear_rules(self) -> None:
        """Remove every rule (queued replies stay)."""
        self._call("DELETE", "rules")

    def scenario(self, *phases: Phase | Mapping[str, Any]) -> tuple[Phase, ...]:
        """Replace the scenario (see ``LLMBackend.scenario``), its time counted from now."""
        built = tuple(phase if isinstance(phase, Phase) else phase_from_mapping(phase) for phase in phases)
        if built:
            self._call("PUT", "scenario", {"phases": [phase.as_mapping() for phase in built]})
        else:
            self._call("DELETE", "scenario")
        return built

    def scenario_state(self) -> dict[str, Any]:
        """The scenario's phases, each with ``active``, and its ``elapsed`` simulated seconds (``{}``: none)."""
        state: dict[str, Any] = self._call("GET", "scenario")
        return state

    def check(self) -> None:
        """Raise the first internal error the remote simulator hit while serving, if any."""
        errors = self._call("GET", "errors")
        if errors:
            raise RemoteError(f"the remote backend hit {len(errors)} internal error(s); first: {errors[0]}")

    def wait_idle(self, timeout: float = 5.0) -> bool:
        """Wait (wall seconds) until no request is in flight; True if it got there."""
        return bool(self._call("POST", "wait-idle", {"timeout": timeout})["idle"])

    # --- reading ---

    @property
    def metrics(self) -> MetricsSnapshot:
        """A snapshot of the counters and latency distributions since the last reset."""
        return snapshot_from_json(self._call("GET", "metrics"))

    @property
    def sessions(self) -> list[SessionRecord]:
        """The WebSocket sessions kept, in the order they opened."""
        return [SessionRecord(**item) for item in self._call("GET", "sessions")["sessions"]]

    @property
    def requests(self) -> list[RequestRecord]:
        """The request log, oldest first (fetched in pages)."""
        records: list[RequestRecord] = []
        while True:
            page = self._call("GET", "requests", query=f"?offset={len(records)}")
            records.extend(record_from_json(item) for item in page["records"])
            if not page["records"] or len(records) >= page["total"]:
                return records

    def prometheus_text(self) -> str:
        """What ``GET /metrics`` answers now."""
        with self._open(self._root + "/metrics", timeout=self._timeout) as response:
            return str(response.read().decode())

    @property
    def speed(self) -> float:
        """Simulated seconds per wall second."""
        return self.config.speed

    def to_wall(self, sim_seconds: float) -> float:
        """Wall-clock seconds that ``sim_seconds`` of simulated time take at this speed."""
        speed = self.speed
        return 0.0 if math.isinf(speed) else sim_seconds / speed

    @property
    def running(self) -> int:
        """Sequences in the running batch now."""
        return int(_gauge(self.prometheus_text(), "vllm:num_requests_running"))

    @property
    def waiting(self) -> int:
        """Sequences waiting for a batch slot now."""
        return int(_gauge(self.prometheus_text(), "vllm:num_requests_waiting"))

    @property
    def in_flight(self) -> int:
        """Requests inside the engine now (0 once ``wait_idle`` says idle)."""
        return 0 if self.wait_idle(timeout=0.0) else 1

    def __repr__(self) -> str:
        return f"<RemoteBackend {self.base_url}>"


def _jsonable(settings: dict[str, Any]) -> dict[str, Any]:
    return {key: ("inf" if isinstance(value, float) and math.isinf(value) else value)
            for key, value in settings.items()}


def _config_values(data: dict[str, Any]) -> dict[str, Any]:
    values = dict(data)
    if isinstance(values.get("answer_length"), list):
        values["answer_length"] = tuple(values["answer_length"])
    return values


def _gauge(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0

