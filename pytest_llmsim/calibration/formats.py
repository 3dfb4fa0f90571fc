"""Reading a sweep from the files benchmark tools write, saying what each field became.

- ``vllm bench serve --save-result`` JSON: one run per file, several files, a directory of them, a JSON
  list of runs, or runs appended to one file (JSON lines);
- SGLang ``bench_serving`` output (JSON lines, one run per line; ``median_e2e_latency_ms``, and req/s
  from ``completed / duration`` where ``request_throughput`` is absent);
- guidellm reports of any profile: each benchmark at one load level is a row (a ``throughput`` or sweep
  benchmark has none and is skipped, with a note); token counts as ``mean`` or ``total_sum / count``;
- CSV (``#`` lines are comments) with columns named as this project, ``vllm bench serve`` or published
  tables name them: median or mean TTFT, ITL or TPOT (as ITL), req/s or output tok/s, E2E,
  ``num_prompts``, the output and input lengths' spreads (``output_spread``, ``input_spread``) or standard
  deviations (``std_output_len``, ``std_input_len``); headers are matched ignoring case, spaces and units
  (``Mean TTFT (ms)``); medians are taken where a file has both, and a table whose first latency column is a
  mean is read as means (its rows' ``statistic``).

A run's output- and input-length spreads come from its per-request ``output_lens`` and ``input_lens``
(``--save-detailed``) or a guidellm report's ``output_token_count`` and ``prompt_token_count`` standard
deviations, where present.

Where a median is missing its mean stands in, and the note says so.
"""

from __future__ import annotations

import csv
import json
import math
import re
import statistics
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..recording.cassette import is_cassette
from .cassettes import MIN_REQUESTS, cassette_rows
from .sweep import SweepRow, spread_of

__all__ = ["SWEEP_SUFFIXES", "read_sweep", "read_sweeps"]

SWEEP_SUFFIXES = (".json", ".jsonl", ".csv")

# CSV header (normalised) -> field, in order of preference per field.
_CSV_COLUMNS: dict[str, tuple[str, ...]] = {
    "concurrency": ("concurrency", "max_concurrency", "num_concurrent", "clients"),
    "rate": ("rate", "request_rate", "qps"),
    "input_tokens": ("input_tokens", "input_len", "prompt_tokens", "isl"),
    "output_tokens": ("output_tokens", "output_len", "osl", "completion_tokens"),
    "ttft_p50_ms": ("ttft_p50_ms", "median_ttft_ms", "p50_ttft_ms", "ttft_ms", "mean_ttft_ms", "ttft_mean_ms"),
    "itl_p50_ms": ("itl_p50_ms", "median_itl_ms", "p50_itl_ms", "itl_ms", "median_tpot_ms", "tpot_p50_ms",
                   "p50_tpot_ms", "tpot_ms", "mean_itl_ms", "itl_mean_ms", "mean_tpot_ms", "tpot_mean_ms"),
    "req_per_s": ("req_per_s", "request_throughput", "requests_per_s", "req_s"),
    "output_tok_per_s": ("output_throughput", "output_tok_per_s", "output_tokens_per_s", "output_tok_s"),
    "e2e_p50_ms": ("e2e_p50_ms", "median_e2el_ms", "median_e2e_latency_ms", "median_e2e_ms", "e2e_ms",
                   "mean_e2el_ms", "mean_e2e_latency_ms", "e2e_mean_ms"),
    "num_prompts": ("num_prompts", "prompts", "completed"),
    "output_spread": ("output_spread", "output_len_spread"),
    "output_std": ("std_output_len", "output_len_std", "std_output_tokens", "output_tokens_std"),
    "input_spread": ("input_spread", "input_len_spread"),
    "input_std": ("std_input_len", "input_len_std", "std_input_tokens", "input_tokens_std"),
}
_LABELS = {"ttft_p50_ms": "TTFT p50", "itl_p50_ms": "ITL p50", "req_per_s": "req/s", "e2e_p50_ms": "E2E p50",
           "ttft_mean": "TTFT (mean)", "itl_mean": "ITL (mean)", "e2e_mean": "E2E (mean)",
           "input_tokens": "input tokens", "output_tokens": "output tokens", "num_prompts": "prompts",
           "concurrency": "concurrency", "rate": "rate", "output_tok_per_s": "req/s (output tok/s / output)",
           "output_spread": "output spread", "output_std": "output spread (sqrt(3) std / mean)",
           "input_spread": "input spread", "input_std": "input spread (sqrt(3) std / mean)"}


