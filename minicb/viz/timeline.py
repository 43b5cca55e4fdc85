"""Each request's life as a Gantt row: queued, prefill, decode, preempted, finished; and latency CDFs.

The x axis counts steps, not seconds, so rows line up with the seat grid. A request arriving at time t
joins the queue at the first step starting at or after t.
"""
from __future__ import annotations

import html
from bisect import bisect_left
from typing import Sequence

from minicb.scheduler.request import RequestOutput
from minicb.stats.trace import DECODE, IDLE, PAD, PREFILL, Trace
from minicb.viz.draw import (PAD_COLOR, PALETTE, Cell, color_of, darker, legend, request_colors, step_axis, svg,
                             svg_grid, text, titled)
from minicb.viz.figures import image_figure

QUEUED = "queued"
QUEUED_FILL = "#cccccc"
PREEMPTED_COLOR = "#e00000"


def request_order(trace: Trace) -> list[str]:
    """Requests by arrival time (ties keep arrival order), then any the trace saw only in its seats."""
    order = sorted(trace.arrivals, key=trace.arrivals.__getitem__)
    seen = set(order)
    for record in trace.steps:
        for _, (rid, _) in sorted(record.seats.items()):
            if rid not in seen:
                seen.add(rid)
                order.append(rid)
    return order


def request_phases(trace: Trace, rid: str) -> list[str]:
    """The request's phase in every step: prefill, decode, idle, pad, queued, or empty (not there)."""
    starts = [r.start_time for r in trace.steps]
    seat_phase = [dict(r.seats.values()).get(rid) for r in trace.steps]
    first_run = next((j for j, p in enumerate(seat_phase) if p is not None), len(starts))
    arrived = bisect_left(starts, trace.arrivals[rid]) if rid in trace.arrivals else first_run
    done = next((j for j, r in enumerate(trace.steps) if rid in r.finished), len(starts))
    phases = []
    for j, (record, phase) in enumerate(zip(trace.steps, seat_phase)):
        if phase in (PREFILL, DECODE):
            # A chunk of prompt can share a step with decodes; more than one token is still prefill.
            phases.append(PREFILL if phase == PREFILL or record.tokens.get(rid, 0) > 1 else DECODE)
        elif phase is not None:
            phases.append(phase)
        else:
            phases.append(QUEUED if arrived <= j <= done else "")
    return phases


def _runs(phases: list[str]) -> list[tuple[int, int, str]]:
    """(first step, length, phase) of each stretch of one phase."""
    runs: list[tuple[int, int, str]] = []
    for j, phase in enumerate(phases):
        if runs and runs[-1][2] == phase and runs[-1][0] + runs[-1][1] == j:
            runs[-1] = (runs[-1][0], runs[-1][1] + 1, phase)
        else:
            runs.append((j, 1, phase))
    return [r for r in runs if r[2]]


def _look(phase: str, color: str) -> Cell:
    return {PREFILL: Cell(0, 0, darker(color)), DECODE: Cell(0, 0, color), IDLE: Cell(0, 0, color, "hatch"),
            PAD: Cell(0, 0, PAD_COLOR, "cross"), QUEUED: Cell(0, 0, QUEUED_FILL)}[phase]


