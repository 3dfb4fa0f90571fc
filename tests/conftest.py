"""Shared test set-up: the pytester plugin, and SDK clients closed after each test (and LiteLLM's at the end)."""

from __future__ import annotations

import asyncio
import gc
import inspect
import os
import sys
from collections.abc import Iterator
from typing import Any

import anthropic
import hypothesis  # noqa: F401  # see below
import openai
import pytest

# CPython 3.11.7 keeps the AST converter's recursion depth per interpreter, not per call (fixed in 3.11.8): when
# the garbage collector runs during an ast.parse and finalizes what pydantic-ai, openai-agents or LiteLLM left
# (unclosed transports, async generators), the warning's traceback is formatted, which itself calls ast.parse
# (3.11's caret anchors), and the outer parse raises "SystemError: AST constructor recursion depth mismatch".
# So: hypothesis (whose plugin would import it through pytest's assertion rewriter, ast.parse, at the end of a
# session that had not) is imported at collection, and the collect_garbage fixture below finalizes a framework
# test's leftovers before the next test parses anything.

pytest_plugins = ["pytester"]


def _share_the_default_ssl_context() -> None:
    """Every ``httpx.post(...)`` builds a client, and every client a default SSL context, loading certifi's
    bundle: 32 ms a call against 1.3 ms with a client kept (measured), for plain-HTTP calls that never use it,
    and this suite makes thousands. The default context (no custom verify or cert, the same environment) is
    built once; anything else is built as httpx builds it."""
    import httpx._transports.default as transport

    original = transport.create_ssl_context
    built: dict[tuple[Any, ...], Any] = {}

    def create_ssl_context(verify: Any = True, cert: Any = None, trust_env: bool = True) -> Any:
        if verify is not True or cert is not None:
            return original(verify=verify, cert=cert, trust_env=trust_env)
        key = (trust_env, os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))
        if key not in built:
            built[key] = original(verify=verify, cert=cert, trust_env=trust_env)
        return built[key]

    transport.create_ssl_context = create_ssl_context  # type: ignore[assignment]


_share_the_default_ssl_context()

# Third-party plugins an inner pytest would load for nothing: langsmith's (LangChain's) and hypothesis's cost
# ~3 s of imports per run (4.1 s for an empty test file, 1.2 s without them). The pytester runs go further: the
# others (html, metadata, httpserver, anyio) cost 0.3 s more, and this suite runs dozens of them, so they load no
# plugin by entry point, only this one and xdist's (PYTEST_DISABLE_PLUGIN_AUTOLOAD).
INNER_PYTEST_ADDOPTS = "-p no:langsmith_plugin -p no:hypothesispytest"
PYTESTER_ADDOPTS = "-p pytest_llmsim.plugin -p xdist.plugin"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "long_running: one of the suite's longest tests (started first)")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The longest tests first (a stable sort keeps the rest in order). Under xdist the first items are handed
    out round robin, so these start at once and overlap the many short ones; collected late (the
    process-mode suites, each a whole pytest session of 20 s, are in ``test_remote.py``) one of them was
    the run's tail, a worker busy alone while the other idled."""
    items.sort(key=lambda item: item.get_closest_marker("long_running") is None)


@pytest.fixture(autouse=True)
def _lean_inner_pytest(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Inner pytest runs (in-process or subprocess) skip the slow plugins above."""
    if "pytester" in request.fixturenames:
        request.getfixturevalue("pytester")  # first: it clears PYTEST_ADDOPTS when it starts
        monkeypatch.setenv("PYTEST_ADDOPTS", f"{os.environ.get('PYTEST_ADDOPTS', '')} {PYTESTER_ADDOPTS}".strip())
        monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")


@pytest.fixture
def bedrock(llm_backend: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> Iterator[Any]:
    """A bedrock-runtime client of ``llm_backend`` whose credentials never refresh and never leave the machine
    (boto3 imported here: only its tests pay for it)."""
    import boto3
    import botocore.config

    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_CONFIG_FILE", os.fspath(tmp_path / "config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", os.fspath(tmp_path / "credentials"))
    client = boto3.client("bedrock-runtime", endpoint_url=llm_backend.root_url, region_name="us-east-1",
                          aws_access_key_id="AKIDTEST", aws_secret_access_key="test",
                          config=botocore.config.Config(retries={"mode": "standard", "total_max_attempts": 1}))
    yield client
    client.close()


@pytest.fixture
def collect_garbage() -> Iterator[None]:
    """Finalize what the test's client libraries left behind now, not during a later ast.parse (see above);
    for tests of frameworks that leave event loops and transports unclosed."""
    yield
    if sys.version_info[:3] == (3, 11, 7):
        gc.collect()


@pytest.fixture(autouse=True)
def _close_sdk_clients(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Tests make SDK clients freely; their kept-alive connections are closed after each test
    (left to the GC, every pooled socket would raise a ResourceWarning somewhere later)."""
    created: list[Any] = []
    for cls in (openai.OpenAI, anthropic.Anthropic):
        original = cls.__init__

        def init(self: Any, *args: Any, _original: Any = original, **kwargs: Any) -> None:
            _original(self, *args, **kwargs)
            caller = sys._getframe(1).f_globals.get("__name__", "")
            if not caller.startswith("litellm"):  # a gateway's clients are the gateway's to manage
                created.append(self)

        monkeypatch.setattr(cls, "__init__", init)
    yield
    for client in created:
        client.close()


@pytest.fixture(scope="session", autouse=True)
def _close_litellm_clients() -> Iterator[None]:
    """LiteLLM keeps the clients it makes, per backend URL, in a module-level cache and never closes
    them; every test's backend is a new URL, so at exit their pooled sockets were reported unclosed
    (8 ResourceWarnings per run). Closed when the session ends."""
    yield
    litellm = sys.modules.get("litellm")
    if litellm is None:
        return
    cache = litellm.in_memory_llm_clients_cache
    for client in list(cache.cache_dict.values()):
        close = getattr(client, "close", None) or getattr(client, "aclose", None)
        if close is None:
            continue
        try:
            result = close()
            if inspect.isawaitable(result):
                asyncio.run(result)
        except Exception:  # a client whose loop is gone: nothing left to close
            pass
    cache.flush_cache()


@pytest.fixture
def loopback_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail any connection to an address other than loopback: a cloud SDK under test must never reach
    its provider (a credential refresh, a metadata server, a region lookup)."""
    import ipaddress
    import socket

    original = socket.socket.connect

    def connect(self: socket.socket, address: Any) -> Any:
        host = address[0] if isinstance(address, tuple) else None
        if host is not None and self.family in (socket.AF_INET, socket.AF_INET6):
            try:
                loopback = ipaddress.ip_address(host.split("%")[0]).is_loopback
            except ValueError:
                loopback = host == "localhost"
            if not loopback:
                raise AssertionError(f"a test connected to {address!r}: only 127.0.0.1 is allowed here")
        return original(self, address)

    monkeypatch.setattr(socket.socket, "connect", connect)
