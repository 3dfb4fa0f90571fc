"""`llmsim serve` in a real subprocess: prints its URL, serves, stops on Ctrl-C."""

from __future__ import annotations

import re
import signal
import subprocess
import sys

import httpx
import pytest

from pytest_llmsim.cli import build_parser


def test_serve_prints_url_serves_and_stops_on_sigint() -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "pytest_llmsim.cli", "serve", "--port", "0", "--ttft", "0.05",
         "--itl", "0.01", "--speed", "inf", "--model", "sim-7b", "--max-batch-size", "4"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        match = re.search(r"(http://127\.0\.0\.1:\d+/v1)", line)
        assert match, line
        base = match.group(1)
        body = {"model": "sim-7b", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}
        response = httpx.post(f"{base}/chat/completions", json=body, timeout=10)
        assert response.status_code == 200
        assert response.json()["usage"]["completion_tokens"] == 3
        assert httpx.get(f"{base}/models").json()["data"][0]["id"] == "sim-7b"
        assert "vllm:time_to_first_token_seconds" in httpx.get(base[:-3] + "/metrics").text
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=10)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 0, err
    assert "llmsim stopped" in out
    assert "Traceback" not in err


def test_every_setting_is_a_flag() -> None:
    args = build_parser().parse_args(["serve", "--cache-hit-rate", "0.5", "--answer-length", "2-4",
                                      "--output", "echo"])
    assert (args.cache_hit_rate, args.answer_length, args.output) == (0.5, (2, 4), "echo")


def test_bad_flag_value_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        build_parser().parse_args(["serve", "--speed", "fast"])
    assert caught.value.code == 2
    assert "expected a positive number or 'inf'" in capsys.readouterr().err
