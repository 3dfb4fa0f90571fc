"""A load sweep: one row per load level, and the files it is read from (CSV, ``vllm bench serve``
results, guidellm reports)."""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["METRICS", "SweepRow", "read_sweep"]

METRICS = ("ttft_p50_ms", "itl_p50_ms", "req_per_s", "e2e_p50_ms")


@dataclass(frozen=True)
class SweepRow:
    """One load level of a sweep: the workload and (measured or predicted) latencies in milliseconds."""

    concurrency: int | None
    rate: float | None
    input_tokens: int
    output_tokens: int
    ttft_p50_ms: float | None = None
    itl_p50_ms: float | None = None
    req_per_s: float | None = None
    e2e_p50_ms: float | None = None

    def workload(self) -> str:
        return f"concurrency {self.concurrency}" if self.concurrency is not None else f"rate {self.rate}/s"


def _number(value: Any) -> float | None:
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    return float(value)


def read_sweep(path: str | Path) -> list[SweepRow]:
    """A sweep from CSV (columns ``concurrency`` or ``rate``, ``input_tokens``, ``output_tokens`` and any of
    ``ttft_p50_ms``, ``itl_p50_ms``, ``req_per_s``, ``e2e_p50_ms``), from ``vllm bench serve
    --save-result`` JSON files (one run per file, or a JSON list of runs), or from a guidellm report
    (its ``benchmarks`` at fixed concurrency or rate)."""
    path = Path(path)
    text = path.read_text()
    if path.suffix == ".json" or text.lstrip().startswith(("{", "[")):
        data = json.loads(text)
        if isinstance(data, dict) and isinstance(data.get("benchmarks"), list):
            return [_guidellm_row(benchmark) for benchmark in data["benchmarks"]]
        return [_vllm_bench_row(run) for run in (data if isinstance(data, list) else [data])]
    rows = []
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("#")]  # comments: the source
    for number, record in enumerate(csv.DictReader(lines), 2):
        try:
            concurrency = _number(record.get("concurrency"))
            rows.append(SweepRow(int(concurrency) if concurrency is not None else None, _number(record.get("rate")),
                                 int(record["input_tokens"]), int(record["output_tokens"]),
                                 *(_number(record.get(name)) for name in METRICS)))
        except (KeyError, TypeError, ValueError) as error:
            raise ValueError(f"{path}, line {number}: {error}") from None
    return rows


def _vllm_bench_row(run: dict[str, Any]) -> SweepRow:
    """One ``vllm bench serve`` result: concurrency or rate, mean tokens per request, medians."""
    completed = run.get("completed") or 1
    concurrency = run.get("max_concurrency")
    rate = run.get("request_rate")
    rate = None if rate in (None, "inf") or (isinstance(rate, float) and math.isinf(rate)) else float(rate)
    if concurrency is None and rate is None:
        raise ValueError("a vllm bench result needs max_concurrency or a finite request_rate")
    return SweepRow(int(concurrency) if concurrency is not None else None, None if concurrency is not None else rate,
                    round(run["total_input_tokens"] / completed), round(run["total_output_tokens"] / completed),
                    run.get("median_ttft_ms"), run.get("median_itl_ms"), run.get("request_throughput"),
                    run.get("median_e2el_ms"))


def _successful(metrics: dict[str, Any], name: str, statistic: str = "median") -> float | None:
    summary = metrics.get(name) or {}
    part = summary.get("successful") or summary.get("total") or {}
    value = part.get(statistic)
    return None if value is None else float(value)


def _guidellm_row(benchmark: dict[str, Any]) -> SweepRow:
    """One benchmark of a guidellm report (``guidellm benchmark --output-path report.json``): its strategy
    (``concurrent`` streams, or a ``constant``/``poisson`` rate) and the successful requests' statistics."""
    strategy = (benchmark.get("config") or {}).get("strategy") or benchmark.get("args", {}).get("strategy") or {}
    kind = strategy.get("type_") or strategy.get("type")
    metrics = benchmark.get("metrics") or {}
    latency = _successful(metrics, "request_latency")
    prompt, output = _successful(metrics, "prompt_token_count", "mean"), _successful(metrics, "output_token_count",
                                                                                     "mean")
    if prompt is None or output is None:
        raise ValueError("a guidellm benchmark needs prompt_token_count and output_token_count")
    common = dict(input_tokens=round(prompt), output_tokens=round(output),
                  ttft_p50_ms=_successful(metrics, "time_to_first_token_ms"),
                  itl_p50_ms=_successful(metrics, "inter_token_latency_ms"),
                  req_per_s=_successful(metrics, "requests_per_second", "mean"),
                  e2e_p50_ms=None if latency is None else latency * 1000)
    if kind == "concurrent" or kind == "synchronous":
        return SweepRow(int(strategy.get("streams", 1)), None, **common)  # type: ignore[arg-type]
    if kind in ("constant", "poisson") and strategy.get("rate"):
        return SweepRow(None, float(strategy["rate"]), **common)  # type: ignore[arg-type]
    raise ValueError(f"guidellm strategy {kind!r} is not a fixed concurrency or rate (sweep and throughput runs "
                     "have no single load level)")
