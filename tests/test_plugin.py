"""The pytest surface, through real pytest runs: in this process (pytester's in-process run: a fresh session and
plugin manager, ~1.5 s less a run than a subprocess) where the run sees only its own session, in a subprocess where
it looks at the process (its threads, its garbage collector, lag warnings, process isolation, xdist workers)."""

from __future__ import annotations

import socket

import pytest

from pytest_llmsim import LLMBackend, SimConfig
from pytest_llmsim.plugin import resolve_options, worker_port

HELPERS = '''
import threading
import httpx

CHAT = "/v1/chat/completions"

def ask(backend, content="hi", max_tokens=3, **extra):
    body = {"model": "m", "messages": [{"role": "user", "content": content}],
            "max_tokens": max_tokens, **extra}
    return httpx.post(backend.url_for(CHAT), json=body, timeout=30)

def ask_concurrently(backend, count, **kwargs):
    barrier = threading.Barrier(count)

    def worker(i):
        barrier.wait()
        ask(backend, f"q{i}", **kwargs)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
'''


@pytest.fixture
def helpers(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(llmsim_helpers=HELPERS)


def test_fixture_is_reset_before_each_test(pytester: pytest.Pytester, helpers: None) -> None:
    pytester.makepyfile("""
        from llmsim_helpers import ask

        def test_one(llm_backend):
            llm_backend.configure(ttft=5.0, speed=100)  # 50 ms of wall time
            llm_backend.reply_with("left over")
            assert ask(llm_backend).status_code == 200
            assert llm_backend.metrics.requests_total == 1

        def test_two(llm_backend):
            assert llm_backend.metrics.requests_total == 0
            assert llm_backend.requests == []
            assert (llm_backend.config.ttft, llm_backend.config.speed) == (0.0, 1.0)
            body = ask(llm_backend, max_tokens=50).json()
            assert body["choices"][0]["message"]["content"] != "left over"
    """)
    pytester.runpytest_inprocess("-p", "no:cacheprovider").assert_outcomes(passed=2)


def test_markers_change_behaviour(pytester: pytest.Pytester, helpers: None) -> None:
    pytester.makepyfile("""
        import pytest
        from llmsim_helpers import ask, ask_concurrently

        @pytest.mark.llm_batch(size=1)
        @pytest.mark.llm_latency(ttft=100, itl=0.01)
        @pytest.mark.llm_config(speed=100)
        def test_batch_of_one_queues(llm_backend):
            ask_concurrently(llm_backend, 2)
            m = llm_backend.metrics
            assert m.max_running == 1
            # the second waits for the first's 100 simulated seconds, less how much later it was sent: the two
            # sends can drift apart on a loaded machine (59 ms seen, then 252 ms with a load test beside the
            # suite: 25.2 simulated s at speed 100)
            assert m.queue_time.max > 25

        @pytest.mark.llm_batch(size=4)
        @pytest.mark.llm_latency(ttft=100)  # 1 s of wall time: two sends drifted 0.2 s apart under a loaded CI
        @pytest.mark.llm_config(speed=100)
        def test_batch_of_four_runs_together(llm_backend):
            ask_concurrently(llm_backend, 2)
            assert llm_backend.metrics.max_running == 2
            assert llm_backend.metrics.queue_time.max == 0.0

        @pytest.mark.llm_latency(ttft=0.25, itl=0.02, prefill_per_token=0.0)
        @pytest.mark.llm_config(speed="inf")
        def test_latency(llm_backend):
            ask(llm_backend, max_tokens=3)
            assert llm_backend.metrics.ttft.p50 == pytest.approx(0.25)
            assert llm_backend.metrics.itl.p50 == pytest.approx(0.02)

        @pytest.mark.llm_cache(hit_rate=0.5)
        def test_cache(llm_backend):
            ask(llm_backend, content="twelve tokens of prompt here to be cached")
            assert llm_backend.metrics.cache_hit_rate == pytest.approx(0.5, abs=0.05)
    """)
    pytester.runpytest_inprocess("-p", "no:cacheprovider").assert_outcomes(passed=4)


def test_closest_marker_wins_key_by_key(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        import pytest

        pytestmark = pytest.mark.llm_latency(ttft=1.0, itl=0.5)

        @pytest.mark.llm_latency(itl=0.2, jitter=0.1)
        class TestGroup:
            @pytest.mark.llm_latency(jitter=0.3)
            def test_inner(self, llm_backend):
                c = llm_backend.config
                assert (c.ttft, c.itl, c.jitter) == (1.0, 0.2, 0.3)

        def test_module_level(llm_backend):
            assert (llm_backend.config.ttft, llm_backend.config.itl) == (1.0, 0.5)
    """)
    pytester.runpytest_inprocess("-p", "no:cacheprovider").assert_outcomes(passed=2)


@pytest.mark.parametrize(("marker", "message"), [
    ("llm_latency(tfft=1)", "*llm_latency: unknown argument 'tfft'; accepted: ttft, itl, prefill_per_token*"),
    ("llm_batch(size=0)", "*bad llmsim marker value (llm_batch)*'max_batch_size': 0*"),
    ("llm_cache(0.5)", "*llm_cache takes keyword arguments only*"),
    ("llm_config(colour='red')", "*llm_config: unknown argument 'colour'*"),
    ("llm_fault('gremlins')", "*llm_fault: unknown fault kind 'gremlins'; accepted: rate_limit*"),
    ("llm_fault('drop', seconds=3)", "*llm_fault: fault 'drop': unknown parameter 'seconds'*"),
    ("llm_fault(times=2)", "*llm_fault takes the fault kind as its one positional argument*"),
])
def test_bad_marker_fails_setup_naming_it(pytester: pytest.Pytester, marker: str, message: str) -> None:
    pytester.makepyfile(f"""
        import pytest

        @pytest.mark.{marker}
        def test_x(llm_backend):
            pass
    """)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines([message])


def test_fault_markers(pytester: pytest.Pytester, helpers: None) -> None:
    pytester.makepyfile("""
        import pytest
        from llmsim_helpers import ask

        pytestmark = pytest.mark.llm_fault("server_error", prompt="module")

        @pytest.mark.llm_fault("rate_limit", times=2, retry_after=0)
        @pytest.mark.llm_fault("overloaded", nth=3)
        def test_faults(llm_backend):
            statuses = [ask(llm_backend).status_code for _ in range(4)]
            assert statuses == [429, 429, 503, 200]
            assert ask(llm_backend, content="module level").status_code == 500
            assert [f.kind for f in llm_backend.faults] == ["overloaded", "server_error"]  # rate_limit is spent
            assert [(s.fault.kind, s.spent) for s in llm_backend.fault_states] == [
                ("overloaded", False), ("rate_limit", True), ("server_error", False)]

        def test_reset_clears_faults(llm_backend):
            assert [f.kind for f in llm_backend.faults] == ["server_error"]
            assert ask(llm_backend).status_code == 200
    """)
    pytester.runpytest_inprocess("-p", "no:cacheprovider").assert_outcomes(passed=2)


def test_markers_are_documented(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest_inprocess("--markers")
    result.stdout.fnmatch_lines(["@pytest.mark.llm_latency(ttft=, itl=*", "@pytest.mark.llm_cache(*",
                                 "@pytest.mark.llm_batch(*", "@pytest.mark.llm_config(*",
                                 "@pytest.mark.llm_fault(kind, [*][*]params)*", "@pytest.mark.llm_realtime*"])


def test_fixtures_are_documented(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest_inprocess("--fixtures")
    result.stdout.fnmatch_lines(["llmsim_config [[]session scope[]] -- *",
                                 "llm_backend -- *", "*OpenAI-compatible simulated LLM backend*",
                                 "llm_backend_factory -- *",
                                 "llmsim_session_backends [[]session scope[]] -- *",
                                 "llmsim_module_backends [[]module scope[]] -- *"])


SPEED_TEST = """
    def test_speed(llm_backend):
        assert llm_backend.speed == {expected}
"""


@pytest.mark.parametrize(("source", "expected"), [
    ("flag", 50.0), ("ini", 30.0), ("pyproject", 20.0), ("env", 40.0), ("flag-over-env", 50.0),
    ("env-over-ini", 40.0),
])
def test_speed_option_sources(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, source: str,
                              expected: float) -> None:
    pytester.makepyfile(SPEED_TEST.format(expected=expected))
    args = ["-p", "no:cacheprovider"]
    if source in ("flag", "flag-over-env"):
        args.append("--llmsim-speed=50")
    if source in ("ini", "env-over-ini"):
        pytester.makeini("[pytest]\nllmsim_speed = 30\n")
    if source == "pyproject":
        pytester.makepyprojecttoml('[tool.pytest.ini_options]\nllmsim_speed = "20"\n')
    if source in ("env", "flag-over-env", "env-over-ini"):
        monkeypatch.setenv("PYTEST_LLMSIM_SPEED", "40")
    pytester.runpytest_inprocess(*args).assert_outcomes(passed=1)


OPTION_TEST = """
    def test_options(llm_backend, pytestconfig):
        assert (llm_backend.config.seed, llm_backend.config.model) == ({seed}, {model!r})
        assert llm_backend.host == {host!r}
        assert pytestconfig.getoption("llmsim_report") in (None, True)
"""


@pytest.mark.parametrize("source", ["flag", "ini", "pyproject", "env"])
def test_seed_model_host_report_from_every_source(pytester: pytest.Pytester,
                                                  monkeypatch: pytest.MonkeyPatch, source: str) -> None:
    pytester.makepyfile(OPTION_TEST.format(seed=7, model="src-model", host="127.0.0.1"))
    values = {"seed": "7", "model": "src-model", "host": "127.0.0.1", "report": "true"}
    args = ["-p", "no:cacheprovider"]
    if source == "flag":
        args += ["--llmsim-seed=7", "--llmsim-model=src-model", "--llmsim-host=127.0.0.1", "--llmsim-report"]
    elif source == "ini":
        pytester.makeini("[pytest]\n" + "".join(f"llmsim_{k} = {v}\n" for k, v in values.items()))
    elif source == "pyproject":
        pytester.makepyprojecttoml("[tool.pytest.ini_options]\n"
                                   + "".join(f'llmsim_{k} = "{v}"\n' for k, v in values.items()))
    else:
        for key, value in values.items():
            monkeypatch.setenv(f"PYTEST_LLMSIM_{key.upper()}", value)
    result = pytester.runpytest_inprocess(*args)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["llmsim: speed=1, seed=7, model=src-model, host=127.0.0.1",
                                 "*llmsim backend summary*"])


@pytest.mark.parametrize(("source", "option", "value", "message"), [
    ("flag", "speed", "fast", "*invalid --llmsim-speed 'fast': expected a positive number or 'inf'*"),
    ("ini", "speed", "-2", "*invalid ini option llmsim_speed '-2': expected a positive number or 'inf'*"),
    ("env", "speed", "zero", "*invalid environment variable PYTEST_LLMSIM_SPEED 'zero': expected a positive*"),
    ("flag", "seed", "abc", "*invalid --llmsim-seed 'abc': expected a non-negative integer*"),
    ("pyproject", "seed", "minus one", "*invalid ini option llmsim_seed 'minus one': expected a non-negative*"),
    ("ini", "report", "maybe", "*invalid ini option llmsim_report 'maybe': expected true or false*"),
    ("env", "model", "  ", "*invalid environment variable PYTEST_LLMSIM_MODEL '  ': expected a non-empty*"),
    ("flag", "host", "", "*invalid --llmsim-host '': expected a non-empty string*"),
    ("flag", "port", "70000", "*invalid --llmsim-port '70000': expected a port from 0 to 65535*"),
    ("env", "port", "http", "*invalid environment variable PYTEST_LLMSIM_PORT 'http'*"),
])
def test_invalid_option_is_a_usage_error_naming_its_source(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, source: str, option: str, value: str,
        message: str) -> None:
    pytester.makepyfile("def test_x(): pass")
    args = ["-p", "no:cacheprovider"]
    if source == "flag":
        args.append(f"--llmsim-{option}={value}")
    elif source == "ini":
        pytester.makeini(f"[pytest]\nllmsim_{option} = {value}\n")
    elif source == "pyproject":
        pytester.makepyprojecttoml(f'[tool.pytest.ini_options]\nllmsim_{option} = "{value}"\n')
    else:
        monkeypatch.setenv(f"PYTEST_LLMSIM_{option.upper()}", value)
    result = pytester.runpytest_inprocess(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.mark.parametrize(("source", "isolation"), [("flag", "thread"), ("ini", "thread"), ("env", "process")])
def test_the_session_backend_listens_on_the_port_asked_for(pytester: pytest.Pytester,
                                                          monkeypatch: pytest.MonkeyPatch, source: str,
                                                          isolation: str) -> None:
    """A gateway configured before the session starts needs to know the port (process isolation too)."""
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)  # this suite's own worker would shift the port
    port = _free_port()
    pytester.makepyfile(f"""
        def test_port(llm_backend):
            assert llm_backend.port == {port}
            assert llm_backend.base_url == "http://127.0.0.1:{port}/v1"
    """)
    args = ["-p", "no:cacheprovider", f"--llmsim-isolation={isolation}"]
    if source == "flag":
        args.append(f"--llmsim-port={port}")
    elif source == "ini":
        pytester.makeini(f"[pytest]\nllmsim_port = {port}\n")
    else:
        monkeypatch.setenv("PYTEST_LLMSIM_PORT", str(port))
    pytester.runpytest_inprocess(*args).assert_outcomes(passed=1)


def test_each_xdist_worker_adds_its_number_to_a_fixed_port() -> None:
    assert [worker_port(8100, name) for name in ("gw0", "gw3", None, "master")] == [8100, 8103, 8100, 8100]
    assert worker_port(0, "gw5") == 0  # a free port stays a free port


def test_resolve_options_order() -> None:
    settings = resolve_options({"speed": "inf", "seed": None}, {"PYTEST_LLMSIM_SEED": "9"},
                               {"seed": "3", "model": "from-ini"})
    assert (settings.speed, settings.seed, settings.model) == (float("inf"), 9, "from-ini")


def test_report_header_seed_model_and_realtime(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        import pytest

        @pytest.mark.llm_realtime
        def test_realtime(llm_backend):
            assert llm_backend.speed == 1.0
            assert llm_backend.to_wall(2.0) == 2.0

        def test_fast(llm_backend):
            assert llm_backend.speed == 1000.0
            assert llm_backend.to_wall(2.0) == 0.002
            assert llm_backend.config.seed == 42
            assert llm_backend.config.model == "tiny-sim"
    """)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--llmsim-speed=1000",
                                           "--llmsim-seed=42", "--llmsim-model=tiny-sim")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["llmsim: speed=1000, seed=42, model=tiny-sim, host=127.0.0.1"])


