"""A backend's trace as an SVG picture a person can read without a tool.

Requests are rows of bars coloured by phase (queued, prefill, decode) on a
simulated-time axis from the first request drawn, in seconds; faults, errors and hang-ups are
marked (never over a label or past the edge); under them, the batch's
running and waiting counts as step charts with their own count axis; a scenario's phases are shaded bands
behind the rows, named at the top. Plain
SVG text: no plotting library to install. At most ``MAX_ROWS`` requests are
drawn (the newest); the picture says how many were left out.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from html import escape as _html_escape

from .trace import TracedRequest, TraceRecorder, request_title

__all__ = ["MAX_ROWS", "timeline_svg"]

# Characters XML 1.0 does not allow in a document (C0 controls but tab, newline and return; lone surrogates;
# U+FFFE, U+FFFF): one of them in a logged method or path made the whole SVG unparseable.
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def escape(text: str) -> str:
    """``text`` as XML character data: markup escaped, characters XML cannot hold replaced by U+FFFD."""
    return _html_escape(_NOT_XML.sub("\ufffd", text))


MAX_ROWS = 200
WIDTH = 1000
LEFT = 230  # room for the request labels
RIGHT = 20
ROW = 16
CHART = 90  # height of the batch chart
FONT = 12  # the docs show the picture about 700 px wide: 12 px at 1,000 reads as ~9
MARK = 10  # a marker's width (a triangle or a cross, at FONT)
COLOURS = {"queued": "#b8b8b8", "prefill": "#f2a03d", "decode": "#3b7dd8", "running": "#3b7dd8",
           "waiting": "#9a9a9a", "fault": "#d62728", "phase": "#fde9c4"}


def _ticks(start: float, stop: float, count: int = 6) -> list[float]:
    span = stop - start
    if span <= 0:
        return [start]
    raw = span / count
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw)
    first = math.ceil(start / step) * step
    ticks, value = [], first
    while value <= stop + 1e-12:
        ticks.append(round(value, 9))
        value += step
    return ticks


def _phases(request: TracedRequest, index: int) -> list[tuple[str, float, float]]:
    seq = request.sequences[index]
    phases = []
    if seq.admitted is not None:
        phases.append(("queued", seq.arrival, seq.admitted))
        prefill_end = seq.first_token if seq.first_token is not None else seq.finished
        if prefill_end is not None:
            phases.append(("prefill", seq.admitted, prefill_end))
    elif seq.finished is not None:
        phases.append(("queued", seq.arrival, seq.finished))
    if seq.first_token is not None:
        end = seq.finished if seq.finished is not None else (seq.last_token or seq.first_token)
        phases.append(("decode", seq.first_token, end))
    return phases


def timeline_svg(recorder: TraceRecorder, label: str, title: str = "",
                 phases: Sequence[tuple[str, float, float]] = ()) -> str:
    """The picture of ``recorder``'s requests and batch, as SVG text; ``phases``: a scenario's, as (name, start,
    end) in simulated time (end: infinite for a phase with no end)."""
    return render_svg(*recorder.snapshot(), label=label, title=title, phases=phases)


def render_svg(requests: list[TracedRequest], samples: list[tuple[float, int, int]], hit_rates: object,
               dropped: int, *, label: str, title: str = "",
               phases: Sequence[tuple[str, float, float]] = ()) -> str:
    """The picture of a trace's requests and batch samples (see :meth:`TraceRecorder.snapshot`)."""
    left_out = max(0, len(requests) - MAX_ROWS) + dropped
    requests = requests[-MAX_ROWS:]  # in order of arrival
    # The axis starts where the first request drawn arrived (traffic that began 11 s after the backend did would
    # sit in the right quarter of an axis from 0); the batch chart starts with the state it had at that instant.
    origin = requests[0].at if requests else 0.0
    if requests:
        before = [sample for sample in samples if sample[0] <= origin]
        samples = [sample for sample in samples if sample[0] > origin]
        if before:
            samples.insert(0, (origin, before[-1][1], before[-1][2]))
    times = [r.at for r in requests] + [r.end for r in requests] + [s[0] for s in samples]
    start, stop = (min(origin, *times), max(times)) if times else (0.0, 1.0)
    if stop <= start:
        stop = start + 1e-3
    plot = WIDTH - LEFT - RIGHT

    def x(t: float) -> float:
        return LEFT + (t - start) / (stop - start) * plot

    def marker_x(t: float) -> float:
        """Where a marker centred on ``t`` starts: right of the labels, left of the edge."""
        return min(max(x(t) - MARK / 2, LEFT + 1), WIDTH - RIGHT - MARK)

    top = 52
    rows_height = max(len(requests), 1) * ROW
    chart_top = top + rows_height + 44  # under the time axis and its unit
    height = chart_top + CHART + 24
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
           f'font-family="sans-serif" font-size="{FONT}">',
           f'<rect width="{WIDTH}" height="{height}" fill="white"/>',
           f'<text x="8" y="18" font-size="{FONT + 3}" font-weight="bold">{escape(title or "llmsim " + label)}</text>',
           f'<text x="8" y="36" fill="#555">backend {escape(label)}: {len(requests)} request(s) drawn'
           + (f", {left_out} earlier not drawn" if left_out else "") + "</text>"]
    legend_x = WIDTH - 470
    for i, name in enumerate(("queued", "prefill", "decode")):
        out.append(f'<rect x="{legend_x + i * 80}" y="8" width="12" height="10" fill="{COLOURS[name]}"/>'
                   f'<text x="{legend_x + i * 80 + 16}" y="18">{name}</text>')
    out.append(f'<text x="{legend_x + 240}" y="18" fill="{COLOURS["fault"]}">'
               "&#9650; fault/error  &#10005; hang-up</text>")
    for name, begin, end in phases:  # behind the rows: only the part of each phase the axis shows
        begin, end = max(begin, start), min(end, stop)
        if end <= begin:
            continue
        out.append(f'<rect class="phase" x="{x(begin):.2f}" y="{top - 4}" width="{max(x(end) - x(begin), 0.5):.2f}" '
                   f'height="{rows_height + 8}" fill="{COLOURS["phase"]}" fill-opacity="0.6">'
                   f"<title>{escape(name)}</title></rect>"
                   f'<text x="{x(begin) + 2:.2f}" y="{top - 6}" font-size="{FONT - 2}" fill="#8a5a00">'
                   f"{escape(name)}</text>")
    for row, request in enumerate(requests):
        y = top + row * ROW
        colour = COLOURS["fault"] if request.status >= 400 or request.status in (0, 499) else "#222"
        out.append(f'<text x="{LEFT - 6}" y="{y + 12}" text-anchor="end" fill="{colour}">'
                   f'{escape(request_title(request))}</text>')
        for index in range(len(request.sequences)):
            inset = index * 2 if len(request.sequences) > 1 else 0  # several choices: stacked, thinner
            for phase, begin, end in _phases(request, index):
                width = max(x(end) - x(begin), 0.5)
                out.append(f'<rect x="{x(begin):.2f}" y="{y + 2 + inset}" width="{width:.2f}" '
                           f'height="{max(ROW - 4 - inset * 2, 2)}" fill="{COLOURS[phase]}">'
                           f"<title>{escape(request_title(request))}: {phase} {begin:.6g}-{end:.6g} s</title></rect>")
        if request.fault or (not request.sequences and request.status != 200):
            note = request.fault or request.error_code or str(request.status)
            out.append(f'<text class="marker" x="{marker_x(request.at):.2f}" y="{y + 12}" fill="{COLOURS["fault"]}">'
                       f"&#9650;<title>{escape(note)}</title></text>")
        if request.cancelled:
            out.append(f'<text class="marker" x="{marker_x(request.end):.2f}" y="{y + 12}" '
                       f'fill="{COLOURS["fault"]}">&#10005;<title>client hung up</title></text>')
    axis_y = top + rows_height + 4
    out.append(f'<line x1="{LEFT}" y1="{axis_y}" x2="{WIDTH - RIGHT}" y2="{axis_y}" stroke="#444"/>')
    for tick in _ticks(start, stop):
        out.append(f'<line x1="{x(tick):.2f}" y1="{axis_y}" x2="{x(tick):.2f}" y2="{axis_y + 4}" stroke="#444"/>'
                   f'<text x="{x(tick):.2f}" y="{axis_y + 16}" text-anchor="middle">{tick:g}</text>')
    out.append(f'<text x="{LEFT + plot / 2:.0f}" y="{axis_y + 32}" text-anchor="middle" fill="#555">'
               "simulated seconds</text>")
    running_peak = max([int(s[1]) for s in samples] + [0])
    waiting_peak = max([int(s[2]) for s in samples] + [0])
    peak = max(running_peak, waiting_peak, 1)
    out.append(f'<text x="{LEFT - 40}" y="{chart_top + 12}" text-anchor="end">sequences</text>'
               f'<text x="{LEFT - 40}" y="{chart_top + 30}" text-anchor="end" fill="{COLOURS["running"]}">'
               f"running (peak {running_peak})</text>"
               f'<text x="{LEFT - 40}" y="{chart_top + 48}" text-anchor="end" fill="{COLOURS["waiting"]}">'
               f"waiting (peak {waiting_peak})</text>")
    out.append(f'<line x1="{LEFT}" y1="{chart_top}" x2="{LEFT}" y2="{chart_top + CHART}" stroke="#444"/>')
    for count in sorted({0, peak // 2, peak}):  # the chart's own axis: counts of sequences
        yy = chart_top + CHART - count / peak * CHART
        out.append(f'<line x1="{LEFT - 4}" y1="{yy:.2f}" x2="{LEFT}" y2="{yy:.2f}" stroke="#444"/>'
                   f'<text class="count" x="{LEFT - 7}" y="{yy + 4:.2f}" text-anchor="end">{count}</text>')
    for column, name in ((1, "running"), (2, "waiting")):
        points: list[str] = []
        previous = 0
        for sample in samples:
            yy = chart_top + CHART - sample[column] / peak * CHART
            if points:
                points.append(f"{x(sample[0]):.2f},{chart_top + CHART - previous / peak * CHART:.2f}")
            points.append(f"{x(sample[0]):.2f},{yy:.2f}")
            previous = int(sample[column])
        if points:
            points.append(f"{x(stop):.2f},{chart_top + CHART - previous / peak * CHART:.2f}")
            out.append(f'<polyline points="{" ".join(points)}" fill="none" stroke="{COLOURS[name]}" '
                       'stroke-width="1.5"/>')
    out.append(f'<line x1="{LEFT}" y1="{chart_top + CHART}" x2="{WIDTH - RIGHT}" y2="{chart_top + CHART}" '
               'stroke="#444"/>')
    out.append("</svg>")
    return "\n".join(out)
