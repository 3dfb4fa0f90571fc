"""`llmsim serve` under vLLM's command line and llm-d-inference-sim's: each argument takes effect."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from pytest_llmsim.cli import build_parser
from pytest_llmsim.cli.vllm_arguments import vllm_settings, yaml_config_arguments
from pytest_llmsim.sim.config import parse_setting


def _serve(*arguments: str, environment: dict[str, str] | None = None) -> tuple[subprocess.Popen[str], str]:
    process = subprocess.Popen([sys.executable, "-m", "pytest_llmsim.cli", "serve", *arguments],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, **(environment or {})})
    assert process.stdout is not None
    line = process.stdout.readline()
    match = re.search(r"(http://127\.0\.0\.1:\d+)/v1", line)
    if not match:
        process.kill()
        raise AssertionError(f"no URL: {line!r} {process.communicate()[1]}")
    return process, match.group(1)


def _stop(process: subprocess.Popen[str]) -> str:
    process.terminate()
    return process.communicate(timeout=30)[1]


# vLLM's docs' own examples (serving a LoRA, the OpenAI server's options), merged into one command line
VLLM_COMMAND_LINE = [
    "meta-llama/Llama-3.1-8B-Instruct", "--served-model-name", "llama-8b", "llama",
    "--max-num-seqs", "8", "--max-model-len", "16k", "--max-num-batched-tokens", "4096", "--block-size", "32",
    "--enable-prefix-caching", "--no-enable-chunked-prefill", "--enable-lora", "--max-loras", "2",
    "--max-lora-rank", "64",
    "--lora-modules", "sql-lora=/adapters/sql",
    '{"name": "tweet-lora", "path": "/adapters/tweet", "base_model_name": "meta-llama/Llama-3.1-8B-Instruct"}',
    "--api-key", "token-abc123", "--uvicorn-log-level", "warning", "--seed", "7",
    "--tensor-parallel-size", "1", "--dtype", "auto", "--gpu-memory-utilization", "0.9", "--trust-remote-code",
    "--enforce-eager", "-pp", "1", "--kv-cache-dtype=auto", "--port", "0",
]


def test_vllms_command_line_takes_effect() -> None:
    pod = {"POD_NAME": "sim-0", "POD_NAMESPACE": "serving"}  # what the manifests' downward API sets
    process, root = _serve(*VLLM_COMMAND_LINE, environment=pod)
    try:
        config = httpx.get(f"{root}/llmsim/v1/config", timeout=10).json()
        assert (config["model"], config["served_models"]) == ("llama-8b", ["llama"])
        assert (config["max_batch_size"], config["max_model_len"], config["max_num_batched_tokens"]) == (8, 16000, 4096)
        assert (config["block_size"], config["max_loras"], config["seed"]) == (32, 2, 7)
        assert config["lora_adapters"] == ["sql-lora", "tweet-lora"]
        assert config["required_api_key"] == "token-abc123"
        assert config["cache_capacity_blocks"] > 0  # prefix caching on, as asked
        assert config["chunked_prefill"] is False  # prompts whole, as asked
        assert httpx.get(f"{root}/v1/models", timeout=10).status_code == 401  # --api-key guards the API
        client = openai.OpenAI(base_url=f"{root}/v1", api_key="token-abc123", max_retries=0)
        models = {model.id: model for model in client.models.list()}
        assert {"llama-8b", "llama", "sql-lora", "tweet-lora"} <= set(models)
        assert models["sql-lora"].model_extra["parent"] == "llama-8b"  # adapters under the served name, as vLLM
        answer = client.chat.completions.create(model="tweet-lora", messages=[{"role": "user", "content": "hi"}],
                                                max_tokens=3)
        assert answer.model == "tweet-lora" and answer.usage is not None and answer.usage.completion_tokens == 3
        with client.chat.completions.with_streaming_response.create(
                model="llama", messages=[{"role": "user", "content": "hi"}], max_tokens=3, stream=True) as streamed:
            # the pod that answered, as llm-d-inference-sim says it: gateways' tests read it
            identity = (streamed.headers["x-inference-pod"], streamed.headers["x-inference-namespace"])
            assert identity == tuple(pod.values())
            assert sum(1 for _ in streamed.iter_lines()) > 3
    finally:
        errors = _stop(process)
    warning = next(line for line in errors.splitlines() if "accepted with no effect" in line)
    for flag in ("--tensor-parallel-size", "--dtype", "--gpu-memory-utilization", "--trust-remote-code",
                 "--enforce-eager", "-pp", "--kv-cache-dtype", "--max-lora-rank"):
        assert flag in warning
    assert "Traceback" not in errors


def test_llm_d_inference_sims_yaml_config_takes_effect(tmp_path: Path) -> None:
    config_file = tmp_path / "config.yaml"  # the shape of llm-d-inference-sim's manifests/config.yaml
    config_file.write_text(
        'port: 0\nmodel: "Qwen/Qwen2-0.5B"\nmax-loras: 2\nmax-cpu-loras: 5\nmax-num-seqs: 5\nmode: "echo"\n'
        'lora-modules:\n  - \'{"name":"tweet-summary-0","path":"/path/to/lora/tweet-summary-0"}\'\n'
        '  - \'{"name":"tweet-summary-1","path":"/path/to/lora/tweet-summary-1"}\'\n'
        'time-to-first-token: 2000\ninter-token-latency: 1000\nkv-cache-size: 1024\n'
        'failure-injection-rate: 100\nfailure-types: ["rate_limit"]\n', encoding="utf-8")
    # the command line wins over the file, as llm-d-inference-sim's does
    process, root = _serve("--config", str(config_file), "--time-to-first-token", "250ms", "--speed", "inf")
    try:
        config = httpx.get(f"{root}/llmsim/v1/config", timeout=10).json()
        assert (config["model"], config["max_batch_size"], config["max_loras"]) == ("Qwen/Qwen2-0.5B", 5, 2)
        assert (config["output"], config["ttft"], config["itl"]) == ("echo", 0.25, 1.0)
        assert (config["kv_cache_blocks"], config["lora_adapters"]) == (1024, ["tweet-summary-0", "tweet-summary-1"])
        faults = httpx.get(f"{root}/llmsim/v1/faults", timeout=10).json()
        assert [(fault["kind"], fault["rate"]) for fault in faults] == [("rate_limit", 1.0)]
        body = {"model": "Qwen/Qwen2-0.5B", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
        assert httpx.post(f"{root}/v1/chat/completions", json=body, timeout=10).status_code == 429
    finally:
        errors = _stop(process)
    assert "--max-cpu-loras" in errors and "Traceback" not in errors


def _parsed(*arguments: str) -> Any:
    return build_parser().parse_args(["serve", *arguments])


def test_a_flag_vllm_does_not_know_is_refused_by_name(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        _parsed("--max-num-seqs", "4", "--tensor-parallel-sizes", "2")
    assert caught.value.code == 2
    assert "unrecognized arguments: --tensor-parallel-sizes" in capsys.readouterr().err


def test_the_prefix_cache_turns_off_and_keys_may_be_several() -> None:
    settings, faults, ignored = vllm_settings(_parsed("--no-enable-prefix-caching", "--api-key", "a", "b"))
    assert settings == {"cache_capacity_blocks": 0, "api_keys": ["a", "b"]}
    assert (faults, ignored) == ([], [])


def test_chunked_prefill_turns_off_as_vllm_v0s() -> None:
    """``--no-enable-chunked-prefill`` has an effect here: the step scheduler takes prompts whole."""
    for flag, chunked in (("--no-enable-chunked-prefill", False), ("--enable-chunked-prefill", True)):
        settings, _, ignored = vllm_settings(_parsed(flag))
        assert settings == {"chunked_prefill": chunked} and ignored == []
    assert "chunked_prefill" not in vllm_settings(_parsed())[0]


def test_failures_share_their_rate_evenly_across_types() -> None:
    _, faults, _ = vllm_settings(_parsed("--failure-injection-rate", "30", "--failure-types", "rate_limit",
                                         "server_error", "invalid_request"))
    assert [kind for kind, _ in faults] == ["rate_limit", "server_error", "http_error"]
    assert faults[2][1]["status"] == 400
    chance_none_before, shares = 1.0, []
    for _, params in faults:  # each fault is drawn only when the ones before it did not fire
        shares.append(chance_none_before * params["rate"])
        chance_none_before *= 1 - params["rate"]
    assert shares == pytest.approx([0.1, 0.1, 0.1])


def test_latency_std_devs_become_one_relative_jitter() -> None:
    settings, _, _ = vllm_settings(_parsed("--time-to-first-token", "100", "--time-to-first-token-std-dev", "10",
                                           "--inter-token-latency", "0.02s", "--inter-token-latency-std-dev", "4ms"))
    assert settings == pytest.approx({"ttft": 0.1, "itl": 0.02, "jitter": 0.2})


@pytest.mark.parametrize(("text", "value"), [("32768", 32768), ("32k", 32000), ("32K", 32768), ("25.6k", 25600),
                                             ("1M", 2**20)])
def test_lengths_read_as_vllm_reads_them(text: str, value: int) -> None:
    assert parse_setting("max_model_len", text) == value


def test_yaml_lists_and_switches_become_flags(tmp_path: Path) -> None:
    path = tmp_path / "vllm.yml"
    path.write_text("served_model_name: [a, b]\ntrust-remote-code: true\nenable-prefix-caching: false\n"
                    "lora-modules:\n  - {name: x, path: /x}\n", encoding="utf-8")
    assert yaml_config_arguments(str(path)) == [
        "--served-model-name", "a", "b", "--trust-remote-code", "--no-enable-prefix-caching",
        "--lora-modules", json.dumps({"name": "x", "path": "/x"})]