def test_report_summary(pytester: pytest.Pytester, helpers: None) -> None:
    pytester.makepyfile("""
        from llmsim_helpers import ask

        def test_served(llm_backend):
            ask(llm_backend)
            ask(llm_backend, max_tokens=0)

        def test_untouched():
            pass

        def test_retried_at_once(llm_backend):
            llm_backend.add_fault("context_length", times=1)  # retried: named whatever the timing
            ask(llm_backend)
            ask(llm_backend)
    """)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--llmsim-report")
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(["*llmsim backend summary*", "test*requests*statuses*tokens*cache*verdicts",
                                 "*test_served*2*200x1 400x1*8+3*0%*0*-* ok",
                                 "*test_retried_at_once*2*200x1 400x1*retried_non_retryablex1"])


def test_factory_backends_are_independent(pytester: pytest.Pytester, helpers: None) -> None:
    pytester.makepyfile("""
        from llmsim_helpers import ask

        def test_two_backends(llm_backend, llm_backend_factory):
            primary = llm_backend_factory(model="primary", ttft=0.1)
            fallback = llm_backend_factory(model="fallback")
            assert len({llm_backend.port, primary.port, fallback.port}) == 3
            ask(primary)
            ask(primary)
            ask(fallback)
            assert primary.metrics.requests_total == 2
            assert fallback.metrics.requests_total == 1
            assert llm_backend.metrics.requests_total == 0
            assert primary.metrics.ttft.p50 == 0.1 and fallback.metrics.ttft.p50 == 0.0
            assert primary.config.model == "primary"
            test_two_backends.backends = (primary, fallback)

        def test_stopped_afterwards():
            assert not any(b.is_running for b in test_two_backends.backends)
    """)
    pytester.runpytest_inprocess("-p", "no:cacheprovider").assert_outcomes(passed=2)