def render_timeline(trace: Trace, step: int | None = None, title: str | None = None) -> str:
    """One row per request, steps 0..step (all by default) across, as HTML holding an inline SVG."""
    n, order = len(trace.steps), request_order(trace)
    if n == 0 or not order:
        return f'<div class="minicb-timeline">{titled("(no requests)", title)}</div>'
    last = n - 1 if step is None else max(0, min(step, n - 1))
    cw = max(2, min(14, 880 // n))
    rh = max(3, min(14, 480 // len(order)))
    left, top = (44 if rh >= 8 else 4), 4
    colors = request_colors(trace)
    patterns: dict[str, str] = {}
    body = []
    for i, rid in enumerate(order):
        color, y, attr = color_of(colors, rid), top + i * rh, html.escape(rid)
        rows = [f'<g class="minicb-row" data-request="{attr}">']
        if rh >= 8:
            rows.append(text(left - 4, y + rh - 4, rid, "end"))
        for start, length, phase in _runs(request_phases(trace, rid)[:last + 1]):
            cell = _look(phase, color)._replace(data={"request": rid, "phase": phase, "step": str(start)})
            rows.append(svg_grid([cell], patterns, length * cw, rh, left + start * cw, y, gap=1))
        for j, record in enumerate(trace.steps[:last + 1]):
            x = left + j * cw + cw / 2
            if rid in record.preempted:
                rows.append(f'<line x1="{x}" y1="{y - 1}" x2="{x}" y2="{y + rh}" stroke="{PREEMPTED_COLOR}" '
                            f'stroke-width="2" data-request="{attr}" data-phase="preempted"/>')
            if rid in record.finished:
                r, cy = max(1.5, min(rh, cw) / 2 - 1), y + (rh - 1) / 2
                rows.append(f'<path d="M{x + r},{cy} l{-r},{-r} l{-r},{r} l{r},{r} z" fill="#000000" '
                            f'data-request="{attr}" data-phase="finished"/>')
        body.append("".join(rows) + "</g>")
    bottom = top + len(order) * rh
    body.append(step_axis(n, cw, left, bottom + 10))
    sample = PALETTE[0]
    swatches = [Cell(0, 0, QUEUED_FILL), Cell(0, 0, darker(sample)), Cell(0, 0, sample),
                Cell(0, 0, sample, "hatch"), Cell(0, 0, PAD_COLOR, "cross")]
    labels = ["queued", "prefill", "decode", "done, holding its seat", "padding"]
    body.append(legend(swatches, labels, patterns, left, bottom + 16))
    body.append(f'<text x="{left}" y="{bottom + 40}" fill="{PREEMPTED_COLOR}">| preempted</text>'
                f'{text(left + 70, bottom + 40, "◆ result returned")}')
    width = max(left + n * cw + 4, left + 400)
    return (f'<div class="minicb-timeline">{titled("", title)}'
            f'{svg(width, bottom + 46, patterns, "".join(body))}</div>')


STILL_SHADES = {"queued": "#cccccc", "prefill": "#1f4e79", "decode": "#8db3d9"}


def timeline_still(trace: Trace, title: str | None = None):
    """The Timeline widget's view as a still picture, for readers without a live kernel (the widget has no image
    export): one row per request in the widget's order, its phases across the steps, a red tick where it was
    preempted and a diamond where its result went back."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    fig = image_figure(figsize=(10, 3.2), layout="constrained")
    ax = fig.add_subplot()
    rids = request_order(trace)
    for row, rid in enumerate(rids):
        phases = request_phases(trace, rid)
        for phase, color in STILL_SHADES.items():
            ax.broken_barh([(j, 1) for j, p in enumerate(phases) if p == phase], (row - 0.4, 0.8), color=color)
        ax.vlines([j + 0.5 for j, s in enumerate(trace.steps) if rid in s.preempted], row - 0.5, row + 0.5,
                  color="red", lw=2)
        done = [j + 0.5 for j, s in enumerate(trace.steps) if rid in s.finished]
        ax.plot(done, [row] * len(done), "kD", ms=4)
    handles = [Patch(color=c, label=p) for p, c in STILL_SHADES.items()]
    handles += [Line2D([], [], color="red", marker="|", ls="", ms=10, mew=2, label="preempted"),
                Line2D([], [], color="k", marker="D", ls="", ms=4, label="result returned")]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8)
    ax.set(yticks=range(len(rids)), yticklabels=rids, ylim=(len(rids) - 0.5, -0.5), xlabel="step", ylabel="request",
           title=title or "")
    return fig


METRICS = {"e2e": "e2e_latency", "ttft": "ttft", "tpot": "tpot", "queue": "queue_time"}


def latency_cdf(*runs: Sequence[RequestOutput], labels: Sequence[str] | None = None, metric: str = "e2e"):
    """A figure (shown as a picture in Jupyter) with one empirical CDF of `metric` (e2e, ttft, tpot,
    queue) per run."""

    if metric not in METRICS:
        raise ValueError(f"metric={metric!r}: use one of {sorted(METRICS)}")
    labels = labels or [f"run {i + 1}" for i in range(len(runs))]
    fig = image_figure(figsize=(5.5, 3.4), layout="constrained")
    ax = fig.add_subplot()
    for run, label in zip(runs, labels):
        values = sorted(v for o in run if (v := getattr(o.metrics, METRICS[metric])) is not None)
        if not values:
            continue
        median = values[(len(values) - 1) // 2]
        ax.step([values[0]] + values, [0] + [(i + 1) / len(values) for i in range(len(values))], where="post",
                label=f"{label} (median {median:.3g} s)")
    ax.set_xlabel(f"{metric} latency (s, on the engine's clock)")
    ax.set_ylabel("fraction of requests")
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    return fig
