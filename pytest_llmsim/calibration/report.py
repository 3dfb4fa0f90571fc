"""A calibration's results written out: the profile (TOML), tables (Markdown, CSV, JSON) and a plot (SVG)."""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

from ..sim.config import SimConfig
from .benchmark import told_to_toml
from .fit import FITTED, PRIORS
from .sweep import METRICS, SweepRow
from .uncertainty import FittedRange
from .workload import errors

__all__ = ["render_csv", "render_json", "render_profile", "render_svg", "render_table"]

LABELS = {"ttft_p50_ms": "TTFT p50 ms", "itl_p50_ms": "ITL p50 ms", "req_per_s": "req/s", "e2e_p50_ms": "E2E p50 ms"}


def render_profile(config: SimConfig, source: str = "", budget_note: str = "",
                   predicted: Sequence[SweepRow] = (), measured: Sequence[SweepRow] = (),
                   notes: Sequence[str] = (), fitted_range: FittedRange | None = None,
                   told: Mapping[str, Any] | None = None) -> str:
    """The step-cost settings of ``config`` as TOML, loadable by ``llmsim serve --config`` and ``SimConfig``
    (``budget_note``: how ``max_num_batched_tokens`` was chosen, as :meth:`Fit.budget_note` says); with
    ``predicted`` and ``measured`` rows, the fit's table follows as TOML comments (still a valid profile);
    ``notes`` are comment lines after the source (the priors used, say); ``fitted_range`` closes it as the
    ``[calibration]`` table ``llmsim predict`` reads its warnings and bands from, and ``told`` (what the sweep's
    benchmark did, ``benchmark.TOLD_KEYS``) as the benchmark it runs by default."""
    lines = [f"# {source}" if source else "# fitted by llmsim calibrate", *(f"# {note}" for note in notes),
             'scheduler = "step"']
    experts = ("step_expert_weights", "expert_share_per_token") if config.expert_share_per_token else ()
    for name in (*FITTED, *experts, "max_num_batched_tokens", *PRIORS):
        value = getattr(config, name)
        at_prior = name in PRIORS and value == PRIORS[name]  # hardware priors fit step_per_decode_seq
        note = "  # prior: not identified by one request shape" if at_prior else ""
        if name == "max_num_batched_tokens" and budget_note:
            note = f"  # {budget_note}"
        lines.append(f"{name} = {value:.6g}{note}" if isinstance(value, float) else f"{name} = {value}{note}")
    if config.step_policy != "mixed":
        lines.append(f'step_policy = "{config.step_policy}"')
    if not config.chunked_prefill:
        lines.append("chunked_prefill = false  # prompts whole, never split across steps")
    if config.separate_prefill_pass:
        lines.append("separate_prefill_pass = true  # a step's prompts and decodes in two forward passes")
    if config.kv_cache_blocks is not None:
        lines.append(f"kv_cache_blocks = {config.kv_cache_blocks}  # the devices' memory less the weights")
    if predicted:
        lines += ["", "# predicted (error vs measured) per row:"]
        lines += ["# " + line for line in render_table(predicted, measured or None).splitlines()]
    return ("\n".join(lines) + "\n" + (fitted_range.to_toml() if fitted_range is not None else "")
            + told_to_toml(told or {}))


