"""pytest wiring: options, markers, fixtures, report header and summary.

Only wiring lives here: settings are validated by :mod:`pytest_llmsim.sim.config`,
backends are :class:`~pytest_llmsim.backend.LLMBackend` objects.

Fixture tiers (as in pytest-httpserver): overridable session fixtures
(``llmsim_listen_address``, ``llmsim_config``) -> a session backend started
once (``llmsim_session_backend``) -> the function-scoped ``llm_backend``,
reset *before* each test and then set from the test's markers.
"""

from __future__ import annotations

import functools
import importlib.util
import math
import os
import re
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pytest

from .backend import LLMBackend
from .content.replies import Rule, normalize_reply
from .gc_pacing import CollectionPacer, PauseWatch, freeze_startup
from .isolation import ProcessBackend, spawn_backend
from .pool import BackendPool
from .report import Reporter, summary_row, warn_if_lagging
from .sim.config import SETTING_NAMES, ConfigError, SimConfig
from .sim.faults import Fault, FaultError
from .trace_files import TraceFiles, attach_to_html_report, keep_report

# A backend in the test's process, or one in its own (``--llmsim-isolation=process``).
AnyBackend = LLMBackend | ProcessBackend

__all__ = ["OptionSettings", "resolve_options"]

# --- options: each is a --llmsim-NAME flag, an llmsim_NAME ini key and a
# PYTEST_LLMSIM_NAME environment variable; flag over env over ini. ---

SPEED_HELP = ("Simulated seconds per wall second for every backend: a positive number or inf "
              "(simulated latencies and metrics do not change with it)")
SEED_HELP = "Seed for generated content, latency jitter and fault selection"
MODEL_HELP = "Model name the backends serve and report by default"
HOST_HELP = "Address the backends listen on (loopback only is the safe choice)"
REPORT_HELP = "Show a summary of what the backend served in each test"
ISOLATION_HELP = ("Where backends run: thread (in the test process, the default), process "
                  "(each an llmsim serve subprocess, driven over its control API) or process-gevent "
                  "(the same, served with llmsim serve --io gevent)")
ISOLATION_MODES = ("thread", "process", "process-gevent")
TRACE_HELP = ("Write each test's backend traces (Chrome trace JSON and an SVG timeline) into this directory, "
              "named by test id and backend")
TRACE_ON_HELP = "Which tests' traces --llmsim-trace writes: all (the default) or failed"
TRACE_ON = ("all", "failed")
GC_FREEZE_HELP = ("After collection, move every object alive (what the test modules imported) out of the "
                  "garbage collector's way (gc.freeze): a full collection then skips them instead of stopping "
                  "the process, an embedded backend's streams included, for hundreds of milliseconds; and "
                  "collect the young generations as llmsim serve does, paced by the in-process backends' "
                  "requests")

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off", "")