def test_assertion_helper_messages(pytester: pytest.Pytester, helpers: None) -> None:
    pytester.makepyfile("""
        import pytest
        from llmsim_helpers import ask

        def test_count(llm_backend):
            ask(llm_backend)
            ask(llm_backend, max_tokens=0)
            llm_backend.assert_requests(2)
            llm_backend.assert_requests(1, status=400)
            llm_backend.assert_requests(3, path="/v1/chat/completions")

        def test_errors(llm_backend):
            ask(llm_backend, max_tokens=-1)
            llm_backend.assert_no_errors()

        @pytest.mark.llm_latency(ttft=0.3)
        @pytest.mark.llm_config(speed="inf")
        def test_ttft(llm_backend):
            ask(llm_backend)
            llm_backend.assert_ttft(p50_at_most=0.3)
            llm_backend.assert_ttft(p50_at_most=0.2)

        def test_cache(llm_backend):
            ask(llm_backend)
            llm_backend.assert_cache_hit_rate(at_least=0.5)

        def test_plain_assert_reads_well(llm_backend):
            ask(llm_backend)
            assert llm_backend.metrics.requests_total == 3
    """)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(failed=5)
    result.stdout.fnmatch_lines([
        "*expected 3 request(s) with path='/v1/chat/completions', saw 2",
        "*requests received:",
        "*[[]0] POST /v1/chat/completions -> 200 model=m tokens=8+3",
        "*[[]1] POST /v1/chat/completions -> 400 model=m error=integer_below_min_value",
    ])
    result.stdout.fnmatch_lines(["*expected no failed or cancelled requests, saw 1*"])
    result.stdout.fnmatch_lines(["*expected ttft p50 at most 0.2s, saw 0.3s*",
                                 "*slowest requests by ttft*"])
    result.stdout.fnmatch_lines(["*expected a prefix-cache hit rate at least 0.500, saw 0.000*"])
    result.stdout.fnmatch_lines(["*assert 1 == 3*", "*MetricsSnapshot(requests_total=1*"])


