"""The widgets: Play + a step slider over one HTML view per trace, side by side, for each view.

The Play button drives the slider in the browser (jslink), and a Python observer re-renders the views, so the
same widget also works headless: set `.step` and read `.html`.

The widgets sit on top of the views and the export (views <- export <- widgets), so the view modules stay
pure functions of a trace that the export can draw without knowing the widgets.
"""
from __future__ import annotations

from functools import partial
from typing import Callable

from minicb.stats.trace import Trace
from minicb.viz import export
from minicb.viz.figures import widget_bundle
from minicb.viz.kvblocks import kv_frame, render_kv_blocks
from minicb.viz.seats import render_seats, seat_frame
from minicb.viz.timeline import render_timeline

Render = Callable[[Trace, int], str]



class Player:
    """Play + slider over render(trace, step) for each trace; `.widget` is the ipywidgets box it displays."""

    def __init__(self, render: Render, traces: list[Trace], titles: list[str] | None = None,
                 frame: export.Frame | None = None):
        import ipywidgets as w   # here, not at the top: `import minicb.viz` must work without it

        if titles is not None and len(titles) != len(traces):
            raise ValueError(f"{len(titles)} titles for {len(traces)} traces")
        self.render, self.traces, self.frame = render, traces, frame
        self.titles = titles or [None] * len(traces)
        last = max(0, max(len(t.steps) for t in traces) - 1)
        # Whole runs play in about ten seconds: long ones skip steps rather than crawl.
        self.play = w.Play(value=last, min=0, max=last, step=max(1, -(-last // 100)), interval=100)
        self.slider = w.IntSlider(value=last, min=0, max=last, description="step")
        w.jslink((self.play, "value"), (self.slider, "value"))
        self.views = [w.HTML(layout=w.Layout(margin="0 24px 0 0")) for _ in traces]
        self.slider.observe(self._show, names="value")
        self.play.observe(self._rewind, names="playing")
        self._show()
        self.widget = w.VBox([w.HBox([self.play, self.slider]), w.HBox(self.views)])

    def _show(self, change: dict | None = None) -> None:
        for view, value in zip(self.views, export.views(self.render, self.traces, self.step, self.titles)):
            view.value = value

    def _rewind(self, change: dict) -> None:
        # Play at the last step would stop at once; start the run over instead.
        if change["new"] and self.step == self.slider.max:
            self.step = 0

    @property
    def step(self) -> int:
        return self.slider.value

    @step.setter
    def step(self, value: int) -> None:
        self.slider.value = value

    @property
    def html(self) -> list[str]:
        return [view.value for view in self.views]

    def _repr_mimebundle_(self, **kwargs):
        return widget_bundle(self, self.widget, **kwargs)

    def save_html(self, path: str) -> None:
        """One self-contained page that plays every step, no kernel needed."""
        export.save_html(self.render, self.traces, path, self.titles)

    def save_gif(self, path: str, every: int = 1) -> None:
        if self.frame is None:
            raise TypeError(f"{type(self).__name__} has no GIF export; use save_html")
        export.write_gif(self.frame, self.traces, path, every, self.titles)


class SeatOccupancy(Player):
    """Play a run (or several side by side, e.g. static vs continuous) step by step on the seat grid."""

    def __init__(self, trace: Trace, *more: Trace, titles: list[str] | None = None):
        super().__init__(render_seats, [trace, *more], titles, frame=seat_frame)


class KVBlockMap(Player):
    """Play the KV pool of one run (or several side by side, e.g. paged vs contiguous)."""

    def __init__(self, trace: Trace, *more: Trace, titles: list[str] | None = None, columns: int = 32):
        super().__init__(partial(render_kv_blocks, columns=columns), [trace, *more], titles,
                         frame=partial(kv_frame, columns=columns))


class Timeline(Player):
    """Play the requests' timelines of one run (or several side by side)."""

    def __init__(self, trace: Trace, *more: Trace, titles: list[str] | None = None):
        super().__init__(render_timeline, [trace, *more], titles)
