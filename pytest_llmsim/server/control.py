"""The control API: drive a backend over HTTP, under the reserved prefix ``/llmsim/v1``.

For suites whose backend is another process (``llmsim serve``), another
language, or a container, and for gateways that drop the ``x-llmsim-fault``
header. JSON in and out; never on the OpenAI/Anthropic paths, never logged
or counted as API traffic. With a control token set, every call needs
``Authorization: Bearer TOKEN``.

    GET    /llmsim/v1/config            the settings in force
    PATCH  /llmsim/v1/config            change settings (as configure())
    POST   /llmsim/v1/reset             back to the starting settings, empty state ({"settings": {...}} optional)
    GET    /llmsim/v1/faults            the armed faults
    POST   /llmsim/v1/faults            arm one: {"kind": ..., params...}
    DELETE /llmsim/v1/faults            disarm all
    GET, PUT, DELETE /llmsim/v1/scenario  the scenario; set one ({"phases": [...]}, from now); clear it
    POST   /llmsim/v1/replies           queue scripted replies: {"replies": [...]}
    GET, POST, DELETE /llmsim/v1/rules  the rules; add one (as Rule.from_json); remove all
    GET    /llmsim/v1/metrics           the metrics snapshot
    GET    /llmsim/v1/histograms        the latency histograms' buckets (cheap: nothing sorted)
    GET    /llmsim/v1/fault-kinds       each fault kind and the parameters it takes
    GET    /llmsim/v1/requests          the request log (?offset=&limit=, or ?tail=N; filters api, status, model)
    GET    /llmsim/v1/sessions          the WebSocket sessions kept (open, then the newest 1,000 ended)
    POST   /llmsim/v1/wait-idle         {"timeout": seconds} -> {"idle": bool}
    GET    /llmsim/v1/errors            internal errors the server hit (what check() raises)
"""

from __future__ import annotations

import dataclasses
import hmac
import json
from collections.abc import Callable
from typing import Any, Protocol

from werkzeug.datastructures import MultiDict
from werkzeug.wrappers import Request, Response

from ..content.replies import Rule, reply_from_json
from ..sim import SimError
from ..sim.config import ConfigError, is_profile_path, profile_names
from ..sim.control_json import CONTROL_PREFIX, config_to_json, plain, record_to_json, snapshot_to_json
from ..sim.faults import FaultError, fault_kinds
from ..sim.request_log import RequestRecord
from ..sim.secrets import key_fingerprint
from .backend_operations import BackendOperations, ServedBackend
from .fleet import fleet_metrics
from .request_body import read_json_body


class ControlledServer(ServedBackend, Protocol):
    """What the control API needs of the server it answers for (the server imports this module, not
    the other way round): the operations' server, and its address."""

    host: str
    port: int

    @property
    def ca_file(self) -> str:
        """The PEM file of the certificate authority HTTPS answers are signed by (made on first use)."""

__all__ = ["CONTROL_PREFIX", "ControlAPI", "ControlledServer", "host_name"]
MAX_PAGE = 1000
MAX_CONTROL_BODY = 16 * 1024 * 1024
# Names a page on this machine reaches the backend by; any port. Others (a DNS-rebinding
# attacker's name pointed at 127.0.0.1) are refused unless allowed (--allowed-hosts).
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1", "[::1]"})
# Methods a web page can send to another site without a CORS preflight (which this API never
# answers): they need Content-Type: application/json, which such a page cannot send. (DELETE
# always needs a preflight.)
STATE_CHANGING = frozenset({"POST", "PUT", "PATCH"})


def host_name(value: str) -> str:
    """The name in a ``Host`` header or an origin's authority, without its port, lower-cased."""
    value = value.strip().lower()
    if value.startswith("["):  # [v6]:port
        end = value.find("]")
        return value[:end + 1] if end > 0 else value
    name, _, port = value.rpartition(":")
    return name if name and port.isdigit() else value


def _json(body: Any, status: int = 200) -> Response:
    return Response(json.dumps(body), status=status, content_type="application/json")


def _error(status: int, message: str, code: str) -> Response:
    return _json({"error": {"message": message, "type": "invalid_request_error", "param": None, "code": code}},
                 status)