def render_table(rows: Sequence[SweepRow], measured: Sequence[SweepRow] | None = None,
                 bands: Sequence[dict[str, float]] | None = None) -> str:
    """A Markdown table of rows (with the error against ``measured`` per metric, when given; with ``bands``,
    each prediction's relative uncertainty per metric)."""
    header = "| workload | input | output | TTFT p50 ms | ITL p50 ms | req/s | E2E p50 ms |"
    lines = [header, "|---|---|---|---|---|---|---|"]
    for index, row in enumerate(rows):
        cells = []
        for name in METRICS:
            value = getattr(row, name)
            cell = "-" if value is None else f"{value:.4g}"
            if bands is not None and value is not None:
                cell += f" ±{bands[index][name]:.0%}"
            if measured is not None:
                err = errors(row, measured[index]).get(name)
                cell += "" if err is None else f" ({err:+.0%})"
            cells.append(cell)
        lines.append(f"| {row.workload()} | {row.input_tokens} | {row.output_tokens} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _records(rows: Sequence[SweepRow], measured: Sequence[SweepRow] | None) -> list[dict[str, Any]]:
    records = []
    for index, row in enumerate(rows):
        record: dict[str, Any] = {"concurrency": row.concurrency, "rate": row.rate, "input_tokens": row.input_tokens,
                                  "output_tokens": row.output_tokens, "num_prompts": row.num_prompts}
        record.update({name: getattr(row, name) for name in METRICS})
        if measured is not None:
            real = measured[index]
            record.update({f"measured_{name}": getattr(real, name) for name in METRICS})
            record.update({f"error_{name}": value for name, value in errors(row, real).items()})
        records.append(record)
    return records


def render_csv(rows: Sequence[SweepRow], measured: Sequence[SweepRow] | None = None) -> str:
    """The rows as CSV (this project's column names; with ``measured``, its values and the errors too)."""
    records = _records(rows, measured)
    out = io.StringIO()
    fields = list(dict.fromkeys(key for record in records for key in record))
    writer = csv.DictWriter(out, fields, lineterminator="\n")
    writer.writeheader()
    writer.writerows({k: ("" if v is None else v) for k, v in record.items()} for record in records)
    return out.getvalue()


def render_json(rows: Sequence[SweepRow], measured: Sequence[SweepRow] | None = None) -> str:
    """The rows as a JSON list of objects (``null`` where a value is missing)."""
    return json.dumps([{k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in r.items()}
                       for r in _records(rows, measured)], indent=2) + "\n"


def render_svg(rows: Sequence[SweepRow], measured: Sequence[SweepRow] | None = None, title: str = "",
               bands: Sequence[dict[str, float]] | None = None) -> str:
    """Measured (dots) vs predicted (line) per metric against the load, one panel per metric (SVG); with
    ``bands``, each prediction's uncertainty as a shaded band around the line."""
    metrics = [m for m in METRICS if any(getattr(r, m) is not None for r in (*rows, *(measured or ())))]
    width, height, pad = 300, 230, 45
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{max(1, len(metrics)) * width}" height="{height + 60}" '
           'font-family="sans-serif" font-size="11">', '<rect width="100%" height="100%" fill="white"/>']
    if title:
        out.append(f'<text x="10" y="{height + 52}">{_escaped(title)}</text>')
    loads = [float(r.concurrency if r.concurrency is not None else r.rate or 0) for r in rows]
    xs = [math.log2(max(load, 1e-9)) for load in loads]
    low, high = min(xs, default=0.0), max(xs, default=1.0)
    span = high - low or 1.0
    for panel, metric in enumerate(metrics):
        left = panel * width + pad
        values = [v for series in (rows, measured or ()) for r in series
                  if (v := getattr(r, metric)) is not None and math.isfinite(v)]
        if bands:
            values += [v * (1 + band[metric]) for r, band in zip(rows, bands)
                       if (v := getattr(r, metric)) is not None and math.isfinite(v)]
        top = max(values, default=1.0) * 1.1 or 1.0

        def px(x: float, y: float, left: float = left, top: float = top) -> tuple[float, float]:
            return left + (x - low) / span * (width - pad - 15), height - pad + 20 - y / top * (height - pad - 10)

        axis_y = height - pad + 20
        out += [f'<text x="{left}" y="16" font-weight="bold">{LABELS[metric]}</text>',
                f'<line x1="{left}" y1="{axis_y}" x2="{left + width - pad - 15}" y2="{axis_y}" stroke="#444"/>',
                f'<line x1="{left}" y1="{axis_y}" x2="{left}" y2="26" stroke="#444"/>']
        for x, load in zip(xs, loads):
            tx, ty = px(x, 0)
            out.append(f'<text x="{tx:.1f}" y="{ty + 14:.1f}" text-anchor="middle">{load:g}</text>')
        for tick in range(5):
            tx, ty = px(low, top * tick / 4)
            out.append(f'<text x="{tx - 4:.1f}" y="{ty + 4:.1f}" text-anchor="end">{top * tick / 4:.3g}</text>')
        line = [px(x, v) for x, r in zip(xs, rows) if (v := getattr(r, metric)) is not None and math.isfinite(v)]
        if bands:  # the band: up along the upper edge, back along the lower one
            edge = [(x, v, band[metric]) for x, r, band in zip(xs, rows, bands)
                    if (v := getattr(r, metric)) is not None and math.isfinite(v)]
            outline = [px(x, v * (1 + b)) for x, v, b in edge] + [px(x, v * (1 - b)) for x, v, b in reversed(edge)]
            out.append('<polygon points="' + " ".join(f"{x:.1f},{y:.1f}" for x, y in outline)
                       + '" fill="#3b7dd8" fill-opacity="0.18" stroke="none"/>')
        out.append('<polyline points="' + " ".join(f"{x:.1f},{y:.1f}" for x, y in line)
                   + '" fill="none" stroke="#3b7dd8" stroke-width="2"/>')
        for x, r in zip(xs, measured or ()):
            value = getattr(r, metric)
            if value is not None:
                cx, cy = px(x, value)
                out.append(f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="3.5" fill="#222222"/>')
        kind = "concurrency (closed loop)" if rows and rows[0].concurrency is not None else "rate (req/s)"
        out.append(f'<text x="{left + (width - pad) / 2:.0f}" y="{height + 12}" text-anchor="middle">{kind}</text>')
    out.append(f'<rect x="10" y="{height + 24}" width="12" height="10" fill="#222222"/>'
               f'<text x="26" y="{height + 33}">measured</text>'
               f'<rect x="110" y="{height + 24}" width="12" height="10" fill="#3b7dd8"/>'
               f'<text x="126" y="{height + 33}">predicted</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _escaped(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