def _normalised(header: str) -> str:
    """``Mean TTFT (ms)`` -> ``mean_ttft_ms``, ``Output tok/s`` -> ``output_tok_per_s``."""
    text = header.lower().replace("tok/s", "tok_per_s").replace("req/s", "req_per_s")
    return re.sub(r"[^a-z0-9]+", "_", text).strip("_")


def _number(value: Any) -> float | None:
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if isinstance(value, str) and value.strip().lower() in ("inf", "infinity"):
        return math.inf
    return float(value)


class _Notes:
    """What each source field became, and what was ignored, per file."""

    def __init__(self) -> None:
        self.used: dict[str, str] = {}
        self.ignored: set[str] = set()
        self.skipped: list[str] = []

    def line(self, path: Path, rows: int) -> str:
        parts = [f"{path}: {rows} row{'s' if rows != 1 else ''}"]
        if self.used:
            parts.append(", ".join(f"{source} -> {_LABELS.get(field, field)}"
                                   for source, field in self.used.items()))
        if self.skipped:
            parts.append("skipped: " + "; ".join(self.skipped))
        if self.ignored:
            names = sorted(self.ignored)
            more = f" and {len(names) - 8} more" if len(names) > 8 else ""
            parts.append("ignored: " + ", ".join(names[:8]) + more)
        return "; ".join(parts)


def read_sweeps(paths: Iterable[str | Path]) -> tuple[list[SweepRow], list[str]]:
    """The rows of every file (a directory: each sweep file in it, in name order), and a note per file."""
    rows: list[SweepRow] = []
    notes: list[str] = []
    for given in paths:
        path = Path(given)
        files = sorted(p for p in path.iterdir() if p.suffix in SWEEP_SUFFIXES) if path.is_dir() else [path]
        if path.is_dir() and not files:
            raise ValueError(f"{path}: no sweep files ({', '.join(SWEEP_SUFFIXES)}) in this directory")
        for file in files:
            found, note = _read_file(file)
            rows.extend(found)
            notes.append(note)
    return rows, notes


def read_sweep(*paths: str | Path) -> list[SweepRow]:
    """The rows of one or more sweep files or directories (see the module's formats)."""
    return read_sweeps(paths)[0]


def _read_file(path: Path) -> tuple[list[SweepRow], str]:
    if is_cassette(path):  # an llmsim record cassette: its streamed answers' load levels
        rows = cassette_rows(path)
        if not rows:
            raise ValueError(f"{path}: no load level in this cassette (streamed chat answers with 'started' stamps, "
                             f"at least {MIN_REQUESTS} at a level)")
        return rows, f"{path}: {len(rows)} load level(s) from a recording (llmsim record)"
    text = path.read_text()
    notes = _Notes()
    if path.suffix in (".json", ".jsonl") or text.lstrip().startswith(("{", "[")):
        rows = [row for record in _json_records(text, path) for row in _json_rows(record, notes)]
    else:
        rows = _csv_rows(text, path, notes)
    if not rows:
        raise ValueError(f"{path}: no load level in this file ({notes.line(path, 0)})")
    return rows, notes.line(path, len(rows))


def _json_records(text: str, path: Path) -> list[Any]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        if "Extra data" not in error.msg:
            raise ValueError(f"{path}: {error}") from None
        records = []  # JSON lines: runs appended one per line (SGLang, vllm bench serve --append-result)
        for number, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    records.append(json.loads(line))
                except json.JSONDecodeError as line_error:
                    raise ValueError(f"{path}, line {number}: {line_error}") from None
        return records
    return data if isinstance(data, list) else [data]


def _json_rows(record: Any, notes: _Notes) -> list[SweepRow]:
    if not isinstance(record, dict):
        raise ValueError(f"expected a JSON object for a run, not {type(record).__name__}")
    if isinstance(record.get("benchmarks"), list):
        return [row for benchmark in record["benchmarks"] if (row := _guidellm_row(benchmark, notes)) is not None]
    return [_bench_run_row(record, notes)]


def _pick(record: dict[str, Any], names: tuple[str, ...], field: str, notes: _Notes) -> float | None:
    for name in names:
        value = _number(record.get(name))
        if value is not None:
            notes.used[name] = field
            return value
    return None


