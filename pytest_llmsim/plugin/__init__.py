"""pytest wiring: options, markers, fixtures, report header and summary.

Only wiring lives here: the options are ``plugin/options.py``, the markers
``plugin/markers.py``; settings are validated by :mod:`pytest_llmsim.sim.config`,
backends are :class:`~pytest_llmsim.backend.LLMBackend` objects.

Fixture tiers (as in pytest-httpserver): overridable session fixtures
(``llmsim_listen_address``, ``llmsim_config``) -> a session backend started
once (``llmsim_session_backend``) -> the function-scoped ``llm_backend``,
reset *before* each test and then set from the test's markers.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from ..backend import LLMBackend
from ..gc_pacing import CollectionPacer, PauseWatch, freeze_startup
from ..isolation import ProcessBackend, spawn_backend
from ..pool import BackendPool
from ..sdk_environment import environment_set
from ..server.cores import missing_for_io
from ..sim.config import SimConfig
from .cassettes import CassetteHandle, open_cassette, record_warning
from .markers import MARKERS, faults_from_markers, replies_from_markers, settings_from_markers
from .markers import arm as _arm
from .options import OPTIONS, OptionSettings, ini_value, parse_isolation, resolve_options
from .report import Reporter, summary_row, warn_if_lagging
from .trace_files import TraceFiles, attach_to_html_report, keep_report

# A backend in the test's process, or one in its own (``--llmsim-isolation=process``).
AnyBackend = LLMBackend | ProcessBackend

__all__ = ["OptionSettings", "faults_from_markers", "replies_from_markers", "resolve_options",
           "settings_from_markers"]

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


def pytest_configure(config: pytest.Config) -> None:
    for text in MARKERS.values():
        config.addinivalue_line("markers", text)
    cli = {o.name: config.getoption(f"llmsim_{o.name}") for o in OPTIONS}
    ini = {o.name: ini_value(config, o) for o in OPTIONS}
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


def pytest_report_header(config: pytest.Config) -> str:
    s = config.stash[_SETTINGS_KEY]
    isolation = "" if s.isolation == "thread" else f", isolation={s.isolation}"
    frozen = ", gc-freeze" if s.gc_freeze else ""
    header = f"llmsim: speed={s.speed:g}, seed={s.seed}, model={s.model}, host={s.host}{isolation}{frozen}"
    warning = record_warning(s)
    return header if warning is None else f"{header}\n{warning}"


@pytest.fixture
def llm_cassette(request: pytest.FixtureRequest) -> Iterator[CassetteHandle]:
    """This test's cassette of a real provider's answers, served on loopback (see :mod:`.cassettes`): point the
    client at ``llm_cassette.url``; ``--llmsim-record`` says whether it is played only (the default) or recorded."""
    yield from open_cassette(request, request.config.stash[_SETTINGS_KEY])


# --- fixtures ---


@pytest.fixture(scope="session")
def llmsim_listen_address(pytestconfig: pytest.Config) -> tuple[str, int]:
    """``(host, port)`` the session's backend listens on; override to change it.

    Defaults to ``(--llmsim-host, --llmsim-port)``: loopback and a free port picked by the OS (port 0).
    A fixed port under pytest-xdist gets the worker's number added (``gw2``: port + 2), so workers do not
    collide.
    """
    settings = pytestconfig.stash[_SETTINGS_KEY]
    return (settings.host, worker_port(settings.port, os.environ.get("PYTEST_XDIST_WORKER")))


def worker_port(port: int, worker: str | None) -> int:
    """``port`` for the pytest-xdist worker named ``worker`` (``gw3``: ``port + 3``); 0 stays 0 (a free port)."""
    if not port or not worker or not worker.startswith("gw") or not worker[2:].isdigit():
        return port
    return port + int(worker[2:])


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
    io = {"process-gevent": "gevent", "process-loop": "loop"}.get(isolation, "threads")
    missing = missing_for_io(io)
    if missing is not None:
        raise pytest.UsageError(f"--llmsim-isolation={isolation} {missing}")
    return spawn_backend(config, host, io=io, port=port)


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
    serve`` subprocess, ``"process-gevent"`` as one served with ``--io gevent``, ``"process-loop"``
    with ``--io loop``
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
        mode = parse_isolation(isolation or default_isolation)
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
def llm_backend_env(llmsim_session_backend: AnyBackend) -> Iterator[dict[str, str]]:
    """Every official SDK pointed at the session's backend through its own environment variables
    (``OPENAI_BASE_URL``, ``ANTHROPIC_BASE_URL``, ``GOOGLE_GEMINI_BASE_URL``, ``OLLAMA_HOST``,
    ``AWS_ENDPOINT_URL_BEDROCK_RUNTIME``, ``AZURE_OPENAI_ENDPOINT``, ``CO_API_URL`` and their keys; the
    dict of ``llm_backend.env()``), so application code that builds its own clients runs unchanged.

    Set from the first test that asks for it to the end of the session, then restored. A client made
    before that keeps the address it read: cohere's clients read ``CO_API_URL`` when ``cohere`` is first
    imported, and ollama's module functions (``ollama.chat``) use a client made at import.
    """
    with environment_set(llmsim_session_backend.env()) as variables:
        yield dict(variables)


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