def _parse_speed(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not value > 0:  # also rejects nan
        raise ValueError("expected a positive number or 'inf'")
    return value


def _parse_seed(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise ValueError("expected a non-negative integer")
    return value


def _parse_text(text: str) -> str:
    if not text.strip():
        raise ValueError("expected a non-empty string")
    return text.strip()


def _parse_isolation(text: str) -> str:
    mode = text.strip().lower()
    if mode not in ISOLATION_MODES:
        raise ValueError(f"expected one of {', '.join(ISOLATION_MODES)}")
    return mode


def _parse_trace_on(text: str) -> str:
    value = text.strip().lower()
    if value not in TRACE_ON:
        raise ValueError(f"expected one of {', '.join(TRACE_ON)}")
    return value


def _parse_flag(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ValueError("expected true or false")


@dataclass(frozen=True)
class _Option:
    name: str
    help: str
    parse: Callable[[str], Any]
    default: Any
    is_flag: bool = False


OPTIONS: tuple[_Option, ...] = (
    _Option("speed", SPEED_HELP, _parse_speed, 1.0),
    _Option("seed", SEED_HELP, _parse_seed, 0),
    _Option("model", MODEL_HELP, _parse_text, SimConfig().model),
    _Option("host", HOST_HELP, _parse_text, "127.0.0.1"),
    _Option("report", REPORT_HELP, _parse_flag, False, is_flag=True),
    _Option("isolation", ISOLATION_HELP, _parse_isolation, "thread"),
    _Option("trace", TRACE_HELP, _parse_text, None),
    _Option("trace_on", TRACE_ON_HELP, _parse_trace_on, "all"),
    _Option("gc_freeze", GC_FREEZE_HELP, _parse_flag, False, is_flag=True),
)


@dataclass(frozen=True)
class OptionSettings:
    """The plugin's options after resolution."""

    speed: float
    seed: int
    model: str
    host: str
    report: bool
    isolation: str = "thread"
    trace: str | None = None
    trace_on: str = "all"
    gc_freeze: bool = False


def resolve_options(cli: Mapping[str, Any], env: Mapping[str, str],
                    ini: Mapping[str, str | None]) -> OptionSettings:
    """Resolve each option, flag over environment over ini; bad values name their source.

    ``cli`` maps option names to the flag's value (None when not given),
    ``ini`` to the ini value (None or "" when not set).
    """
    values: dict[str, Any] = {}
    for option in OPTIONS:
        flag = f"--llmsim-{option.name.replace('_', '-')}"
        env_name = f"PYTEST_LLMSIM_{option.name.upper()}"
        sources = [
            (cli.get(option.name), flag),
            (env.get(env_name), f"environment variable {env_name}"),
            (ini.get(option.name), f"ini option llmsim_{option.name}"),
        ]
        values[option.name] = option.default
        for raw, source in sources:
            if raw is None or (raw == "" and source != flag):
                continue
            if isinstance(raw, bool):
                values[option.name] = raw
                break
            try:
                values[option.name] = option.parse(str(raw))
            except ValueError as error:
                raise pytest.UsageError(f"invalid {source} {str(raw)!r}: {error}") from None
            break
    return OptionSettings(**values)


_SETTINGS_KEY = pytest.StashKey[OptionSettings]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("llmsim", "simulated LLM backend (pytest-llmsim)")
    for option in OPTIONS:
        if option.is_flag:
            group.addoption(f"--llmsim-{option.name.replace('_', '-')}", action="store_true", default=None,
                            dest=f"llmsim_{option.name}", help=option.help)
            # a plain string, parsed by us, so a bad value is named like the others
            parser.addini(f"llmsim_{option.name}", option.help, default=None)
        else:
            group.addoption(f"--llmsim-{option.name.replace('_', '-')}", action="store", default=None,
                            dest=f"llmsim_{option.name}", metavar=option.name.upper(), help=option.help)
            parser.addini(f"llmsim_{option.name}", option.help, default=None)


# --- markers ---

_MARKER_KEYS: dict[str, dict[str, str]] = {
    "llm_latency": {k: k for k in ("ttft", "itl", "prefill_per_token", "jitter", "load_factor")},
    "llm_cache": {"hit_rate": "cache_hit_rate", "block_size": "block_size",
                  "capacity_blocks": "cache_capacity_blocks"},
    "llm_batch": {"size": "max_batch_size", "max_waiting": "max_waiting"},
    "llm_config": {k: k for k in SETTING_NAMES},
}
MARKERS = {
    "llm_latency": "llm_latency(ttft=, itl=, prefill_per_token=, jitter=, load_factor=): simulated "
                   "latency of the llm_backend, in simulated seconds",
    "llm_cache": "llm_cache(hit_rate=, block_size=, capacity_blocks=): prefix-cache behaviour of the "
                 "llm_backend",
    "llm_batch": "llm_batch(size=, max_waiting=): continuous-batching limits of the llm_backend",
    "llm_config": "llm_config(**settings): any setting LLMBackend.configure() accepts",
    "llm_fault": "llm_fault(kind, **params): arm a fault on the llm_backend (repeatable; closest first), "
                 "e.g. llm_fault('rate_limit', times=2, retry_after=0.1)",
    "llm_realtime": "llm_realtime: run this test's llm_backend at speed 1 whatever --llmsim-speed says",
    "llm_reply": "llm_reply(*replies, prompt=, model=, tool=, api=, times=): scripted replies (text, dict, "
                 "ToolCall, ErrorReply); with a matcher or times, a rule, else queued in order (repeatable)",
}


def pytest_configure(config: pytest.Config) -> None:
    for text in MARKERS.values():
        config.addinivalue_line("markers", text)
    cli = {o.name: config.getoption(f"llmsim_{o.name}") for o in OPTIONS}
    ini = {o.name: _ini_value(config, o) for o in OPTIONS}
    settings = resolve_options(cli, os.environ, ini)
    config.stash[_SETTINGS_KEY] = settings
    if settings.report:
        config.pluginmanager.register(Reporter(), "llmsim-reporter")
    if settings.trace:
        files = TraceFiles(settings.trace, only_failed=settings.trace_on == "failed")
        problem = files.check_writable()
        if problem is not None:
            raise pytest.UsageError(f"--llmsim-trace: {problem}")
        config.stash[_TRACE_KEY] = files
    watch = PauseWatch()
    watch.install()
    config.stash[_PAUSES_KEY] = watch
    if settings.gc_freeze:
        config.stash[_PACER_KEY] = CollectionPacer()  # shared: it counts the process's requests


def pytest_unconfigure(config: pytest.Config) -> None:
    if _PAUSES_KEY in config.stash:
        config.stash[_PAUSES_KEY].uninstall()


def pytest_collection_finish(session: pytest.Session) -> None:
    """``--llmsim-gc-freeze``: what collection imported leaves the collector's generations for good."""
    if session.config.stash[_SETTINGS_KEY].gc_freeze:
        freeze_startup()


_TRACE_KEY = pytest.StashKey[TraceFiles]()
_PAUSES_KEY = pytest.StashKey[PauseWatch]()
_PACER_KEY = pytest.StashKey[CollectionPacer]()


def _gc_pause_since(config: pytest.Config, since: float) -> float:
    """The longest garbage-collector pause of this process since ``since`` (seconds; 0.0 if none)."""
    return config.stash[_PAUSES_KEY].longest_since(since) if _PAUSES_KEY in config.stash else 0.0


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """Keep each phase's outcome (traces of failed tests only) and attach timelines to pytest-html."""
    outcome = yield
    report: pytest.TestReport = outcome.get_result()  # type: ignore[attr-defined]
    if _TRACE_KEY in item.config.stash:
        keep_report(item, report)
        attach_to_html_report(item, report)


def _trace_before(request: pytest.FixtureRequest, backend: AnyBackend) -> None:
    files = request.config.stash.get(_TRACE_KEY, None)
    if files is not None:
        files.prepare(request.node.nodeid, backend)


def _trace_after(request: pytest.FixtureRequest, backend: AnyBackend) -> None:
    files = request.config.stash.get(_TRACE_KEY, None)
    if files is not None:
        files.write(request.node, backend)


def _ini_value(config: pytest.Config, option: _Option) -> str | None:
    value = config.getini(f"llmsim_{option.name}")
    if value is None or value == []:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def settings_from_markers(item: pytest.Item) -> dict[str, Any]:
    """Backend settings from the item's markers; the closest marker wins key by key."""
    settings: dict[str, Any] = {}
    markers = [m for m in item.iter_markers() if m.name in _MARKER_KEYS or m.name == "llm_realtime"]
    for marker in reversed(markers):  # farthest first, so closer ones override
        if marker.name == "llm_realtime":
            continue
        keys = _MARKER_KEYS[marker.name]
        if marker.args:
            raise pytest.UsageError(f"@pytest.mark.{marker.name} takes keyword arguments only "
                                    f"({', '.join(keys)}), got {marker.args!r}")
        for key, value in marker.kwargs.items():
            if key not in keys:
                raise pytest.UsageError(
                    f"@pytest.mark.{marker.name}: unknown argument {key!r}; accepted: {', '.join(keys)}")
            settings[keys[key]] = value
    if any(m.name == "llm_realtime" for m in markers):
        settings["speed"] = 1.0
    try:
        SimConfig().replace(**settings)
    except ConfigError as error:
        names = ", ".join(sorted({m.name for m in markers}))
        raise pytest.UsageError(f"bad llmsim marker value ({names}): {error}") from None
    return settings


def faults_from_markers(item: pytest.Item) -> list[tuple[str, dict[str, Any]]]:
    """``(kind, params)`` of every ``llm_fault`` marker, closest first, each validated."""
    faults = []
    for marker in item.iter_markers("llm_fault"):
        if len(marker.args) != 1 or not isinstance(marker.args[0], str):
            raise pytest.UsageError("@pytest.mark.llm_fault takes the fault kind as its one positional "
                                    f"argument, e.g. llm_fault('rate_limit', times=2); got {marker.args!r}")
        try:
            Fault.build(marker.args[0], **marker.kwargs)
        except FaultError as error:
            raise pytest.UsageError(f"@pytest.mark.llm_fault: {error}") from None
        faults.append((marker.args[0], dict(marker.kwargs)))
    return faults


_RULE_KEYS = ("prompt", "model", "tool", "api", "times")


def replies_from_markers(item: pytest.Item) -> list[Rule | tuple[Any, ...]]:
    """Every ``llm_reply`` marker, farthest first: a :class:`Rule` when it has a matcher or ``times``,
    else the replies to queue."""
    scripted: list[Rule | tuple[Any, ...]] = []
    for marker in reversed(list(item.iter_markers("llm_reply"))):
        unknown = sorted(set(marker.kwargs) - set(_RULE_KEYS))
        if unknown or not marker.args:
            raise pytest.UsageError(f"@pytest.mark.llm_reply takes replies as positional arguments and "
                                    f"{', '.join(_RULE_KEYS)} as keywords; got {marker.args!r}, {marker.kwargs!r}")
        try:
            if marker.kwargs:
                scripted.append(Rule(tuple(marker.args), **marker.kwargs))
            else:
                scripted.append(tuple(normalize_reply(reply) for reply in marker.args))
        except (TypeError, re.error) as error:
            raise pytest.UsageError(f"@pytest.mark.llm_reply: {error}") from None
    return scripted


def _arm(backend: AnyBackend, faults: list[tuple[str, dict[str, Any]]],
         scripted: list[Rule | tuple[Any, ...]]) -> None:
    """Arm a backend with the faults and scripted replies of a test's markers."""
    for kind, params in faults:
        backend.add_fault(kind, **params)
    for item in scripted:
        if isinstance(item, Rule):
            backend.add_rule(Rule(item.replies, item.prompt, item.model, item.tool, item.api, item.times))
        else:
            backend.reply_with(*item)


def pytest_report_header(config: pytest.Config) -> str:
    s = config.stash[_SETTINGS_KEY]
    isolation = "" if s.isolation == "thread" else f", isolation={s.isolation}"
    frozen = ", gc-freeze" if s.gc_freeze else ""
    return f"llmsim: speed={s.speed:g}, seed={s.seed}, model={s.model}, host={s.host}{isolation}{frozen}"


# --- fixtures ---


@pytest.fixture(scope="session")
def llmsim_listen_address(pytestconfig: pytest.Config) -> tuple[str, int]:
    """``(host, port)`` the session's backend listens on; override to change it.

    Defaults to ``(--llmsim-host, 0)``: loopback and a free port picked by the OS.
    """
    return (pytestconfig.stash[_SETTINGS_KEY].host, 0)


@pytest.fixture(scope="session")
def llmsim_config(pytestconfig: pytest.Config) -> SimConfig:
    """Settings every backend starts each test with; override for suite-wide defaults.

    Built from ``--llmsim-speed``, ``--llmsim-seed`` and ``--llmsim-model``.
    Override it from this value, so those options still apply::

        @pytest.fixture(scope="session")
        def llmsim_config(llmsim_config):
            return llmsim_config.replace(ttft=0.05, itl=0.01)
    """
    s = pytestconfig.stash[_SETTINGS_KEY]
    return SimConfig(speed=s.speed, seed=s.seed, model=s.model)


def _new_backend(config: SimConfig, host: str, isolation: str, port: int = 0,
                 pacer: CollectionPacer | None = None) -> AnyBackend:
    """A started backend where ``isolation`` says: this process (its requests ticking ``pacer``, when
    given), or an ``llmsim serve`` subprocess (which paces its own collector)."""
    if isolation == "thread":
        backend = LLMBackend(config, host=host, port=port)
        if pacer is not None:
            backend.on_request_done(pacer.request_done)
        return backend.start()
    if isolation == "process-gevent" and importlib.util.find_spec("gevent") is None:
        raise pytest.UsageError("--llmsim-isolation=process-gevent needs gevent: "
                                "pip install 'pytest-llmsim[gevent]'")
    return spawn_backend(config, host, io="gevent" if isolation == "process-gevent" else "threads")


@pytest.fixture(scope="session")
def llmsim_session_backend(llmsim_listen_address: tuple[str, int], llmsim_config: SimConfig,
                           pytestconfig: pytest.Config) -> Iterator[AnyBackend]:
    """The session's backend, started once; tests use ``llm_backend`` instead.

    With ``--llmsim-isolation=process`` it is an ``llmsim serve`` subprocess
    (a :class:`~pytest_llmsim.isolation.ProcessBackend`) on a free port.
    """
    host, port = llmsim_listen_address
    backend = _new_backend(llmsim_config, host, pytestconfig.stash[_SETTINGS_KEY].isolation, port,
                           pytestconfig.stash.get(_PACER_KEY, None))
    yield backend
    backend.stop()


@pytest.fixture
def llm_backend(llmsim_session_backend: AnyBackend, llmsim_config: SimConfig,
                request: pytest.FixtureRequest) -> Iterator[AnyBackend]:
    """An OpenAI-compatible simulated LLM backend, fresh for this test.

    The session's server, reset before the test (settings from
    ``llmsim_config``, empty cache, metrics and request log) and set from the
    test's ``llm_*`` markers. Point a client at ``llm_backend.base_url``.
    """
    backend = llmsim_session_backend
    config = llmsim_config.replace(**settings_from_markers(request.node))
    _revive(backend, llmsim_config, "before this test")
    backend.reset(config)
    _arm(backend, faults_from_markers(request.node), replies_from_markers(request.node))
    _trace_before(request, backend)
    started = time.monotonic()
    yield backend
    _revive(backend, llmsim_config, "during this test")
    _trace_after(request, backend)
    _record_for_report(request, backend)
    warn_if_lagging(backend, _gc_pause_since(request.config, started))
    backend.check()


def _revive(backend: AnyBackend, config: SimConfig, when: str) -> None:
    """A session's backend process that died: start a new one for the tests after, and fail here, once,
    saying how it died (every later test failed with 'Connection refused' on its reset before)."""
    if not isinstance(backend, ProcessBackend):
        return
    death = backend.death()
    if death is None:
        return
    backend.respawn(config)
    pytest.fail(f"{when}, {death}\n(a new backend process serves the tests after this one, at {backend.base_url})",
                pytrace=False)


@pytest.fixture
def llm_backend_factory(llmsim_listen_address: tuple[str, int], llmsim_config: SimConfig,
                        request: pytest.FixtureRequest) -> Iterator[Callable[..., AnyBackend]]:
    """Start more independent backends: ``llm_backend_factory(**settings)``.

    Each has its own port, engine, cache, metrics and log, starts from
    ``llmsim_config`` plus the test's ``llm_*`` markers plus ``settings``
    (explicit arguments win over markers; ``llm_fault`` markers arm every
    backend), and is stopped when the test ends. For primary/fallback and
    load-balancing tests. ``isolation="process"`` runs one as an ``llmsim
    serve`` subprocess, ``"process-gevent"`` as one served with ``--io gevent``
    (the default follows ``--llmsim-isolation``).
    """
    started: list[AnyBackend] = []
    host = llmsim_listen_address[0]
    from_markers = settings_from_markers(request.node)
    faults = faults_from_markers(request.node)
    scripted = replies_from_markers(request.node)
    default_isolation = request.config.stash[_SETTINGS_KEY].isolation

    def factory(isolation: str | None = None, **settings: Any) -> AnyBackend:
        # Markers set every backend of the test; explicit arguments win over them.
        config = llmsim_config.replace(**{**from_markers, **settings})
        mode = _parse_isolation(isolation or default_isolation)
        backend = _new_backend(config, host, mode, pacer=request.config.stash.get(_PACER_KEY, None))
        _arm(backend, faults, scripted)
        _trace_before(request, backend)
        started.append(backend)
        return backend

    began = time.monotonic()
    yield factory
    for backend in started:
        _trace_after(request, backend)
        _record_for_report(request, backend)
        warn_if_lagging(backend, _gc_pause_since(request.config, began))
        backend.stop()


@pytest.fixture(scope="session")
def llmsim_session_backends(llmsim_listen_address: tuple[str, int],
                            llmsim_config: SimConfig) -> Iterator[BackendPool]:
    """Named backends that live for the whole session: ``llmsim_session_backends.get("primary", **settings)``.

    For a gateway started once per session in front of several backends.
    Every backend in it is reset before each test that uses this fixture
    (directly or through another fixture): ``llmsim_config``, the test's
    markers, then the backend's own settings; report rows and the teardown
    check follow each such test.
    """
    pool = BackendPool(llmsim_config, llmsim_listen_address[0], "session")
    yield pool
    pool.stop()


@pytest.fixture(scope="module")
def llmsim_module_backends(llmsim_listen_address: tuple[str, int],
                           llmsim_config: SimConfig) -> Iterator[BackendPool]:
    """Named backends that live for one test module; otherwise as ``llmsim_session_backends``."""
    pool = BackendPool(llmsim_config, llmsim_listen_address[0], "module")
    yield pool
    pool.stop()


_POOL_FIXTURES = ("llmsim_session_backends", "llmsim_module_backends")


@pytest.fixture(autouse=True)
def _llmsim_pools(request: pytest.FixtureRequest) -> Iterator[None]:
    """Reset the long-lived backends a test uses before it; report and check them after it."""
    pools: list[BackendPool] = [request.getfixturevalue(name) for name in _POOL_FIXTURES
                                if name in request.fixturenames]
    if pools:
        markers, faults = settings_from_markers(request.node), faults_from_markers(request.node)
        scripted = replies_from_markers(request.node)
        for pool in pools:
            pool.prepare(markers, functools.partial(_arm, faults=faults, scripted=scripted))
            for backend in pool:
                _trace_before(request, backend)
    started = time.monotonic()
    yield
    for pool in pools:
        for backend in pool:
            _trace_after(request, backend)
            _record_for_report(request, backend)
            warn_if_lagging(backend, _gc_pause_since(request.config, started))
            backend.check()


# --- summary (--llmsim-report); rows travel in user_properties so xdist works ---


def _record_for_report(request: pytest.FixtureRequest, backend: AnyBackend) -> None:
    if request.config.stash[_SETTINGS_KEY].report:
        request.node.user_properties.append(("llmsim", summary_row(backend)))
