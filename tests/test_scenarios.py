"""Scenarios: latency, faults and rate limits that change on a schedule in simulated time (steps, ramps, spikes,
windows), aimed by model, route, key or replica; on the engine's virtual clock, then over HTTP."""

from __future__ import annotations

import math
from typing import Any

import httpx
import openai
import pytest
from engine_helpers import make_engine, prompt

from pytest_llmsim import Fault, LLMBackend, RemoteBackend, ScenarioError, SimConfig, ramp, spike, step, window
from pytest_llmsim.cli.config_file import load_config
from pytest_llmsim.cli.config_watch import ConfigWatcher
from pytest_llmsim.sim.faults import FaultInjector
from pytest_llmsim.sim.scenario import Scenario, phase_from_mapping
from pytest_llmsim.sim.sequence import SimSequence


def shaped(scenario: Scenario, length: int, index: int = 0, model: str = "m", key: str = "k") -> SimSequence:
    shape = scenario.latency_for(model, "/v1/chat/completions", lambda: [key], 1)
    return SimSequence(prompt(8, 100 * index), length, index=index, latency_shape=shape)


def test_a_step_is_seen_at_the_second_it_was_set_for() -> None:
    engine, _ = make_engine(ttft=0.1, itl=0.01)
    scenario = Scenario((step(10, ttft=0.5),), origin=0.0)
    before, at = shaped(scenario, 1, 0), shaped(scenario, 1, 1)
    engine.advance(9.999)
    engine.submit(before)
    engine.run_until_idle()
    engine.advance(10.0)
    engine.submit(at)
    engine.run_until_idle()
    assert before.ttft == pytest.approx(0.1) and at.ttft == pytest.approx(0.5)


def test_a_ramp_moves_a_stream_s_gaps_as_it_runs_and_holds_its_end() -> None:
    engine, _ = make_engine(ttft=0.0, itl=0.01)
    seq = shaped(Scenario((ramp(0, 10, itl=(0.01, 0.11)),), origin=0.0), 400)
    engine.submit(seq)
    engine.run_until_idle()
    times = [0.0]
    for gap in seq.gaps:
        times.append(times[-1] + gap)
    at: dict[int, float] = {}
    for t, gap in zip(times, seq.gaps):  # the first gap planned at or after each second
        at.setdefault(math.floor(t), gap)
    assert at[0] == pytest.approx(0.01)
    assert at[5] == pytest.approx(0.06, rel=0.01)
    assert max(seq.gaps) == pytest.approx(0.11) and list(seq.gaps)[-1] == pytest.approx(0.11)  # held after 10 s


def test_a_spike_recovers_and_the_later_phase_wins() -> None:
    engine, _ = make_engine(ttft=0.1)
    scenario = Scenario((spike(5, 2, ttft=1.0), spike(6, 0.5, factor=3.0)), origin=100.0)
    seen = {}
    for index, t in enumerate((104.0, 105.0, 106.2, 107.5)):
        engine.advance(t)
        seq = shaped(scenario, 1, index)
        engine.submit(seq)
        engine.run_until_idle()
        seen[round(t - 100, 1)] = seq.ttft
    assert seen == pytest.approx({4.0: 0.1, 5.0: 1.0, 6.2: 3.0, 7.5: 0.1})


def test_phases_are_aimed_by_model_key_route_and_replica() -> None:
    scenario = Scenario((step(0, ttft=1.0, model="slow"), step(0, itl=1.0, key="sk-b"),
                         step(0, factor=2.0, route="/v1/messages"), step(0, factor=9.0, replica=2)), origin=0.0)
    assert scenario.latency_for("fast", "/v1/chat/completions", lambda: ["sk-a"], 1) is None
    shape = scenario.latency_for("slow", "/v1/messages", lambda: ["sk-b"], 1)
    assert shape is not None
    assert (shape.at("ttft", 1.0, 0.1), shape.at("itl", 1.0, 0.01)) == (2.0, 2.0)


def test_percentiles_in_a_step_and_its_factor() -> None:
    shape = Scenario((step(0, ttft={"p50": 0.2, "p99": 1.0}), step(1, factor=2.0)), origin=0.0).latency_for(
        "m", None, list, 1)
    assert shape is not None
    assert shape.at("ttft", 0.5, 0.1).as_mapping() == {"p50": 0.2, "p99": 1.0}  # type: ignore[attr-defined]
    assert shape.at("ttft", 1.5, 0.1).as_mapping() == {"p50": 0.4, "p99": 2.0}  # type: ignore[attr-defined]


