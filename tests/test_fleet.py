"""A fleet's metrics summed by its first replica (``GET /llmsim/v1/fleet``): what adds up and what does not."""

from __future__ import annotations

import httpx

from pytest_llmsim import LLMBackend
from pytest_llmsim.server.fleet import sum_metrics


def test_counts_add_distributions_keep_count_and_weighted_mean_percentiles_are_left_out() -> None:
    a = {"requests_total": 3, "requests_by_status": {"200": 2, "429": 1}, "max_running": 4, "cache_hit_rate": 0.5,
         "ttft": {"count": 2, "mean": 0.1, "p50": 0.1}, "emit_lag": {"count": 0, "mean": None}}
    b = {"requests_total": 1, "requests_by_status": {"200": 1}, "max_running": 7, "cache_hit_rate": 0.0,
         "ttft": {"count": 2, "mean": 0.3, "p50": 0.3}, "emit_lag": {"count": 1, "mean": 0.002}}
    total = sum_metrics([a, b])
    assert total["requests_total"] == 4 and total["requests_by_status"] == {"200": 3, "429": 1}
    assert total["max_running"] == 7 and "cache_hit_rate" not in total
    assert total["ttft"]["count"] == 4 and abs(total["ttft"]["mean"] - 0.2) < 1e-12 and "p50" not in total["ttft"]
    assert total["emit_lag"] == {"count": 1, "mean": 0.002}


def test_a_replica_that_does_not_answer_is_named_and_the_rest_still_add_up() -> None:
    with LLMBackend(speed=float("inf")) as first, LLMBackend(speed=float("inf")) as second:
        gone = LLMBackend().start()
        gone_url = gone.root_url
        gone.stop()
        first.httpserver.control.fleet = (first.root_url, [second.root_url, gone_url])
        httpx.post(second.base_url + "/completions", json={"model": "m", "prompt": "hi", "max_tokens": 2})
        fleet = httpx.get(first.url_for("/llmsim/v1/fleet")).json()
        assert fleet["answered"] == 2 and fleet["total"]["requests_total"] == 1
        assert fleet["replicas"][2]["url"] == gone_url and "error" in fleet["replicas"][2]
        assert httpx.get(second.url_for("/llmsim/v1/fleet")).status_code == 404  # not the first replica