def test_runs_under_xdist(pytester: pytest.Pytester, helpers: None) -> None:
    pytester.makepyfile("""
        import pytest
        from llmsim_helpers import ask

        @pytest.mark.parametrize("i", range(8))
        def test_many(llm_backend, i):
            body = ask(llm_backend, content=f"question {i}").json()
            assert body["usage"]["completion_tokens"] == 3
            assert llm_backend.metrics.requests_total == 1
    """)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-n", "2", "--llmsim-report")
    result.assert_outcomes(passed=8)
    result.stdout.fnmatch_lines(["*llmsim backend summary*", "*test_many?0?*1*200x1*"])


def test_no_leaked_threads_or_sockets(pytester: pytest.Pytester, helpers: None) -> None:
    pytester.makeconftest("""
        import threading

        def pytest_unconfigure(config):
            left = [t.name for t in threading.enumerate() if t.name.startswith("llmsim")]
            assert not left, left
            print("LLMSIM-THREADS-CLEAN")
    """)
    pytester.makepyfile("""
        from llmsim_helpers import ask

        def test_a(llm_backend, llm_backend_factory):
            ask(llm_backend, stream=True)
            ask(llm_backend_factory())
    """)
    # in a process of its own: the threads it counts are the process's (an in-process run would see the outer's)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-W", "error::ResourceWarning",
                                           "-s")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*LLMSIM-THREADS-CLEAN*"])