def _bench_run_row(run: dict[str, Any], notes: _Notes) -> SweepRow:
    """One ``vllm bench serve`` or SGLang ``bench_serving`` run: its load level, mean tokens, medians."""
    completed = _number(run.get("completed")) or 0
    concurrency = _number(run.get("max_concurrency"))
    rate = _number(run.get("request_rate"))
    rate = None if rate is None or math.isinf(rate) else rate
    if concurrency is None and rate is None:
        raise ValueError("a benchmark run needs max_concurrency or a finite request_rate")
    if not completed or run.get("total_input_tokens") is None or run.get("total_output_tokens") is None:
        raise ValueError("a benchmark run needs completed, total_input_tokens and total_output_tokens")
    req_per_s = _pick(run, ("request_throughput",), "req_per_s", notes)
    duration = _number(run.get("duration"))
    if req_per_s is None and duration:
        req_per_s = completed / duration
        notes.used["completed / duration"] = "req_per_s"
    prompts = _number(run.get("num_prompts")) or completed
    notes.used.update({"max_concurrency" if concurrency is not None else "request_rate":
                       "concurrency" if concurrency is not None else "rate",
                       "total_input_tokens / completed": "input_tokens",
                       "total_output_tokens / completed": "output_tokens",
                       "num_prompts" if run.get("num_prompts") else "completed": "num_prompts"})
    workload = {"max_concurrency", "request_rate", "completed", "total_input_tokens", "total_output_tokens",
                "num_prompts", "duration"}
    # per request, with vllm bench serve --save-detailed (SGLang: --output-details)
    spread, input_spread = _lengths_spread(run, "output_lens", notes), _lengths_spread(run, "input_lens", notes)
    itl_names = ("median_itl_ms", "mean_itl_ms", "median_tpot_ms")
    itl_name = next((name for name in itl_names if _number(run.get(name)) is not None), "")
    row = SweepRow(int(concurrency) if concurrency is not None else None, None if concurrency is not None else rate,
                   round(float(run["total_input_tokens"]) / completed),
                   round(float(run["total_output_tokens"]) / completed),
                   _pick(run, ("median_ttft_ms", "mean_ttft_ms"), "ttft_p50_ms", notes),
                   _pick(run, itl_names, "itl_p50_ms", notes),
                   req_per_s, _pick(run, ("median_e2el_ms", "median_e2e_latency_ms", "mean_e2el_ms",
                                          "mean_e2e_latency_ms"), "e2e_p50_ms", notes), int(prompts),
                   itl_per="request" if "tpot" in itl_name else "gap", output_spread=spread,
                   input_spread=input_spread)
    notes.ignored |= {key for key in run if key not in workload and key not in notes.used}
    return row


def _statistic(metrics: dict[str, Any], name: str, statistic: str = "median") -> float | None:
    summary = metrics.get(name) or {}
    part = summary.get("successful") or summary.get("total") or {}
    value = part.get(statistic)
    if value is None and statistic == "mean" and part.get("count"):
        total = part.get("total_sum")
        value = None if total is None else total / part["count"]
    return None if value is None else float(value)


def _guidellm_row(benchmark: dict[str, Any], notes: _Notes) -> SweepRow | None:
    """One benchmark of a guidellm report: its strategy (``concurrent``/``synchronous`` streams, or a
    ``constant``/``poisson`` rate) and the successful requests' statistics; None (noted) for a benchmark
    with no single load level (``throughput``)."""
    strategy = (benchmark.get("config") or {}).get("strategy") or benchmark.get("args", {}).get("strategy") or {}
    kind = strategy.get("type_") or strategy.get("type")
    metrics = benchmark.get("metrics") or {}
    prompt, output = _statistic(metrics, "prompt_token_count", "mean"), _statistic(metrics, "output_token_count",
                                                                                   "mean")
    if kind == "concurrent" or kind == "synchronous":
        concurrency, rate = int(strategy.get("streams", 1)), None
    elif kind in ("constant", "poisson", "async") and strategy.get("rate"):
        concurrency, rate = None, float(strategy["rate"])
    else:
        notes.skipped.append(f"a {kind or 'untyped'} benchmark (no single load level)")
        return None
    if prompt is None or output is None:
        raise ValueError("a guidellm benchmark needs prompt_token_count and output_token_count")
    latency = _statistic(metrics, "request_latency")
    output_std = _statistic(metrics, "output_token_count", "std_dev")
    prompt_std = _statistic(metrics, "prompt_token_count", "std_dev")
    totals = (metrics.get("request_totals") or benchmark.get("request_totals") or {})
    notes.used.update({"time_to_first_token_ms": "ttft_p50_ms", "inter_token_latency_ms": "itl_p50_ms",
                       "requests_per_second": "req_per_s", "request_latency": "e2e_p50_ms"})
    return SweepRow(concurrency, rate, round(prompt), round(output),
                    _statistic(metrics, "time_to_first_token_ms"), _statistic(metrics, "inter_token_latency_ms"),
                    _statistic(metrics, "requests_per_second", "mean"), None if latency is None else latency * 1000,
                    int(totals["successful"]) if isinstance(totals.get("successful"), int) else None,
                    arrivals="constant" if kind == "constant" else "poisson",  # constant: evenly spaced sends
                    itl_per="request",  # guidellm's ITL: each request's (latency - TTFT) / (tokens - 1)
                    output_spread=None if output_std is None else spread_of(output, output_std),
                    input_spread=None if prompt_std is None else spread_of(prompt, prompt_std))


