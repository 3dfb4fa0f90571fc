"""The backend's timeline: Chrome trace events, the SVG picture, and --llmsim-trace files."""

from __future__ import annotations

import gc
import json
import threading
import xml.etree.ElementTree as ElementTree
from pathlib import Path
from typing import Any

import httpx
import pytest

from conftest import INNER_PYTEST_ADDOPTS
from pytest_llmsim import LLMBackend, RemoteBackend
from pytest_llmsim.sim import trace_svg
from pytest_llmsim.sim.engine import SeqState, SimSequence
from pytest_llmsim.sim.request_log import RequestRecord
from pytest_llmsim.sim.trace import TraceRecorder

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}
SVG_NS = "{http://www.w3.org/2000/svg}"


def spans(trace: dict[str, Any], tid: int) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in trace["traceEvents"] if e.get("tid") == tid and e["ph"] == "X"}


def test_each_request_is_a_track_with_its_phases(llm_backend: LLMBackend) -> None:
    llm_backend.configure(ttft=0.2, itl=0.01, max_batch_size=1, speed=float("inf"))
    for _ in range(2):
        httpx.post(llm_backend.url_for("/v1/chat/completions"), json=CHAT)
    trace = llm_backend.trace()
    assert trace["displayTimeUnit"] == "ms" and trace["otherData"]["requests"] == 2
    for event in trace["traceEvents"]:
        assert {"name", "ph", "pid", "tid"} <= set(event)
        assert event["ph"] in "MXiC" and (event["ph"] == "M" or "ts" in event)
        assert event.get("dur", 0) >= 0
    names = {e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "thread_name"}
    assert {"#1 POST openai.chat -> 200", "#2 POST openai.chat -> 200", "batch"} <= names
    first = spans(trace, 32)
    assert first["prefill"]["dur"] == pytest.approx(200_000) and first["decode"]["dur"] == pytest.approx(40_000)
    assert first["decode"]["args"]["tokens"] == 5
    batch = [e["args"] for e in trace["traceEvents"] if e["name"] == "batch" and e["ph"] == "C"]
    assert {"running": 1, "waiting": 0} in batch and batch[-1] == {"running": 0, "waiting": 0}
    assert any(e["name"] == "prefix cache hit rate" for e in trace["traceEvents"])


def test_faults_errors_and_hangups_are_instants(llm_backend: LLMBackend) -> None:
    llm_backend.configure(ttft=5.0, speed=10)
    llm_backend.add_fault("rate_limit", times=1)
    httpx.post(llm_backend.url_for("/v1/chat/completions"), json=CHAT)
    httpx.post(llm_backend.url_for("/v1/chat/completions"), json={"model": "m"})
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(llm_backend.url_for("/v1/chat/completions"), json=CHAT, timeout=0.05)
    assert llm_backend.wait_idle()
    instants = [(e["name"], e["tid"]) for e in llm_backend.trace()["traceEvents"] if e["ph"] == "i"]
    assert ("fault: rate_limit", 32) in instants and ("429 rate_limit_exceeded", 32) in instants
    assert ("400 missing_required_parameter", 64) in instants
    assert ("client hung up", 96) in instants


def test_the_trace_is_bounded_and_says_what_it_dropped(llm_backend: LLMBackend) -> None:
    llm_backend.configure(max_trace_requests=3)
    for _ in range(5):
        httpx.post(llm_backend.url_for("/v1/chat/completions"), json=CHAT)
    trace = llm_backend.trace()
    assert (trace["otherData"]["requests"], trace["otherData"]["dropped_requests"]) == (3, 2)
    assert any("2 older request(s) dropped" in e["name"] for e in trace["traceEvents"])
    llm_backend.configure(max_trace_requests=0)
    httpx.post(llm_backend.url_for("/v1/chat/completions"), json=CHAT)
    assert llm_backend.trace()["otherData"]["requests"] == 0