def test_markers_set_every_backend_and_factory_arguments_win(pytester: pytest.Pytester, helpers: None) -> None:
    pytester.makepyfile("""
        import pytest
        from llmsim_helpers import ask

        @pytest.mark.llm_latency(ttft=0.25)
        @pytest.mark.llm_fault("rate_limit", nth=1)
        @pytest.mark.llm_realtime
        def test_factory(llm_backend_factory, llm_backend):
            primary = llm_backend_factory()
            fallback = llm_backend_factory(ttft=0.5)
            for backend in (llm_backend, primary, fallback):
                assert backend.speed == 1.0          # llm_realtime reaches every backend
                assert [f.kind for f in backend.faults] == ["rate_limit"]
                assert ask(backend).status_code == 429
                assert ask(backend).status_code == 200
            assert (llm_backend.config.ttft, primary.config.ttft) == (0.25, 0.25)
            assert fallback.config.ttft == 0.5       # an explicit factory argument wins
    """)
    pytester.runpytest_inprocess("-p", "no:cacheprovider", "--llmsim-speed=inf").assert_outcomes(passed=1)


def test_documented_llmsim_config_override_keeps_the_options(pytester: pytest.Pytester) -> None:
    """The conftest pattern the docs show derives from the plugin's own value."""
    pytester.makeconftest("""
        import pytest

        @pytest.fixture(scope="session")
        def llmsim_config(llmsim_config):
            return llmsim_config.replace(ttft=0.05, itl=0.005, model="my-model")
    """)
    pytester.makepyfile("""
        def test_options_kept(llm_backend, llm_backend_factory):
            for backend in (llm_backend, llm_backend_factory()):
                assert (backend.speed, backend.config.seed) == (3.0, 7)
                assert (backend.config.ttft, backend.config.model) == (0.05, "my-model")
    """)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--llmsim-speed=3", "--llmsim-seed=7")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["llmsim: speed=3, seed=7, *"])


