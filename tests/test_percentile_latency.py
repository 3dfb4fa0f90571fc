"""Latency given by its percentiles (``ttft={"p50": 0.2, "p90": 0.5, "p99": 1.2}``), drawn per request and step."""

from __future__ import annotations

import statistics

import httpx
import openai
import pytest
from engine_helpers import make_engine, prompt

from pytest_llmsim import ConfigError, LLMBackend, SimConfig
from pytest_llmsim.cli import build_parser
from pytest_llmsim.sim.config import parse_setting
from pytest_llmsim.sim.engine import SimSequence

TTFT = {"p50": 0.2, "p90": 0.5, "p99": 1.2}
ITL = {"p50": 0.02, "p90": 0.05, "p99": 0.12}


def quantiles(values: list[float | None]) -> dict[str, float]:
    cuts = statistics.quantiles([value for value in values if value is not None], n=1000, method="inclusive")
    return {"p50": cuts[499], "p90": cuts[899], "p99": cuts[989]}


def test_the_percentiles_asked_for_are_the_ones_measured() -> None:
    """On the virtual clock: 2,000 lone requests and a 2,001-token answer (benchmarks/percentile_latency.py runs
    10,000 and holds them to 2 %, 2 % and 5 %)."""
    engine, _ = make_engine(ttft=TTFT, max_batch_size=2_000, seed=3)
    sequences = [SimSequence(prompt(8, i), 1, index=i) for i in range(2_000)]
    for seq in sequences:
        engine.submit(seq)
    engine.run_until_idle()
    assert quantiles([seq.ttft for seq in sequences]) == pytest.approx(TTFT, rel=0.05)
    engine, _ = make_engine(itl=ITL, seed=3)
    answer = SimSequence(prompt(8), 2_001)
    engine.submit(answer)
    engine.run_until_idle()
    assert quantiles(list(answer.gaps)) == pytest.approx(ITL, rel=0.05)


def test_load_stretches_what_was_drawn() -> None:
    crowded, _ = make_engine(ttft=TTFT, load_factor=3.0, max_batch_size=3, seed=1)
    crowd = [SimSequence(prompt(4, 100 * i), 1, index=i) for i in range(3)]
    for seq in crowd:  # admitted together: the third finds three running, load 3
        crowded.submit(seq)
    crowded.run_until_idle()
    one_by_one, _ = make_engine(ttft=TTFT, load_factor=3.0, max_batch_size=3, seed=1)
    alone = [SimSequence(prompt(4, 100 * i), 1, index=i) for i in range(3)]
    for seq in alone:  # the same draws, in the same order, each alone: load 1
        one_by_one.submit(seq)
        one_by_one.run_until_idle()
    assert crowd[0].ttft == pytest.approx(alone[0].ttft)
    assert crowd[2].ttft == pytest.approx(alone[2].ttft * 3.0)  # type: ignore[operator]


def test_the_forms_a_distribution_is_given_in() -> None:
    asked = SimConfig().replace(ttft={"p50": 0.2, "p99": 1.2})
    assert parse_setting("ttft", "p50=0.2,p99=1.2") == asked.ttft
    assert float(asked.ttft) == 0.2 and repr(asked.ttft) == "{'p50': 0.2, 'p99': 1.2}"
    assert build_parser().parse_args(["serve", "--itl", "p50=0.01,p90=0.03"]).itl.as_mapping() == {
        "p50": 0.01, "p90": 0.03}
    assert parse_setting("ttft", "0.25") == 0.25  # seconds, as before
    for bad, why in (({"p50": 0.5, "p90": 0.2}, "higher percentile"), ({"median": 0.2}, "not a percentile"),
                     ({"p50": 0}, "seconds > 0"), ({"p100": 1}, "not a percentile"), ("p50", "p50=0.2")):
        with pytest.raises(ConfigError, match=why):
            SimConfig().replace(ttft=bad)


def test_an_sdk_sees_the_distribution_and_the_control_api_keeps_it(llm_backend: LLMBackend) -> None:
    llm_backend.configure(ttft={"p50": 0.2, "p90": 0.5, "p99": 1.2}, speed=float("inf"))
    client = openai.OpenAI(base_url=llm_backend.base_url, api_key="sk-test", max_retries=0)
    for i in range(200):
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": str(i)}], max_tokens=1)
    ttfts = [record.ttft for record in llm_backend.requests]
    measured = quantiles(ttfts)
    assert len(set(ttfts)) > 150  # drawn per request
    assert measured["p50"] == pytest.approx(0.2, rel=0.15) and measured["p90"] == pytest.approx(0.5, rel=0.25)
    control = llm_backend.url_for("/llmsim/v1/config")
    assert httpx.get(control).json()["ttft"] == {"p50": 0.2, "p90": 0.5, "p99": 1.2}
    changed = httpx.patch(control, json={"itl": {"p50": 0.01, "p99": 0.05}}).json()
    assert changed["itl"] == {"p50": 0.01, "p99": 0.05} and llm_backend.config.itl.as_mapping() == changed["itl"]
