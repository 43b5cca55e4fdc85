"""What the views share: request colours, grid cells, and how cells become SVG.

A view (seats, KV blocks) describes itself as a list of Cells; svg_grid draws them for the browser and
export.paint rasterises the very same cells for GIFs, so a frame looks alike in both.
"""
from __future__ import annotations

import html
from typing import NamedTuple

from minicb.stats.trace import Trace

# Fixed, in order of first appearance, so the same run is coloured the same way every time.
# No greys or near-whites: those mean padding, empty seats and free blocks.
PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
           "#e377c2", "#bcbd22", "#17becf", "#393b79", "#637939", "#ad494a"]
EMPTY_FILL = "#f2f2f2"
PAD_COLOR = "#777777"


def request_colors(trace: Trace) -> dict[str, str]:
    """Request id -> colour, by order of first appearance in the seats."""
    colors: dict[str, str] = {}
    for record in trace.steps:
        for _, (rid, _) in sorted(record.seats.items()):
            color_of(colors, rid)
    return colors


def color_of(colors: dict[str, str], rid: str) -> str:
    """The request's colour, giving the next palette colour to one not seen yet."""
    return colors.setdefault(rid, PALETTE[len(colors) % len(PALETTE)])


def rgb(color: str) -> tuple[int, int, int]:
    return int(color[1:3], 16), int(color[3:5], 16), int(color[5:7], 16)


def mix(color: str, other: str, t: float) -> str:
    """Blend two #rrggbb colours: t=0 gives `color`, t=1 gives `other`."""
    return "#" + "".join(f"{round(x + (y - x) * t):02x}" for x, y in zip(rgb(color), rgb(other)))


def darker(color: str) -> str:
    return mix(color, "#000000", 0.35)


def tint(color: str) -> str:
    return mix(color, "#ffffff", 0.75)


class Cell(NamedTuple):
    row: int
    col: int
    color: str
    pattern: str = "solid"   # "solid", "hatch" (diagonal lines) or "cross" (cross-hatch)
    level: float = 1.0       # the filled fraction, from the bottom; the rest is a tint of the colour
    data: dict[str, str] = {}


def _pattern_id(pattern: str, color: str) -> str:
    # Named after what it draws, so identical definitions in two SVGs on one page cannot disagree.
    return f"minicb-{pattern}-{color[1:]}"


def _pattern_def(pattern: str, color: str) -> str:
    lines = "M3,0 L3,6" if pattern == "hatch" else "M3,0 L3,6 M0,3 L6,3"
    return (f'<pattern id="{_pattern_id(pattern, color)}" width="6" height="6" patternUnits="userSpaceOnUse" '
            f'patternTransform="rotate(45)"><rect width="6" height="6" fill="#ffffff"/>'
            f'<path d="{lines}" stroke="{color}" stroke-width="2.5"/></pattern>')


def svg_grid(cells: list[Cell], patterns: dict[str, str], cw: int, ch: int, x0: int = 0, y0: int = 0,
             gap: int = 1) -> str:
    """<rect>s for cells of cw x ch pixels laid out from (x0, y0); adds the patterns they use to `patterns`."""
    rects = []
    for c in cells:
        x, y = x0 + c.col * cw, y0 + c.row * ch
        w, h = max(1, cw - gap), max(1, ch - gap)
        data = "".join(f' data-{k}="{html.escape(v)}"' for k, v in c.data.items())
        if c.pattern == "solid":
            fill = c.color if c.level >= 1 else tint(c.color)
        else:
            patterns.setdefault(_pattern_id(c.pattern, c.color), _pattern_def(c.pattern, c.color))
            fill = f"url(#{_pattern_id(c.pattern, c.color)})"
        rects.append(f'<rect x="{x}" y="{y}" width="{w}" height="{h}" fill="{fill}"{data}/>')
        if 0 < c.level < 1:
            filled = max(1, round(h * c.level))
            rects.append(f'<rect x="{x}" y="{y + h - filled}" width="{w}" height="{filled}" fill="{c.color}"/>')
    return "\n".join(rects)


def svg(width: int, height: int, patterns: dict[str, str], body: str) -> str:
    # No xmlns: inline SVG in HTML does not need it, and exported pages stay free of URLs.
    return (f'<svg width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
            f'style="font-family:sans-serif;font-size:9px"><defs>{"".join(patterns.values())}</defs>\n{body}\n</svg>')


def text(x: float, y: float, s: str, anchor: str = "start") -> str:
    return f'<text x="{x}" y="{y}" text-anchor="{anchor}" fill="#444444">{html.escape(s)}</text>'


def tick_every(n: int, most: int = 10) -> int:
    """A round step between axis labels, so that at most `most` labels fit along n columns."""
    for t in (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000):
        if n / t <= most:
            return t
    return -(-n // most)


def step_axis(n: int, cw: int, x0: int, y: int) -> str:
    """Step numbers under n columns of cw pixels."""
    t = tick_every(n)
    labels = [text(x0 + j * cw + cw / 2, y, str(j), "middle") for j in range(0, n, t)]
    if n * cw > 60:
        labels.append(text(x0 + n * cw, y, "step", "end"))
    return "".join(labels)


def titled(view: str, title: str | None) -> str:
    if not title:
        return view
    return f'<div class="minicb-title" style="font-weight:bold;margin:2px 0">{html.escape(title)}</div>{view}'


def counters(s: str) -> str:
    return f'<div class="minicb-counters" style="font-family:sans-serif;font-size:12px">{html.escape(s)}</div>'


def legend(items: list[Cell], labels: list[str], patterns: dict[str, str], x0: int, y: int) -> str:
    """A row of swatches with labels, drawn like grid cells (but without data attributes)."""
    body, x = "", x0
    for cell, label in zip(items, labels):
        body += svg_grid([cell._replace(row=0, col=0)], patterns, 11, 11, x, y) + text(x + 13, y + 8, label)
        x += 22 + 5 * len(label)
    return body