def _csv_rows(text: str, path: Path, notes: _Notes) -> list[SweepRow]:
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("#")]  # comments: the source
    reader = csv.DictReader(lines)
    headers = {_normalised(name): name for name in reader.fieldnames or []}
    chosen: dict[str, str] = {}
    for field, names in _CSV_COLUMNS.items():
        for name in names:
            if name in headers:
                chosen[field] = headers[name]
                notes.used[headers[name]] = field
                break
    notes.ignored = {name for name in reader.fieldnames or [] if name not in chosen.values()}
    for needed in ("input_tokens", "output_tokens"):
        if needed not in chosen:
            raise ValueError(f"{path}, line 1: no {needed} column (headers: {', '.join(reader.fieldnames or [])})")
    itl_per = "request" if "tpot" in _normalised(chosen.get("itl_p50_ms", "")) else "gap"  # TPOT: a request's mean
    # a table of means (AIPerf's, genai-perf's): its rows' latencies are means, the first latency column says
    first = next((_normalised(chosen[f]) for f in ("ttft_p50_ms", "itl_p50_ms", "e2e_p50_ms") if f in chosen), "")
    statistic = "mean" if "mean" in first.split("_") else "median"
    if statistic == "mean":
        notes.used.update({chosen[f]: f.replace("p50_ms", "mean") for f in ("ttft_p50_ms", "itl_p50_ms", "e2e_p50_ms")
                           if f in chosen})
    rows = []
    for number, record in enumerate(reader, 2):
        def value(field: str, record: dict[str, str] = record) -> float | None:
            return _number(record.get(chosen[field])) if field in chosen else None
        try:
            concurrency, output = value("concurrency"), value("output_tokens")
            req_per_s = value("req_per_s")
            tokens_per_s = value("output_tok_per_s")
            if req_per_s is None and tokens_per_s is not None and output:
                req_per_s = tokens_per_s / output
            prompts = value("num_prompts")
            rows.append(SweepRow(int(concurrency) if concurrency is not None else None, value("rate"),
                                 round(value("input_tokens") or 0), round(output or 0), value("ttft_p50_ms"),
                                 value("itl_p50_ms"), req_per_s, value("e2e_p50_ms"),
                                 int(prompts) if prompts is not None else None, itl_per=itl_per,
                                 statistic=statistic,
                                 output_spread=_csv_spread("output", value("output_spread"), value("output_std"),
                                                           output),
                                 input_spread=_csv_spread("input", value("input_spread"), value("input_std"),
                                                          value("input_tokens"))))
        except (TypeError, ValueError) as error:
            raise ValueError(f"{path}, line {number}: {error}") from None
    return rows


def _lengths_spread(run: dict[str, Any], name: str, notes: _Notes) -> float | None:
    """The spread of a run's per-request lengths (``output_lens``, ``input_lens``), where it has them."""
    lengths = run.get(name)
    if not (isinstance(lengths, list) and len(lengths) > 1 and all(isinstance(n, (int, float)) for n in lengths)):
        return None
    notes.used[name] = name.replace("_lens", "_spread")
    return spread_of(statistics.fmean(lengths), statistics.pstdev(lengths))


def _csv_spread(kind: str, spread: float | None, std: float | None, mean: float | None) -> float | None:
    """A CSV row's spread of its ``kind`` lengths: the spread column, else from the standard deviation."""
    if spread is None and std is not None:
        spread = spread_of(mean or 0, std)
    if spread is not None and not 0 <= spread < 1:
        raise ValueError(f"an {kind} spread is at least 0 and below 1, not {spread}")
    return spread