def test_record_headers_are_case_insensitive(llm_backend: LLMBackend) -> None:
    import httpx

    httpx.post(llm_backend.url_for("/v1/chat/completions"), headers={"X-Tenant-ID": "acme"},
               json={"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1})
    headers = llm_backend.requests[-1].headers
    assert headers["x-tenant-id"] == headers["X-Tenant-Id"] == headers.get("X-TENANT-ID") == "acme"


def test_report_rows_name_each_backend(pytester: pytest.Pytester, helpers: None) -> None:
    pytester.makepyfile("""
        from llmsim_helpers import ask

        def test_two(llm_backend_factory):
            a = llm_backend_factory(model="alpha")
            b = llm_backend_factory(model="beta")
            ask(a)
            ask(b)
    """)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--llmsim-report")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*backend*", "*test_two*alpha:*", "*test_two*beta:*"])


def test_module_backends_outlive_tests_and_are_reset_before_each(pytester: pytest.Pytester, helpers: None) -> None:
    pytester.makepyfile(test_gateway="""
        import pytest
        from llmsim_helpers import ask

        @pytest.fixture(scope="module")
        def gateway(llmsim_module_backends):
            primary = llmsim_module_backends.get("primary", model="alpha")
            fallback = llmsim_module_backends.get("fallback", model="beta")
            # a slow gateway would start here, pointed at both, once for the module
            return {"primary": primary.port, "fallback": fallback.port}

        def test_one(gateway, llmsim_module_backends):
            primary = llmsim_module_backends["primary"]
            primary.add_fault("rate_limit")
            primary.configure(ttft=0.5)
            assert ask(primary).status_code == 429
            assert ask(llmsim_module_backends["fallback"]).status_code == 200

        @pytest.mark.llm_latency(itl=0.25)
        @pytest.mark.llm_fault("server_error", nth=2)
        def test_two_sees_a_fresh_backend(gateway, llmsim_module_backends):
            primary = llmsim_module_backends["primary"]
            assert primary.port == gateway["primary"]          # the same server, still up
            assert primary.metrics.requests_total == 0 and primary.requests == []
            assert primary.faults[0].kind == "server_error"    # markers applied, the old fault gone
            assert (primary.config.ttft, primary.config.itl, primary.config.model) == (0.0, 0.25, "alpha")
            assert ask(primary).status_code == 200 and ask(primary).status_code == 500

        def test_three_without_markers(gateway, llmsim_module_backends):
            assert llmsim_module_backends["primary"].faults == []
            with pytest.raises(KeyError, match="started: primary, fallback"):
                llmsim_module_backends["nope"]
            with pytest.raises(ValueError, match="configure"):
                llmsim_module_backends.get("primary", model="other")
    """)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--llmsim-speed=inf", "--llmsim-report")
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(["*test_one*alpha:*429x1*", "*test_one*beta:*200x1*"])