def test_a_window_s_fault_acts_only_in_its_span() -> None:
    now = [0.0]
    injector = FaultInjector(seed=1, clock=lambda: now[0])
    scenario = Scenario((window(10, 20, fault=Fault("server_error"), model="m"),), origin=5.0)
    for fault, start, end in scenario.faults():
        injector.add(fault, (start, end), owner=scenario)
    chosen = {}
    for now[0] in (14.9, 15.0, 24.9, 25.0):
        chosen[now[0]] = injector.select(1, {}, "m", str)
    assert [None if fault is None else fault.kind for fault in chosen.values()] == [
        None, "server_error", "server_error", None]
    assert injector.select(1, {}, "other", str) is None or now[0] == 25.0
    injector.remove_owned(scenario)
    assert injector.faults == []


@pytest.mark.parametrize(("phase", "message"), [
    (lambda: step(-1, ttft=1), "start must be seconds >= 0"),
    (lambda: ramp(5, 5, itl=(0.1, 0.2)), "end"),
    (lambda: ramp(0, 5, itl=0.1), "two numbers"),
    (lambda: step(0, ttft=(0.1, 0.2)), "only a ramp takes two"),
    (lambda: step(0), "changes nothing"),
    (lambda: ramp(0, 5, itl=(0.1, 0.2), rpm=3), "a ramp moves latency"),
    (lambda: step(0, ttft="fast"), "invalid value for 'ttft'"),
    (lambda: phase_from_mapping({"shape": "wave", "at": 0, "ttft": 1}), "unknown phase shape 'wave'"),
    (lambda: phase_from_mapping({"at": 0, "ttft": 1, "colour": 1}), "unknown key 'colour'"),
    (lambda: phase_from_mapping({"shape": "window", "start": 0, "end": 5, "fault": {"kind": "nope"}}),
     "unknown fault kind 'nope'"),
])
def test_a_bad_phase_is_refused_naming_its_part(phase: object, message: str) -> None:
    with pytest.raises(ScenarioError, match=message):
        phase()  # type: ignore[operator]


def test_over_http_a_scenario_is_aimed_by_key_and_its_window_limits_and_faults() -> None:
    with LLMBackend(SimConfig(speed=1000.0, ttft=0.05, itl=0.01)) as backend:
        backend.scenario(step(0, ttft=2.0, key="sk-slow"), window(0, 10_000, rpm=1, model="limited"),
                         window(0, 10_000, fault=Fault("overloaded"), model="broken"),
                         window(10_000, 20_000, fault=Fault("server_error")))
        client = openai.OpenAI(base_url=backend.base_url, api_key="sk-fast", max_retries=0)
        slow = openai.OpenAI(base_url=backend.base_url, api_key="sk-slow", max_retries=0)
        said = [{"role": "user", "content": "hi"}]
        client.chat.completions.create(model="m", messages=said, max_tokens=2)  # type: ignore[arg-type]
        slow.chat.completions.create(model="m", messages=said, max_tokens=2)  # type: ignore[arg-type]
        client.chat.completions.create(model="limited", messages=said, max_tokens=2)  # type: ignore[arg-type]
        with pytest.raises(openai.RateLimitError):
            client.chat.completions.create(model="limited", messages=said, max_tokens=2)  # type: ignore[arg-type]
        with pytest.raises(openai.InternalServerError) as caught:
            client.chat.completions.create(model="broken", messages=said, max_tokens=2)  # type: ignore[arg-type]
        assert caught.value.status_code == 503
        records = backend.requests
        assert records[0].ttft == pytest.approx(0.05) and records[1].ttft == pytest.approx(2.0)
        assert [record.fault for record in records] == [None, None, None, None, "overloaded"]
        state = backend.scenario_state()
        assert [phase["active"] for phase in state["phases"]] == [True, True, True, False]
        backend.scenario()
        assert backend.scenario_state() == {}
        client.chat.completions.create(model="limited", messages=said, max_tokens=2)  # type: ignore[arg-type]