class ControlAPI:
    """Answers ``/llmsim/v1/...`` for one server and its simulator."""

    def __init__(self, server: ControlledServer) -> None:
        self._server = server
        self._operations = BackendOperations(server)
        self.token: str | None = None
        self.allowed_hosts: frozenset[str] = frozenset()  # host names accepted besides loopback and the listen one
        # The first replica of a fleet (llmsim serve --replicas): its own address and the others' (GET fleet)
        self.fleet: tuple[str, list[str]] | None = None
        self._routes: dict[tuple[str, str], Callable[[Request], Response]] = {
            ("GET", "config"): self._get_config,
            ("PATCH", "config"): self._patch_config,
            ("POST", "reset"): self._reset,
            ("GET", "faults"): self._get_faults,
            ("POST", "faults"): self._add_fault,
            ("DELETE", "faults"): self._clear_faults,
            ("GET", "scenario"): self._get_scenario,
            ("PUT", "scenario"): self._put_scenario,
            ("DELETE", "scenario"): self._clear_scenario,
            ("POST", "replies"): self._replies,
            ("GET", "rules"): self._get_rules,
            ("POST", "rules"): self._add_rule,
            ("DELETE", "rules"): self._clear_rules,
            ("GET", "metrics"): self._metrics,
            ("GET", "history"): self._history,
            ("GET", "histograms"): self._histograms,
            ("GET", "fault-kinds"): self._fault_kinds,
            ("GET", "requests"): self._requests,
            ("GET", "sessions"): self._sessions,
            ("POST", "wait-idle"): self._wait_idle,
            ("GET", "errors"): self._errors,
            ("GET", "trace"): self._trace,
            ("GET", "tls"): self._tls,
            ("GET", "fleet"): self._fleet,
        }

    def _allowed_names(self) -> frozenset[str]:
        return LOOPBACK_NAMES | self.allowed_hosts | {host_name(self._server.host)}

    def host_allowed(self, host: str | None) -> bool:
        """Whether a request naming ``host`` (its Host header) may be answered: loopback's names, the listen
        address and ``allowed_hosts``; a page that DNS rebinding pointed here names its own site."""
        return host is None or host_name(host) in self._allowed_names()

    def _refusal(self, request: Request) -> Response | None:
        """A 403 for a request a web page could have made (another origin, or DNS rebinding), else None."""
        allowed = self._allowed_names()
        host = request.headers.get("Host")
        if host is not None and host_name(host) not in allowed:
            return _error(403, f"The control API answers only to Host localhost, 127.0.0.1, [::1] or the listen "
                               f"address, not {host!r} (allow more with --allowed-hosts).", "forbidden_host")
        origin = request.headers.get("Origin")
        if origin is not None:
            authority = origin.partition("://")[2] if "://" in origin else ""
            if not authority or host_name(authority) not in allowed:
                return _error(403, f"The control API refuses requests from web pages of other origins "
                                   f"({origin!r}).", "forbidden_origin")
        return None

    def handle(self, request: Request) -> Response:
        refusal = self._refusal(request)
        if refusal is not None:
            return refusal
        if self.token is not None:
            scheme, _, given = request.headers.get("Authorization", "").strip().partition(" ")
            # the scheme is case-insensitive (RFC 9110 §11.1); the token is compared in constant time
            if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), self.token.encode()):
                return _error(401, "The control API needs 'Authorization: Bearer <control token>'.",
                              "invalid_control_token")
        name = request.path[len(CONTROL_PREFIX):]
        handler = self._routes.get((request.method, name))
        if handler is None:
            allowed = sorted(method for method, path in self._routes if path == name)
            if allowed:
                return _error(405, f"Method {request.method} is not allowed on {request.path}; use "
                                   f"{', '.join(allowed)}.", "method_not_allowed")
            return _error(404, f"Unknown control route: {request.method} {request.path}.", "unknown_url")
        if request.method in STATE_CHANGING:
            mimetype = (request.headers.get("Content-Type") or "").partition(";")[0].strip().lower()
            if mimetype != "application/json":
                return _error(415, f"The control API's {', '.join(sorted(STATE_CHANGING))} calls take "
                                   f"Content-Type: application/json (a web page cannot send it to another site "
                                   f"without asking first), not {mimetype or 'none'!r}.", "unsupported_media_type")
        try:
            return handler(request)
        except SimError as error:  # the body could not be read or parsed
            response = _error(error.status, error.message, error.code or "invalid_body")
            response.headers.update(error.headers)
            return response
        except (ConfigError, FaultError, TypeError, ValueError) as error:
            return _error(400, str(error), "invalid_value")

    def _body(self, request: Request) -> dict[str, Any]:
        # its own limit: a test may set max_body_bytes small and still reset the backend
        body, _ = read_json_body(request.environ, MAX_CONTROL_BODY, "the control API's limit",
                                 self._operations.config.keepalive_timeout, empty={})
        if not isinstance(body, dict):
            raise ValueError("the control API takes a JSON object")
        return body

    def _profiles(self) -> tuple[str | None, ...]:
        return self._operations.config.profile, self._operations.base.profile

    def _tls(self, request: Request) -> Response:
        ca_file = self._server.ca_file
        with open(ca_file, encoding="ascii") as pem:
            return _json({"ca_file": ca_file, "ca_pem": pem.read()})

    def _get_config(self, request: Request) -> Response:
        return _json(config_to_json(self._operations.config))

    def _patch_config(self, request: Request) -> Response:
        settings = _without_profile_paths(self._body(request), self._profiles())
        return _json(config_to_json(self._operations.configure(**settings)))

    def _reset(self, request: Request) -> Response:
        settings = self._body(request).get("settings")
        if settings is not None and not isinstance(settings, dict):
            raise ValueError("'settings' must be an object of settings")
        settings = _without_profile_paths(settings or {}, self._profiles())
        self._operations.reset(None if not settings else self._operations.base.replace(**settings))
        return _json(config_to_json(self._operations.config))

    def _history(self, request: Request) -> Response:
        """The last five minutes of load, one sample a second (the live page's charts, kept server-side)."""
        history = self._operations.simulator.history
        return _json({"seconds": history.seconds, "samples": history.recent()})

    def _get_faults(self, request: Request) -> Response:
        """Every fault added since the last clear, in the order tried, with ``hits`` and ``spent`` (a ``times``
        fault whose times are used: listed, no longer tried)."""
        return _json([{**dataclasses.asdict(state.fault), "hits": state.hits, "spent": state.spent,
                       **({"key": key_fingerprint(state.fault.key)} if state.fault.key else {})}
                      for state in self._operations.fault_states])  # a key leaves the process fingerprinted

    def _add_fault(self, request: Request) -> Response:
        body = self._body(request)
        kind = body.pop("kind", None)
        if not isinstance(kind, str):
            raise ValueError("a fault needs its 'kind'")
        return _json(dataclasses.asdict(self._operations.add_fault(kind, **body)), 201)

    def _get_scenario(self, request: Request) -> Response:
        return _json(self._operations.scenario_state())

    def _put_scenario(self, request: Request) -> Response:
        phases = self._body(request).get("phases")
        if not isinstance(phases, list):
            raise ValueError("a scenario is {\"phases\": [...]}: a list of phases")
        self._operations.set_scenario(phases)
        return _json(self._operations.scenario_state())

    def _clear_scenario(self, request: Request) -> Response:
        self._operations.set_scenario(())
        return _json({})

    def _clear_faults(self, request: Request) -> Response:
        self._operations.clear_faults()
        return _json([])

    def _replies(self, request: Request) -> Response:
        """Queue replies, each in its JSON form (a bare string is text)."""
        replies = self._body(request).get("replies")
        if not isinstance(replies, list):
            raise ValueError("'replies' must be a list of replies (strings, or {'text'|'json'|'tool_calls'|"
                             "'error': ...} objects)")
        self._operations.reply_with([reply_from_json(reply) for reply in replies])
        return _json({"queued": len(replies)})

    def _get_rules(self, request: Request) -> Response:
        return _json([rule.to_json() for rule in self._operations.rules])

    def _add_rule(self, request: Request) -> Response:
        return _json(self._operations.add_rule(Rule.from_json(self._body(request))).to_json(), 201)

    def _clear_rules(self, request: Request) -> Response:
        self._operations.clear_rules()
        return _json([])

    def _metrics(self, request: Request) -> Response:
        return _json(snapshot_to_json(self._operations.snapshot()))

    def _fleet(self, request: Request) -> Response:
        if self.fleet is None:
            return _error(404, "This backend is not the first replica of a fleet (llmsim serve --replicas N): ask "
                               "that one, at the address it printed first.", "not_a_fleet")
        own_url, others = self.fleet
        return _json(fleet_metrics(snapshot_to_json(self._operations.snapshot()), own_url, others, self.token))

    def _histograms(self, request: Request) -> Response:
        return _json(plain(self._operations.histograms()))

    def _fault_kinds(self, request: Request) -> Response:
        return _json(fault_kinds())

    def _requests(self, request: Request) -> Response:
        records = _filtered(self._operations.requests(), request.args)
        limit = min(_count_arg(request.args, "limit", MAX_PAGE), MAX_PAGE)
        if "tail" in request.args:  # the newest N, oldest first (a live view's poll)
            offset = max(len(records) - min(_count_arg(request.args, "tail", MAX_PAGE), MAX_PAGE), 0)
        else:
            offset = _count_arg(request.args, "offset", 0)
        page = records[offset:offset + limit]
        return _json({"total": len(records), "offset": offset, "records": [record_to_json(r) for r in page]})

    def _sessions(self, request: Request) -> Response:
        return _json({"sessions": [dataclasses.asdict(record) for record in self._operations.sessions()]})

    def _wait_idle(self, request: Request) -> Response:
        return _json({"idle": self._operations.wait_idle(float(self._body(request).get("timeout", 5.0)))})

    def _trace(self, request: Request) -> Response:
        """The trace as Chrome trace-event JSON (``?format=svg``: the SVG timeline)."""
        label = self._operations.label(self._server.port)
        if request.args.get("format") == "svg":
            svg = self._operations.trace_svg(label, request.args.get("title", ""))
            return Response(svg, content_type="image/svg+xml")
        return _json(self._operations.trace(label))

    def _errors(self, request: Request) -> Response:
        return _json([f"{type(error).__name__}: {error}" for error in self._operations.errors()])