def _post_together(backend: LLMBackend, count: int) -> None:
    """``count`` chat requests sent at once from threads, all answered."""
    threads = [threading.Thread(target=httpx.post, args=(backend.url_for("/v1/chat/completions"),),
                                kwargs={"json": CHAT}) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def test_svg_timeline_is_well_formed(llm_backend: LLMBackend) -> None:
    llm_backend.configure(ttft=0.05, itl=0.01, max_batch_size=2, speed=20)
    _post_together(llm_backend, 4)
    svg = llm_backend.trace_svg(title="a <test>")
    root = ElementTree.fromstring(svg)
    texts = [t.text or "" for t in root.iter("{http://www.w3.org/2000/svg}text")]
    assert "a <test>" in texts and sum("openai.chat -> 200" in t for t in texts) == 4
    rects = [r for r in root.iter("{http://www.w3.org/2000/svg}rect") if r.get("fill") == "#b8b8b8"]
    assert len(rects) >= 2  # a legend swatch, and at least one request waited for a slot


def test_the_timeline_says_what_it_counts_and_keeps_markers_inside(llm_backend: LLMBackend) -> None:
    """The chart's counts have an axis and peaks of their own, time starts at the first request drawn, in
    simulated seconds, and a fault at the very start or a hang-up at the very end stays between the labels and
    the edge."""
    llm_backend.configure(ttft=1.0, itl=0.1, max_batch_size=2, speed=20)  # ~75 ms each: the four overlap
    llm_backend.add_fault("rate_limit", times=1)
    assert httpx.post(llm_backend.url_for("/v1/chat/completions"), json=CHAT).status_code == 429  # at t = 0
    _post_together(llm_backend, 4)
    body = {**CHAT, "max_tokens": 400, "stream": True}
    with httpx.stream("POST", llm_backend.url_for("/v1/chat/completions"), json=body) as stream:
        next(stream.iter_lines())  # then hang up: the last thing drawn
    llm_backend.wait_idle(timeout=10)
    root = ElementTree.fromstring(llm_backend.trace_svg())
    texts = {(t.text or "").strip(): t for t in root.iter(f"{SVG_NS}text")}
    assert "running (peak 2)" in texts and "waiting (peak 2)" in texts  # four at once, two slots
    counts = [t.text for t in root.iter(f"{SVG_NS}text") if t.get("class") == "count"]
    assert counts == ["0", "1", "2"]
    assert "simulated seconds" in texts
    ticks = [float(t.get("x") or 0) for t in root.iter(f"{SVG_NS}text")
             if t.get("text-anchor") == "middle" and (t.text or "").replace(".", "").isdigit()]
    assert ticks and all(trace_svg.LEFT - 0.01 <= tick <= trace_svg.WIDTH - trace_svg.RIGHT for tick in ticks)
    markers = [t for t in root.iter(f"{SVG_NS}text") if t.get("class") == "marker"]
    assert len(markers) == 2  # the 429 and the hang-up
    for marker in markers:
        left = float(marker.get("x") or 0)
        assert left > trace_svg.LEFT and left + trace_svg.MARK <= trace_svg.WIDTH - trace_svg.RIGHT


def test_the_timeline_starts_at_the_first_request_drawn_when_older_ones_were_dropped(
        llm_backend: LLMBackend) -> None:
    """A live backend's trace keeps the newest requests: the axis spans them, not the time since the start
    (where every bar would be squeezed against the right edge)."""
    llm_backend.configure(ttft=1.0, itl=0.1, speed=50, max_trace_requests=2)  # ~38 ms each
    for _ in range(6):
        assert httpx.post(llm_backend.url_for("/v1/chat/completions"), json=CHAT).status_code == 200
    requests, _, _, dropped = llm_backend._server.simulator.trace.snapshot()
    assert dropped == 4 and requests[0].at > 3.0  # four requests of ~1.9 simulated seconds came before
    root = ElementTree.fromstring(llm_backend.trace_svg())
    ticks = [float(t.text or "") for t in root.iter(f"{SVG_NS}text")
             if t.get("text-anchor") == "middle" and (t.text or "").replace(".", "", 1).isdigit()]
    assert ticks and min(ticks) >= requests[0].at - 1.0  # not from 0
    bars = [r for r in root.iter(f"{SVG_NS}rect") if r.get("fill") == trace_svg.COLOURS["decode"]][1:]
    assert min(float(r.get("x") or 0) for r in bars) < trace_svg.LEFT + 0.6 * (
        trace_svg.WIDTH - trace_svg.LEFT - trace_svg.RIGHT)  # the first drawn bar is well left of the edge


def test_remote_backend_reads_the_trace(llm_backend: LLMBackend) -> None:
    httpx.post(llm_backend.url_for("/v1/chat/completions"), json=CHAT)
    remote = RemoteBackend(llm_backend.root_url)
    assert remote.trace()["otherData"]["requests"] == 1
    assert remote.trace_svg().startswith("<svg")


PLUGIN_TESTS = """
import httpx

def test_passes(llm_backend):
    httpx.post(llm_backend.url_for("/v1/chat/completions"),
               json={"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3})

def test_fails(llm_backend):
    httpx.post(llm_backend.url_for("/v1/chat/completions"), json={"model": "m"})
    llm_backend.assert_no_errors()

def test_two_backends(llm_backend_factory):
    first, second = llm_backend_factory(model="a"), llm_backend_factory(model="b")
    for backend in (first, second):
        httpx.post(backend.url_for("/v1/completions"), json={"model": "x", "prompt": "hi", "max_tokens": 2})
"""


def test_trace_option_writes_files_per_test_and_backend(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_traced=PLUGIN_TESTS)
    result = pytester.runpytest("-p", "no:cacheprovider", "--llmsim-trace=traces")
    result.assert_outcomes(passed=2, failed=1)
    files = sorted(p.name for p in Path(pytester.path, "traces").iterdir())
    assert len(files) == 8  # 4 backends (1 + 1 + 2), a .trace.json and a .svg each
    assert any(f.startswith("test_traced.py_test_two_backends--a-") for f in files)
    passed = next(Path(pytester.path, "traces").glob("test_traced.py_test_passes--*.trace.json"))
    assert json.loads(passed.read_text())["otherData"]["requests"] == 1
    result.stdout.fnmatch_lines(["*backend timeline: traces/test_traced.py_test_fails--llmsim-*.trace.json*"])


def test_trace_on_failed_writes_only_failed_tests(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makepyfile(test_traced=PLUGIN_TESTS)
    monkeypatch.setenv("PYTEST_LLMSIM_TRACE_ON", "failed")
    result = pytester.runpytest("-p", "no:cacheprovider", "--llmsim-trace=out")
    result.assert_outcomes(passed=2, failed=1)
    files = sorted(p.name for p in Path(pytester.path, "out").iterdir())
    assert len(files) == 2 and all(f.startswith("test_traced.py_test_fails--") for f in files)


def test_bad_trace_on_value_is_named(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_traced=PLUGIN_TESTS)
    result = pytester.runpytest("-p", "no:cacheprovider", "--llmsim-trace=out", "--llmsim-trace-on=sometimes")
    result.stderr.fnmatch_lines(["*invalid --llmsim-trace-on 'sometimes': expected one of all, failed*"])


def test_timeline_is_attached_to_pytest_html(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("pytest_html")
    monkeypatch.delenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD")  # pytest-html and pytest-metadata by their entry points
    monkeypatch.setenv("PYTEST_ADDOPTS", INNER_PYTEST_ADDOPTS)
    pytester.makepyfile(test_traced=PLUGIN_TESTS)
    result = pytester.runpytest("-p", "no:cacheprovider", "--llmsim-trace=traces", "--html=report.html",
                                "--self-contained-html")
    result.assert_outcomes(passed=2, failed=1)
    report = Path(pytester.path, "report.html").read_text()
    assert report.count("llmsim-timeline") >= 3


def test_kept_requests_leave_the_collectors_view() -> None:
    """A kept request is plain values (numbers, strings) in one tuple, which the garbage collector stops
    tracking the first time it looks at them: the last
    ``max_trace_requests`` requests are not scanned again by every later collection. A sequence's
    state kept as the ``SeqState`` member (an object) held its row in view for good, and nested tuples
    left one level of nesting tracked per pass."""
    recorder = TraceRecorder(max_requests=100)
    for i in range(50):
        seq = SimSequence([1, 2, 3], 4)
        seq.arrival = seq.admitted_at = i
        seq.first_token_at, seq.last_token_at, seq.finished_at = i + 0.1, i + 0.2, i + 0.2
        seq.emitted, seq.state = 4, SeqState.FINISHED
        record = RequestRecord(method="POST", path="/v1/chat/completions", headers={}, status=200,
                               route="/v1/chat/completions", api="openai.chat", model="m", error={"code": "x"})
        recorder.request(record, [seq], i + 0.2)
    gc.collect()
    kept = list(recorder._state.requests)
    assert len(kept) == 50
    assert not any(gc.is_tracked(row) for row in kept), "kept request rows stay in the collector's view"
    requests, _, _, _ = recorder.snapshot()
    assert [seq.state for request in requests for seq in request.sequences] == ["finished"] * 50


def test_recording_keeps_no_object_per_sample() -> None:
    """The batch and hit-rate samples (up to eight per kept request) are numbers in flat buffers: a
    recording that grows holds no object per sample, so it does not feed the garbage collector (a test
    session's first tens of thousands of requests would otherwise set off young collections that scan
    everything the session keeps). Oldest samples drop first; a change at the same instant replaces."""
    recorder = TraceRecorder(max_requests=10)  # room for 80 samples of each kind
    gc.disable()
    try:
        before = len(gc.get_objects())
        for i in range(60):
            recorder.sample(i * 0.5, i, i % 3)
        recorder.sample(29.5, 7, 7)  # same instant as the last: keep the last
        grown = len(gc.get_objects()) - before
    finally:
        gc.enable()
    assert grown < 10, grown
    for i in range(60, 100):
        recorder.sample(i * 0.5, i, 0)
    _, samples, hit_rates, _ = recorder.snapshot()
    assert len(samples) == 80 and samples[0] == (10.0, 20, 2) and samples[-1] == (49.5, 99, 0)
    assert (29.5, 7, 7) in samples and (29.5, 59, 2) not in samples
    assert all(type(running) is int and type(waiting) is int for _, running, waiting in samples)
    assert hit_rates == []


@pytest.mark.parametrize("make", ["file", "unwritable"])
def test_a_trace_directory_that_cannot_be_written_is_one_usage_error(pytester: pytest.Pytester, make: str) -> None:
    pytester.makepyfile(test_a="def test_one(llm_backend):\n    pass\n\ndef test_two(llm_backend):\n    pass\n")
    target = "out"
    if make == "file":
        (pytester.path / "out").write_text("not a directory")
    else:
        target = "/proc/llmsim-traces"  # no one may make a directory there, root included
    result = pytester.runpytest("-p", "no:cacheprovider", f"--llmsim-trace={target}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR  # each test's teardown errored before
    result.stderr.fnmatch_lines([f"*--llmsim-trace:*{target}*"])


@pytest.mark.parametrize("capacity", [1, 2, 3, 10])
def test_batch_samples_keep_the_newest_rows_with_the_last_change_at_each_instant(capacity: int) -> None:
    """The recording keeps the newest ``capacity`` samples, one per instant (the last change made then),
    in order, whether the newest row is still open or already stored."""
    import random

    from pytest_llmsim.sim.trace import _Rows
    rng = random.Random(capacity)
    rows, kept = _Rows(3, capacity), []
    for step in range(200):
        row = (float(step // 3), float(rng.randint(0, 5)), float(rng.randint(0, 5)))
        if kept and rows.newest_first == row[0]:
            rows.replace_last(row)
            kept[-1] = row
        else:
            rows.append(row)
            kept.append(row)
        assert rows.rows() == kept[-capacity:]
    assert _Rows(3, 0).rows() == []


def test_the_svg_writer_escapes_what_xml_cannot_hold(llm_backend: LLMBackend) -> None:
    httpx.post(llm_backend.base_url + "/chat/completions", json={"model": "m\x01<x>", "max_tokens": 2,
                                                                 "messages": [{"role": "user", "content": "hi"}]})
    svg = httpx.get(llm_backend.root_url + "/llmsim/v1/trace", params={"format": "svg", "title": "a\x01b\x1f<c>"})
    root = ElementTree.fromstring(svg.content)  # parses: the live page's timeline draws
    assert "a\ufffdb\ufffd<c>" in "".join(root.itertext())


def test_the_svg_axis_starts_at_the_first_request_drawn(llm_backend: LLMBackend) -> None:
    import time

    llm_backend.configure(speed=100.0, ttft=0.5)
    time.sleep(0.3)  # 30 simulated seconds with no traffic: the first request arrives at ~30 s
    httpx.post(llm_backend.base_url + "/chat/completions", json={"model": "m", "max_tokens": 2,
                                                                 "messages": [{"role": "user", "content": "hi"}]})
    svg = httpx.get(llm_backend.root_url + "/llmsim/v1/trace", params={"format": "svg"})
    bars = [float(rect.get("x", "0")) for rect in ElementTree.fromstring(svg.content).iter("{http://www.w3.org/2000/svg}rect")
            if rect.find("{http://www.w3.org/2000/svg}title") is not None]
    assert bars and min(bars) < trace_svg.LEFT + 5  # at the left of the plot, not in its right quarter