def test_the_control_api_takes_a_scenario_in_its_json_form(llm_backend: LLMBackend) -> None:
    remote = RemoteBackend(llm_backend.root_url)
    remote.scenario({"shape": "spike", "at": 0, "seconds": 1e6, "ttft": 1.5},
                    {"shape": "window", "start": 0, "end": 1e6, "fault": "timeout", "route": "/v1/completions"})
    state = remote.scenario_state()
    assert [phase["shape"] for phase in state["phases"]] == ["spike", "window"]
    assert state["phases"][1]["fault"] == {"kind": "timeout"}
    answer = httpx.post(llm_backend.url_for("/v1/completions"), json={"model": "m", "prompt": "x", "max_tokens": 1})
    assert answer.status_code == 504
    httpx.post(llm_backend.url_for("/v1/chat/completions"),
               json={"model": "m", "messages": [{"role": "user", "content": "x"}], "max_tokens": 1}).raise_for_status()
    assert llm_backend.requests[-1].ttft == pytest.approx(1.5)
    refused = httpx.put(llm_backend.url_for("/llmsim/v1/scenario"), json={"phases": [{"at": 0}]})
    assert refused.status_code == 400 and "changes nothing" in refused.json()["error"]["message"]
    remote.scenario()
    assert remote.scenario_state() == {}


SCENARIO_TOML = """
speed = 1000.0
ttft = 0.05

[[scenario]]
shape = "spike"
at = 0
seconds = 1e6
ttft = 0.75
model = "gpt-4o"

[[scenario]]
shape = "window"
start = 0
end = 1e6
fault = {kind = "rate_limit", retry_after = 2}
key = "sk-throttled"
"""


def test_a_config_file_s_scenario_applies_and_a_reload_keeps_it_running_unless_it_changed(tmp_path: Any) -> None:
    path = tmp_path / "llmsim.toml"
    path.write_text(SCENARIO_TOML)
    settings, _, _, phases = load_config(str(path))
    assert [phase.shape for phase in phases] == ["spike", "window"] and phases[1].fault == Fault(
        "rate_limit", retry_after=2)
    with LLMBackend(SimConfig(**settings)) as backend:
        backend.scenario(*phases)
        said = [{"role": "user", "content": "hi"}]
        openai.OpenAI(base_url=backend.base_url, api_key="sk-a").chat.completions.create(
            model="gpt-4o", messages=said, max_tokens=1)  # type: ignore[arg-type]
        with pytest.raises(openai.RateLimitError) as caught:
            openai.OpenAI(base_url=backend.base_url, api_key="sk-throttled", max_retries=0).chat.completions.create(
                model="m", messages=said, max_tokens=1)  # type: ignore[arg-type]
        assert caught.value.response.headers["retry-after"] == "2"
        assert backend.requests[0].ttft == pytest.approx(0.75)
        backend.clear_faults()  # the faults added one by one; the scenario's window stays
        assert [fault.kind for fault in backend.faults] == ["rate_limit"]
        watcher = ConfigWatcher(str(path), backend, {}, [], [], lambda text, stream: None)
        elapsed = backend.scenario_state()["elapsed"]
        path.write_text(SCENARIO_TOML.replace("speed = 1000.0", "speed = 999.0"))
        assert watcher.poll() and backend.scenario_state()["elapsed"] >= elapsed  # unchanged: runs on
        path.write_text(SCENARIO_TOML.replace("ttft = 0.75", "ttft = 0.5") + "\n")
        assert watcher.poll()
        assert backend.scenario_state()["phases"][0]["ttft"] == 0.5
        path.write_text("[[scenario]]\nat = 0\n")
        assert not watcher.poll()  # refused as a whole: the scenario stays
        assert backend.scenario_state()["phases"][0]["ttft"] == 0.5


def test_the_timeline_shades_each_phase_behind_the_requests(llm_backend: LLMBackend) -> None:
    llm_backend.scenario(spike(0, 1e6, ttft=0.2, model="m"), window(1e6, 2e6, fault=Fault("timeout")))
    httpx.post(llm_backend.url_for("/v1/chat/completions"),
               json={"model": "m", "messages": [{"role": "user", "content": "x"}], "max_tokens": 1}).raise_for_status()
    svg = llm_backend.trace_svg()
    assert svg.count('class="phase"') == 1 and "spike ttft=0.2" in svg  # the window after the axis: not drawn
