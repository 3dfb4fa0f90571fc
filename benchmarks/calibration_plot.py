"""Fit the step-cost model to the shipped vLLM sweep twice (all rows; the rows at concurrency 1 and 32
only), print both tables and error summaries, and draw measured vs predicted as an SVG.

    python benchmarks/calibration_plot.py [--out docs/images/calibration.svg]
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import time

from pytest_llmsim.calibration import SweepRow, calibrate, errors, predict, read_sweep, render_table, with_client_gap
from pytest_llmsim.sim.config import PROFILES_DIR

PANELS = (("ttft_p50_ms", "TTFT p50 (ms)"), ("itl_p50_ms", "ITL p50 (ms)"), ("req_per_s", "requests/s"))
SERIES = (("measured (vLLM, L4)", "#222222"), ("fit on all rows", "#3b7dd8"), ("fit on c=1 and c=32", "#f2a03d"))


def svg(rows: list[SweepRow], fits: list[list[SweepRow]]) -> str:
    width, height, pad = 300, 230, 45
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{len(PANELS) * width}" height="{height + 40}" '
           'font-family="sans-serif" font-size="11">', '<rect width="100%" height="100%" fill="white"/>']
    xs = [math.log2(row.concurrency or 1) for row in rows]
    for panel, (metric, title) in enumerate(PANELS):
        left = panel * width + pad
        values = [getattr(r, metric) for series in (rows, *fits) for r in series]
        top_value = max(values) * 1.1

        def px(x: float, y: float, left: float = left, top_value: float = top_value) -> tuple[float, float]:
            return (left + x / max(xs) * (width - pad - 15),
                    height - pad + 20 - y / top_value * (height - pad - 10))

        out.append(f'<text x="{left}" y="16" font-weight="bold">{title}</text>')
        axis_y = height - pad + 20
        out.append(f'<line x1="{left}" y1="{axis_y}" x2="{left + width - pad - 15}" y2="{axis_y}" stroke="#444"/>')
        out.append(f'<line x1="{left}" y1="{height - pad + 20}" x2="{left}" y2="26" stroke="#444"/>')
        for x, row in zip(xs, rows):
            tx, ty = px(x, 0)
            out.append(f'<text x="{tx:.1f}" y="{ty + 14:.1f}" text-anchor="middle">{row.concurrency}</text>')
        for tick in range(5):
            value = top_value * tick / 4
            tx, ty = px(0, value)
            out.append(f'<text x="{tx - 4:.1f}" y="{ty + 4:.1f}" text-anchor="end">{value:.3g}</text>')
        for (_, colour), series in zip(SERIES, (rows, *fits)):
            points = [px(x, getattr(r, metric)) for x, r in zip(xs, series)]
            if series is rows:
                out += [f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3.5" fill="{colour}"/>' for x, y in points]
            else:
                joined = " ".join(f"{x:.1f},{y:.1f}" for x, y in points)
                out.append(f'<polyline points="{joined}" fill="none" stroke="{colour}" stroke-width="2"/>')
        out.append(f'<text x="{left + (width - pad) / 2:.0f}" y="{height + 12}" text-anchor="middle">concurrency '
                   "(closed loop)</text>")
    for index, (name, colour) in enumerate(SERIES):
        out.append(f'<rect x="{10 + index * 190}" y="{height + 22}" width="12" height="10" fill="{colour}"/>'
                   f'<text x="{26 + index * 190}" y="{height + 31}">{name}</text>')
    out.append("</svg>")
    return "\n".join(out)


def summary(predicted: list[SweepRow], rows: list[SweepRow]) -> str:
    per_row = [errors(p, m) for p, m in zip(predicted, rows)]
    return ", ".join(f"{metric} {statistics.median(abs(e[metric]) for e in per_row):.1%}"
                     for metric in ("ttft_p50_ms", "itl_p50_ms", "req_per_s", "e2e_p50_ms"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", default="docs/images/calibration.svg")
    args = parser.parse_args()
    rows = read_sweep(PROFILES_DIR / "qwen2.5-0.5b-l4.csv")
    started = time.perf_counter()
    workers = os.cpu_count() or 1  # as `llmsim calibrate` does
    every = calibrate(rows, workers=workers)
    print(f"fit on all rows ({time.perf_counter() - started:.1f} s, {workers} processes, budget "
          f"{every.config.max_num_batched_tokens}: {every.budget_note()}):")
    print(render_table(every.predicted, rows))
    print("median |error|:", summary(every.predicted, rows))
    started = time.perf_counter()
    ends = calibrate([rows[0], rows[-1]], workers=workers)
    predicted_ends = predict(ends.config, with_client_gap(rows, ends.client_gap_ms))
    budget = ends.config.max_num_batched_tokens
    print(f"\nfit on c=1 and c=32 ({time.perf_counter() - started:.1f} s, budget {budget}: {ends.budget_note()}):")
    print(render_table(predicted_ends, rows))
    print("median |error| on the rows in between:", summary(predicted_ends[1:-1], rows[1:-1]))
    with open(args.out, "w") as handle:
        handle.write(svg(rows, [every.predicted, predicted_ends]))


if __name__ == "__main__":
    main()
