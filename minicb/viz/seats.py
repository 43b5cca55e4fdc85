"""Seat occupancy: one row per seat of the batch, one column per step, filled in as the run plays.

Static batching shows hatched cells (finished, still holding a seat) that continuous batching fills with
new requests; the counters say how much of the batch did useful work so far.
"""
from __future__ import annotations

from minicb.stats.trace import DECODE, EMPTY, IDLE, PAD, PREFILL, Trace
from minicb.viz.draw import (EMPTY_FILL, PAD_COLOR, PALETTE, Cell, color_of, counters, darker, legend,
                             request_colors, step_axis, svg, svg_grid, text, titled)


def cell_look(rid: str | None, phase: str, colors: dict[str, str]) -> tuple[str, str]:
    """(colour, pattern) of one seat in one step."""
    if phase == EMPTY or rid is None:
        return EMPTY_FILL, "solid"
    if phase == PAD:
        return PAD_COLOR, "cross"
    color = color_of(colors, rid)
    return {PREFILL: (darker(color), "solid"), DECODE: (color, "solid"), IDLE: (color, "hatch")}[phase]


def seat_cells(trace: Trace, step: int, colors: dict[str, str]) -> list[Cell]:
    """Every seat of steps 0..step; later steps are left out (not yet played)."""
    cells = []
    for j, record in enumerate(trace.steps[:step + 1]):
        for seat, (rid, phase) in enumerate(record.all_seats):
            data = {"seat": str(seat), "step": str(j), "request": rid or "", "phase": phase}
            cells.append(Cell(seat, j, *cell_look(rid, phase, colors), data=data))
    return cells


def seat_frame(trace: Trace, step: int) -> tuple[list[Cell], int, int, str]:
    """What a GIF frame draws: (cells, rows, columns, caption)."""
    return (seat_cells(trace, step, request_colors(trace)), trace.num_seats, len(trace.steps),
            seat_counters(trace, step))


def seat_counters(trace: Trace, step: int) -> str:
    finished = sum(len(r.finished) for r in trace.steps[:step + 1])
    pct = 100 * trace.seat_utilization_until(step)
    return (f"step {step + 1}/{len(trace.steps)} · utilization so far {pct:.0f}% · finished {finished} · "
            f"waiting {trace.steps[step].waiting}")


def render_seats(trace: Trace, step: int, title: str | None = None) -> str:
    """The seats x steps grid up to and including `step`, with counters, as HTML holding an inline SVG."""
    n, seats = len(trace.steps), trace.num_seats
    if n == 0:
        return f'<div class="minicb-seats">{titled("(no steps)", title)}</div>'
    step = max(0, min(step, n - 1))
    cw = max(2, min(14, 880 // n))      # long runs shrink the cells rather than widen the page
    ch = max(3, min(14, 320 // seats))
    left, top = (30, 4) if ch >= 8 else (4, 4)
    patterns: dict[str, str] = {}
    colors = request_colors(trace)
    body = [f'<rect x="{left - 1}" y="{top - 1}" width="{n * cw + 1}" height="{seats * ch + 1}" '
            f'fill="none" stroke="#dddddd"/>',
            svg_grid(seat_cells(trace, step, colors), patterns, cw, ch, left, top)]
    if ch >= 8:
        body += [text(left - 4, top + s * ch + ch - 4, str(s), "end") for s in range(seats)]
    bottom = top + seats * ch
    body.append(step_axis(n, cw, left, bottom + 10))
    sample = PALETTE[0]   # the legend shows the phases in the first request's colour
    swatches = [Cell(0, 0, darker(sample)), Cell(0, 0, sample), Cell(0, 0, sample, "hatch"),
                Cell(0, 0, PAD_COLOR, "cross"), Cell(0, 0, EMPTY_FILL)]
    labels = ["prefill", "decode", "finished, holding its seat", "padding", "empty"]
    body.append(legend(swatches, labels, patterns, left, bottom + 16))
    width = max(left + n * cw + 4, left + 430)
    return (f'<div class="minicb-seats">{titled("", title)}{svg(width, bottom + 32, patterns, "".join(body))}'
            f'{counters(seat_counters(trace, step))}</div>')
