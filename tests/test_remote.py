"""The control API and RemoteBackend: drive a backend in another process the way a test drives its own."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from conftest import INNER_PYTEST_ADDOPTS
from pytest_llmsim import ConfigError, FaultError, LLMBackend, RemoteBackend, RemoteError

MESSAGES = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """`llmsim serve` in its own process, with a control token and a fault armed from the command line."""
    process = subprocess.Popen(
        [sys.executable, "-m", "pytest_llmsim.cli", "serve", "--port", "0", "--speed", "inf", "--model", "remote-m",
         "--control-token", "s3cret", "--fault", "rate_limit:nth=1,retry_after=0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert process.stdout is not None
    match = re.search(r"(http://127\.0\.0\.1:\d+)/v1", process.stdout.readline())
    assert match
    yield match.group(1), process
    process.send_signal(signal.SIGINT)
    process.communicate(timeout=10)


def test_a_remote_backend_is_driven_like_a_local_one(served: tuple[str, subprocess.Popen[str]]) -> None:
    url, _ = served
    remote = RemoteBackend(url + "/v1", token="s3cret")
    assert [f.kind for f in remote.faults] == ["rate_limit"]  # from --fault
    client = openai.OpenAI(base_url=remote.base_url, api_key="k", max_retries=0)
    with pytest.raises(openai.RateLimitError):
        client.chat.completions.create(model="remote-m", messages=MESSAGES, max_tokens=2)  # type: ignore[arg-type]

    remote.reset()
    assert remote.faults == [] and remote.metrics.requests_total == 0 and remote.requests == []
    remote.configure(ttft=0.25, answer_length=(2, 3))
    assert remote.config.ttft == 0.25 and remote.config.answer_length == (2, 3) and remote.speed == float("inf")
    remote.reply_with("scripted answer")
    remote.add_fault("server_error", nth=2)
    reply = client.chat.completions.create(model="remote-m", messages=MESSAGES)  # type: ignore[arg-type]
    assert reply.choices[0].message.content == "scripted answer"
    with pytest.raises(openai.InternalServerError):
        client.chat.completions.create(model="remote-m", messages=MESSAGES)  # type: ignore[arg-type]
    assert remote.wait_idle(timeout=5)

    metrics = remote.metrics
    assert metrics.requests_by_status == {200: 1, 500: 1} and metrics.faults == {"server_error": 1}
    assert metrics.ttft.p50 == 0.25
    (ok, failed) = remote.requests
    assert ok.status == 200 and ok.api == "openai.chat" and ok.headers["content-type"] == "application/json"
    assert failed.fault == "server_error"
    remote.assert_requests(2, path="/v1/chat/completions")
    remote.assert_ttft(p50_at_most=0.25)
    assert 'vllm:time_to_first_token_seconds_count{engine="0",model_name="remote-m"} 1.0' in remote.prometheus_text()
    remote.check()
    remote.clear_faults()
    assert remote.faults == []


def test_bad_values_raise_the_local_errors(served: tuple[str, subprocess.Popen[str]]) -> None:
    remote = RemoteBackend(served[0], token="s3cret")
    with pytest.raises(ConfigError, match="ttft"):
        remote.configure(ttft=-1)
    with pytest.raises(FaultError, match="nonsense"):
        remote.add_fault("nonsense")


def test_the_control_token_is_required(served: tuple[str, subprocess.Popen[str]]) -> None:
    url = served[0]
    assert httpx.get(url + "/llmsim/v1/config").status_code == 401
    assert httpx.get(url + "/llmsim/v1/config", headers={"Authorization": "Bearer nope"}).status_code == 401
    with pytest.raises(RemoteError, match="401"):
        RemoteBackend(url).metrics  # noqa: B018
    assert httpx.get(url + "/llmsim/v1/config", headers={"Authorization": "Bearer s3cret"}).json()["model"] == \
        "remote-m"


def test_control_calls_are_neither_logged_nor_counted(llm_backend: LLMBackend) -> None:
    remote = RemoteBackend(llm_backend.root_url)  # the session's own backend, no token
    remote.configure(ttft=0.1)
    remote.add_fault("rate_limit", times=1)
    assert llm_backend.config.ttft == 0.1 and [f.kind for f in llm_backend.faults] == ["rate_limit"]
    assert llm_backend.requests == [] and llm_backend.metrics.requests_total == 0
    assert httpx.get(llm_backend.url_for("/llmsim/v1/nothing")).status_code == 404
    assert httpx.post(llm_backend.url_for("/llmsim/v1/config")).status_code == 405


def test_curl_style_json_calls(llm_backend: LLMBackend) -> None:
    """What a suite in another language does: plain JSON over HTTP."""
    base = llm_backend.url_for("/llmsim/v1")
    assert httpx.patch(base + "/config", json={"itl": 0.02, "speed": "inf"}).json()["itl"] == 0.02
    assert httpx.post(base + "/faults", json={"kind": "overloaded", "times": 1}).status_code == 201
    assert httpx.post(base + "/replies", json={"replies": ["a", "b"]}).json() == {"queued": 2}
    httpx.post(llm_backend.url_for("/v1/chat/completions"), json={"model": "m", "messages": MESSAGES})
    page = httpx.get(base + "/requests", params={"offset": 0, "limit": 10}).json()
    assert page["total"] == 1 and page["records"][0]["status"] == 503
    assert httpx.get(base + "/metrics").json()["requests_by_status"] == {"503": 1}
    assert httpx.post(base + "/reset", json={}).status_code == 200 and llm_backend.requests == []
    assert httpx.post(base + "/reset").status_code == 415  # no JSON content type: what a web page can send


def test_remote_and_local_handles_offer_the_same_interface() -> None:
    def public(cls: type) -> set[str]:
        return {name for name in dir(cls) if not name.startswith("_")}

    local_only = {"httpserver", "start", "stop", "on_request_done", "own_url"}  # whoever runs the server owns these
    assert public(LLMBackend) - local_only == public(RemoteBackend)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_process_backend_dies_with_a_killed_parent(tmp_path: Path) -> None:
    script = tmp_path / "parent.py"
    script.write_text("import sys, time\n"
                      "from pytest_llmsim import SimConfig\n"
                      "from pytest_llmsim.isolation import spawn_backend\n"
                      "backend = spawn_backend(SimConfig())\n"
                      "print(backend.process.pid, flush=True)\n"
                      "time.sleep(60)\n")
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    parent.kill()  # as when pytest itself is killed: no teardown runs
    parent.wait()
    parent.stdout.close()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _alive(child):
        time.sleep(0.05)
    assert not _alive(child)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as status:
            return "State:\tZ" not in status.read()
    except FileNotFoundError:
        return False


# The HTTP-level suites whose answers depend on the serving core (framing, streams, keep-alive, timing, faults
# on the wire), rerun with every backend an `llmsim serve --io loop` subprocess: the loop core is a server of its
# own, and the process boundary (the control API, RemoteBackend) is crossed by every test. (A rerun with a thread
# per connection was dropped: its server is the in-process one every other test uses; the API-level suites, tools
# and models, do not depend on the core.)
HTTP_SUITES = ["test_http_openai.py", "test_http_anthropic.py", "test_http_responses.py", "test_faults.py",
               "test_bad_input.py", "test_http_timing.py", "test_keepalive.py", "test_wsgi_server.py"]


@pytest.mark.long_running
def test_the_http_level_suites_pass_in_process_mode() -> None:
    """The same HTTP-level tests, each backend an `llmsim serve --io loop` subprocess instead of a thread (a
    greenlet per connection on gevent's loop; `--io gevent` is another name for it). Every mode frames
    connections with the same class. One worker: the outer run already keeps both cores busy, and two inner
    workers cost 17 CPU-seconds more (each imports every SDK) for a run of the same length."""
    isolation, suites = "process-loop", HTTP_SUITES
    here = Path(__file__).parent
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-p", "no:xdist", "-W",
         "ignore::pytest_llmsim.LLMSimLagWarning", f"--llmsim-isolation={isolation}",
         *[str(here / name) for name in suites]],
        capture_output=True, text=True, timeout=600, cwd=here.parent,
        env={**os.environ, "PYTEST_ADDOPTS": f"{os.environ.get('PYTEST_ADDOPTS', '')} {INNER_PYTEST_ADDOPTS}"})
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert " passed" in result.stdout


def test_a_loopback_backend_is_reached_directly_whatever_http_proxy_says(
        served: tuple[str, subprocess.Popen[str]], monkeypatch: pytest.MonkeyPatch) -> None:
    """CI machines behind a corporate proxy set HTTP_PROXY and often leave loopback out of NO_PROXY. The
    control calls went through that proxy (here: a port nobody listens on), so every test failed to reach
    a backend on its own machine."""
    url, _ = served
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{closed.getsockname()[1]}"
    for name in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.setenv(name, dead)
    for name in ("no_proxy", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
    remote = RemoteBackend(url, token="s3cret")
    remote.reset()
    assert "llmsim:requests_total" in remote.prometheus_text()
    assert remote.metrics.requests_total == 0