def _count_arg(args: MultiDict[str, str], name: str, default: int) -> int:
    """A non-negative integer query parameter (a ValueError naming it answers 400)."""
    text = args.get(name)
    if text is None:
        return default
    if not text.isdigit():
        raise ValueError(f"query parameter {name!r} must be a non-negative integer, not {text!r}")
    return int(text)


def _filtered(records: list[RequestRecord], args: MultiDict[str, str]) -> list[RequestRecord]:
    """The records matching ``api``, ``status`` (a code, or a class such as ``4xx``) and ``model``."""
    api, model = args.get("api"), args.get("model")
    status_matches = _status_matcher(args.get("status"))
    return [record for record in records if (api is None or record.api == api)
            and (model is None or record.model == model) and status_matches(record.status)]


def _status_matcher(status: str | None) -> Callable[[int], bool]:
    """``status`` as a test of a status code: any (None), one code (``429``), or a class (``4xx``)."""
    if status is None:
        return lambda code: True
    if status.isdigit():
        wanted = int(status)
        return lambda code: code == wanted
    if len(status) == 3 and status[0].isdigit() and status[1:].lower() == "xx":
        hundreds = int(status[0])
        return lambda code: code // 100 == hundreds
    raise ValueError(f"query parameter 'status' must be a status code or a class such as '4xx', not {status!r}")


def _without_profile_paths(settings: dict[str, Any], in_force: tuple[str | None, ...]) -> dict[str, Any]:
    """``settings``, refused if its ``profile`` names a file: over HTTP, profiles by preset name only
    (a path would let a client probe and read the server's files). ``in_force``: the profiles the
    server already runs with (given on its command line), which a client may name again."""
    profile = settings.get("profile")
    if isinstance(profile, str) and profile not in in_force and (
            is_profile_path(profile) or profile not in profile_names()):
        raise ConfigError(f"the control API takes a profile by preset name only ({', '.join(profile_names())}); "
                          f"a .toml file is given with --config or in Python")
    return settings