def test_llm_reply_markers_reach_pool_backends(pytester: pytest.Pytester, helpers: None) -> None:
    pytester.makepyfile(test_gateway="""
        import pytest
        from llmsim_helpers import ask

        @pytest.fixture(scope="module")
        def primary(llmsim_module_backends):
            return llmsim_module_backends.get("primary")

        @pytest.mark.llm_reply("scripted for the pool")
        def test_scripted(primary):
            assert ask(primary, max_tokens=20).json()["choices"][0]["message"]["content"] == "scripted for the pool"

        @pytest.mark.llm_reply("only here", prompt="hi")
        def test_rule(primary):
            assert ask(primary, max_tokens=20).json()["choices"][0]["message"]["content"] == "only here"

        def test_next_test_gets_filler(primary):
            assert ask(primary).json()["choices"][0]["message"]["content"] not in ("scripted for the pool",
                                                                                   "only here")
    """)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--llmsim-speed=inf")
    result.assert_outcomes(passed=3)


def test_session_backends_keep_their_port_across_modules(pytester: pytest.Pytester, helpers: None) -> None:
    pytester.makeconftest("""
        import pytest

        @pytest.fixture(scope="session")
        def shared(llmsim_session_backends):
            return llmsim_session_backends.get("shared")
    """)
    for name in ("a", "b"):
        pytester.makepyfile(**{f"test_{name}": f"""
            from llmsim_helpers import ask

            def test_{name}(shared, tmp_path_factory):
                ports = tmp_path_factory.getbasetemp() / "ports"
                ports.mkdir(exist_ok=True)
                (ports / "{name}").write_text(str(shared.port))
                assert shared.metrics.requests_total == 0   # reset before this test
                assert ask(shared).status_code == 200
                seen = {{p.read_text() for p in ports.iterdir()}}
                assert len(seen) == 1                        # one server for the whole session
        """})
    pytester.runpytest_inprocess("-p", "no:cacheprovider", "--llmsim-speed=inf").assert_outcomes(passed=2)


def _disrupted_stream_test(name: str, imports: str, every: int, at: int, disrupt: str) -> str:
    """A test module streaming 40 tokens (speed 1, itl 10 ms) that runs the lines of ``disrupt`` on every
    ``every``-th line it reads, from line ``at`` on: tokens leave late."""
    body = "\n".join(f"                        {line}" for line in disrupt.splitlines())
    return f"""
        {imports}
        import httpx
        import pytest

        @pytest.mark.llm_realtime
        @pytest.mark.llm_latency(itl=0.01)
        def {name}(llm_backend):
            body = {{"model": "m", "messages": [{{"role": "user", "content": "x"}}], "max_tokens": 40,
                    "stream": True}}
            with httpx.stream("POST", llm_backend.url_for("/v1/chat/completions"), json=body) as r:
                for i, _ in enumerate(r.iter_lines()):
                    if i % {every} == {at}:
{body}
    """


def test_teardown_warns_when_the_simulator_lagged(pytester: pytest.Pytester, helpers: None) -> None:
    pytester.makepyfile(_disrupted_stream_test("test_lagging", "import time", 4, 0,
                                               "with llm_backend._simulator.runtime._cond:\n"
                                               "    time.sleep(0.05)"))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--llmsim-report")
    result.assert_outcomes(passed=1, warnings=1)
    result.stdout.fnmatch_lines(["*LLMSimLagWarning: llmsim backend llmsim:*tokens left up to * ms late*",
                                 "*lag_p99*"])


