"""Trim a guidellm report to the test fixture: each benchmark's type, strategy, duration and the summaries the
sweep reader uses, for successful requests and all of them (the per-request lists, the errored and incomplete
summaries, the text/audio statistics dropped; every field kept is as guidellm wrote it).

The fixture tests/data/guidellm-0.8.1-sweep.json was made by guidellm 0.8.1 itself against `llmsim serve`
(nothing downloaded: a word-level tokenizer over Faker's words, saved with transformers' save_pretrained):

    llmsim serve --port 18455 --profile qwen2.5-0.5b-l4 --speed 1
    HF_HUB_OFFLINE=1 guidellm run --backend kind=openai_http,target=http://127.0.0.1:18455 \\
        --tokenizer kind=hf_auto,model=TOKENIZER_DIR \\
        --data kind=synthetic_text,prompt_tokens=256,output_tokens=64 --profile kind=sweep,sweep_size=4 \\
        --constraint kind=max_requests,count=30 --constraint kind=max_duration,seconds=15 \\
        --output kind=json,path=report.json
    python benchmarks/guidellm_fixture.py report.json tests/data/guidellm-0.8.1-sweep.json

tests/data/guidellm-0.8.1-concurrent-16-64.json the same way, with ``--profile kind=concurrent --override
profile.streams 16,64 --constraint kind=max_requests,count=320`` (no duration constraint), and
tests/data/guidellm-0.8.1-constant-rates.json with ``--profile kind=constant --override profile.rate
2,4,8,16,24,32 --constraint kind=max_requests,count=160`` (no duration constraint; 4.5 minutes).
TOKENIZER_DIR is written by ``python benchmarks/guidellm_tokenizer.py TOKENIZER_DIR``.
"""

from __future__ import annotations

import json
import sys

KEPT_METRICS = ("request_totals", "requests_per_second", "request_concurrency", "request_latency",
                "prompt_token_count", "output_token_count", "time_to_first_token_ms", "time_per_output_token_ms",
                "inter_token_latency_ms", "output_tokens_per_second")
KEPT_PARTS = ("successful", "total")
DROPPED_BENCHMARK_FIELDS = ("requests",)


def trim(report: dict[str, object]) -> dict[str, object]:
    benchmarks = []
    for benchmark in report["benchmarks"]:  # type: ignore[attr-defined]
        kept = {key: value for key, value in benchmark.items() if key not in DROPPED_BENCHMARK_FIELDS}
        kept["metrics"] = {key: {part: summary for part, summary in value.items() if part in KEPT_PARTS}
                           for key, value in benchmark["metrics"].items() if key in KEPT_METRICS}
        benchmarks.append(kept)
    return {**report, "benchmarks": benchmarks}


def main() -> None:
    source, target = sys.argv[1:3]
    with open(source) as file:
        report = json.load(file)
    with open(target, "w") as file:
        json.dump(trim(report), file, separators=(",", ":"))
        file.write("\n")


if __name__ == "__main__":
    main()
