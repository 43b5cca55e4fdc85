"""Views outside Jupyter: a self-contained HTML player, animated GIFs and PNG stills (for READMEs).

The HTML page holds the very frames the widgets show. GIFs and PNGs rasterise the same grid cells with
matplotlib's Agg canvas (no pyplot, no display) and Pillow, which ships with matplotlib.
"""
from __future__ import annotations

import html
import json
from typing import Callable, Sequence

from minicb.stats.trace import Trace
from minicb.viz.draw import Cell, rgb, tint, titled
from minicb.viz.kvblocks import kv_frame
from minicb.viz.seats import seat_frame

Frame = Callable[[Trace, int], tuple[list[Cell], int, int, str]]   # (cells, rows, columns, caption)
Traces = Trace | Sequence[Trace]
MAX_HTML_FRAMES = 200   # every frame is a whole SVG, so long runs skip steps to keep the page small
MAX_GIF_FRAMES = 120


def _as_list(traces: Traces) -> list[Trace]:
    return [traces] if isinstance(traces, Trace) else list(traces)


def frame_steps(num_steps: int, every: int = 1, most: int = MAX_GIF_FRAMES) -> list[int]:
    """Steps 0, every, 2*every, ... and always the last one; `every` grows until at most `most` remain."""
    every = max(every, -(-num_steps // most))
    last = max(0, num_steps - 1)
    return sorted(set(range(0, last, every)) | {last})


def views(render: Callable[[Trace, int], str], traces: list[Trace], step: int,
          titles: Sequence[str | None]) -> list[str]:
    """One rendered view per trace at `step`; a shorter run shows its last step."""
    return [titled(render(t, min(step, len(t.steps) - 1)), title) for t, title in zip(traces, titles)]


PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>{title}</title></head>
<body style="font-family:sans-serif">
<div style="margin-bottom:8px"><button id="play">Play</button>
<input id="step" type="range" min="0" max="{last}" value="{last}" style="width:400px"></div>
<div id="frame"></div>
<script>
const frames = {frames};
const range = document.getElementById("step"), button = document.getElementById("play");
const frame = document.getElementById("frame");
let timer = null;
function show(i) {{ range.value = i; frame.innerHTML = frames[i]; }}
function pause() {{ clearInterval(timer); timer = null; button.textContent = "Play"; }}
range.oninput = () => show(+range.value);
button.onclick = () => {{
  if (timer) return pause();
  if (+range.value >= frames.length - 1) show(0);
  button.textContent = "Pause";
  timer = setInterval(() => +range.value + 1 < frames.length ? show(+range.value + 1) : pause(), 150);
}};
show(frames.length - 1);
</script></body></html>
"""


def save_html(render: Callable[[Trace, int], str], traces: Traces, path: str,
              titles: Sequence[str] | None = None, every: int = 1) -> None:
    """Write one HTML file that plays render(trace, step) over the steps, traces side by side."""
    traces = _as_list(traces)
    titles = titles or [None] * len(traces)
    frames = []
    for step in frame_steps(max(len(t.steps) for t in traces), every, MAX_HTML_FRAMES):
        cells = "".join(f"<div>{v}</div>" for v in views(render, traces, step, titles))
        frames.append(f'<div style="display:flex;gap:32px;align-items:flex-start">{cells}</div>')
    # "</" inside a <script> would end it early; "<\/" means the same to JavaScript.
    data = json.dumps(frames).replace("</", "<\\/")
    page = PAGE.format(title=html.escape(" vs ".join(t for t in titles if t) or "minicb"),
                       last=len(frames) - 1, frames=data)
    with open(path, "w", encoding="utf-8") as f:
        f.write(page)


def paint(cells: list[Cell], rows: int, cols: int, cw: int, ch: int):
    """Cells as an RGB array (rows*ch x cols*cw x 3): the raster twin of draw.svg_grid."""
    import numpy as np

    image = np.full((rows * ch, cols * cw, 3), 255, dtype=np.uint8)
    gap = 1 if min(cw, ch) >= 4 else 0
    h, w = ch - gap, cw - gap
    yy, xx = np.mgrid[0:h, 0:w]
    masks = {"solid": np.ones((h, w), bool), "hatch": (xx + yy) % 4 < 2,
             "cross": ((xx + yy) % 4 == 0) | ((xx - yy) % 4 == 0)}
    for c in cells:
        block = image[c.row * ch:c.row * ch + h, c.col * cw:c.col * cw + w]
        if c.level < 1:
            block[:] = rgb(tint(c.color))
            block[h - round(h * c.level):] = rgb(c.color)
        else:
            block[masks[c.pattern]] = rgb(c.color)
    return image


def render_images(frame: Frame, traces: list[Trace], steps: list[int], titles: Sequence[str | None]):
    """Yield one Pillow image per step: a panel per trace with its title and caption."""
    import numpy as np
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from PIL import Image

    shapes = [frame(t, 0)[1:3] for t in traces]   # rows and columns do not change over a run
    sizes = [(max(1, min(12, 480 // cols)), max(2, min(12, 240 // rows))) for rows, cols in shapes]
    panel_w = [max(cols * cw, 480) for (_, cols), (cw, _) in zip(shapes, sizes)]   # room for a caption
    height = max(rows * ch for (rows, _), (_, ch) in zip(shapes, sizes))
    fw, fh = sum(panel_w) + 12 * (len(traces) + 1), height + 48
    fig = Figure(figsize=(fw / 100, fh / 100), dpi=100)
    canvas = FigureCanvasAgg(fig)
    images, captions, x = [], [], 12
    for (rows, cols), (cw, ch), pw, title in zip(shapes, sizes, panel_w, titles):
        ax = fig.add_axes((x / fw, (fh - 22 - rows * ch) / fh, cols * cw / fw, rows * ch / fh))
        ax.set_axis_off()
        images.append(ax.imshow(np.zeros((rows * ch, cols * cw, 3), np.uint8), interpolation="nearest",
                                aspect="auto"))
        if title:
            fig.text(x / fw, 1 - 4 / fh, title, va="top", fontsize=9, weight="bold")
        captions.append(fig.text(x / fw, 6 / fh, "", fontsize=8))
        x += pw + 12
    for step in steps:
        for trace, (cw, ch), image, caption in zip(traces, sizes, images, captions):
            cells, rows, cols, text = frame(trace, min(step, len(trace.steps) - 1))
            image.set_data(paint(cells, rows, cols, cw, ch))
            caption.set_text(text)
        canvas.draw()
        yield Image.frombuffer("RGBA", canvas.get_width_height(), canvas.buffer_rgba()).convert("RGB")


def write_gif(frame: Frame, traces: Traces, path: str, every: int = 1,
              titles: Sequence[str] | None = None) -> None:
    traces = _as_list(traces)
    steps = frame_steps(max(len(t.steps) for t in traces), every)
    images = list(render_images(frame, traces, steps, titles or [None] * len(traces)))
    durations = [150] * (len(images) - 1) + [2000]   # linger on the end of the run before looping
    images[0].save(path, save_all=True, append_images=images[1:], duration=durations, loop=0)


FRAMES: dict[str, Frame] = {"seats": seat_frame, "kv": kv_frame}   # the views that have GIF frames, by kind


def _frame_of(kind: str) -> Frame:
    if kind not in FRAMES:
        raise ValueError(f"kind={kind!r}: use one of {sorted(FRAMES)}")
    return FRAMES[kind]


def save_gif(kind: str, traces: Traces, path: str, every: int = 1, titles: Sequence[str] | None = None) -> None:
    """Animated GIF of the seat grid (kind="seats") or the KV block map (kind="kv"), traces side by side."""
    write_gif(_frame_of(kind), traces, path, every, titles)


def save_png(kind: str, traces: Traces, path: str, step: int | None = None,
             titles: Sequence[str] | None = None) -> None:
    """A still of one step (the last by default), drawn like a GIF frame."""
    traces = _as_list(traces)
    step = max(len(t.steps) for t in traces) - 1 if step is None else step
    image = next(render_images(_frame_of(kind), traces, [step], titles or [None] * len(traces)))
    image.save(path)