def test_process_isolation_runs_backends_as_subprocesses(pytester: pytest.Pytester, helpers: None) -> None:
    pytester.makepyfile("""
        import os
        import pytest
        from pytest_llmsim import LLMBackend
        from pytest_llmsim.isolation import ProcessBackend
        from llmsim_helpers import ask

        @pytest.mark.llm_latency(ttft=0.2)
        @pytest.mark.llm_fault("rate_limit", nth=1)
        def test_session_backend(llm_backend, llm_backend_factory):
            assert isinstance(llm_backend, ProcessBackend) and llm_backend.process.pid != os.getpid()
            assert llm_backend.config.ttft == 0.2 and llm_backend.speed == float("inf")
            assert ask(llm_backend).status_code == 429 and ask(llm_backend).status_code == 200
            assert llm_backend.metrics.ttft.p50 == 0.2
            other = llm_backend_factory(model="second")
            local = llm_backend_factory(isolation="thread")
            assert isinstance(other, ProcessBackend) and other.port != llm_backend.port
            assert isinstance(local, LLMBackend)
            assert ask(other).status_code == 429  # the fault marker reaches it too
            assert other.requests[0].model == "m" and other.config.model == "second"

        def test_reset_between_tests(llm_backend):
            assert llm_backend.metrics.requests_total == 0 and llm_backend.faults == []
    """)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--llmsim-isolation=process",
                                           "--llmsim-speed=inf")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["llmsim: *isolation=process*"])


def test_bad_isolation_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--llmsim-isolation=vm")
    assert result.ret != 0
    result.stderr.fnmatch_lines(["*invalid --llmsim-isolation 'vm': expected one of thread, process*"])


def test_process_gevent_isolation_without_gevent_is_a_usage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    from pytest_llmsim import plugin

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *args: None if name == "gevent" else real(name, *args))
    with pytest.raises(pytest.UsageError, match=r"pytest-llmsim\[gevent\]"):
        plugin._new_backend(SimConfig(), "127.0.0.1", "process-gevent")


def test_gc_freeze_option_freezes_after_collection_and_paces_in_process_backends(
        pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_on="""
        import gc

        def test_frozen_and_paced(llm_backend, llm_backend_factory):
            assert gc.get_freeze_count() > 0
            assert llm_backend._simulator.after_request is not None
            assert llm_backend_factory()._simulator.after_request is not None
    """, test_off="""
        def test_left_alone(llm_backend):
            assert llm_backend._simulator.after_request is None
    """)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--llmsim-gc-freeze", "test_on.py")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["llmsim: speed=1, seed=0, model=llmsim, host=127.0.0.1, gc-freeze"])
    pytester.runpytest_subprocess("-p", "no:cacheprovider", "test_off.py").assert_outcomes(passed=1)
    pytester.makeini("[pytest]\nllmsim_gc_freeze = true\n")
    pytester.runpytest_subprocess("-p", "no:cacheprovider", "test_on.py").assert_outcomes(passed=1)


def test_lag_warning_names_a_collector_pause(pytester: pytest.Pytester) -> None:
    """Collections that stop the test process mid-stream make tokens late; the warning says so."""
    pytester.makepyfile(_disrupted_stream_test("test_collecting", "import gc", 8, 4,
                                               "garbage = [[n] for n in range(600_000)]  # a heap worth walking\n"
                                               "gc.collect()\n"
                                               "del garbage"))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, warnings=1)
    result.stdout.fnmatch_lines(["*LLMSimLagWarning: *The garbage collector stopped this process for * ms "
                                 "during the test: --llmsim-gc-freeze*"])


def test_a_dead_backend_process_fails_one_test_saying_so_and_the_next_get_a_new_one(
        pytester: pytest.Pytester, helpers: None) -> None:
    pytester.makepyfile(test_dies="""
        import os, signal, time
        from llmsim_helpers import ask

        def test_kills_it(llm_backend):
            assert ask(llm_backend).status_code == 200
            os.kill(llm_backend.process.pid, signal.SIGKILL)
            llm_backend.process.wait()

        def test_after(llm_backend):
            assert ask(llm_backend).status_code == 200

        def test_after_that(llm_backend):
            assert ask(llm_backend).status_code == 200 and llm_backend.metrics.requests_total == 1
    """)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--llmsim-speed=inf",
                                           "--llmsim-isolation=process")
    result.assert_outcomes(passed=3, errors=1)
    result.stdout.fnmatch_lines(["*during this test, the backend process (llmsim serve, pid *) killed by SIGKILL*",
                                 "*a new backend process serves the tests after this one*"])
    assert "Connection refused" not in result.stdout.str()
