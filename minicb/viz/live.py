"""A live server's seats: ServerSeats polls `python -m minicb serve`'s /debug/trace and draws its newest steps.

The server's trace is the engine's own (StepRecord.to_row on the way out, StepRecord.from_row here), so
the grid means exactly what SeatOccupancy's does; only it grows while requests arrive from real clients.
"""
from __future__ import annotations

import threading

from minicb.stats.trace import StepRecord, Trace
from minicb.viz.figures import widget_bundle
from minicb.viz.seats import render_seats


class ServerSeats:
    """The last `window` steps of a running server, redrawn on every poll(); follow() polls in the
    background until stop(). Headless, call poll() and read `.html`."""

    def __init__(self, base_url: str, window: int = 150, every_s: float = 0.25, title: str | None = None):
        import httpx
        import ipywidgets as w   # here, not at the top: `import minicb.viz` must work without them

        self.url = base_url.rstrip("/") + "/debug/trace"
        self.window, self.every_s, self.title = window, every_s, title
        self.client = httpx.Client(timeout=10)
        self.trace: Trace | None = None
        self.since = 0
        self.view = w.HTML(f'<div class="minicb-seats">waiting for the first step of {base_url}</div>')
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def poll(self) -> int:
        """Fetch every step run since the last poll, keep the newest `window`, redraw; how many arrived."""
        arrived = 0
        while True:
            reply = self.client.get(self.url, params={"since": self.since, "limit": self.window})
            if reply.status_code == 404:
                raise RuntimeError("this server has no /debug/trace: start it with --enable-debug-trace")
            reply.raise_for_status()
            page = reply.json()
            if not page["enabled"]:
                raise RuntimeError("this server keeps no trace: start it without --trace-max-steps 0")
            if self.trace is None:
                self.trace = Trace(num_seats=page["num_seats"], max_steps=self.window)
            self.trace.steps += [StepRecord.from_row(row) for row in page["steps"]]
            del self.trace.steps[:-self.window]
            self.since, arrived = page["next_since"], arrived + len(page["steps"])
            if len(page["steps"]) < self.window:   # caught up with the server
                break
        if arrived:
            self.view.value = render_seats(self.trace, len(self.trace.steps) - 1, self.title)
        return arrived

    def follow(self) -> "ServerSeats":
        """Poll every `every_s` seconds in a background thread (the notebook stays free) until stop()."""
        if self._thread is None or not self._thread.is_alive():
            self._stop.clear()
            self._thread = threading.Thread(target=self._follow, name="minicb-server-seats", daemon=True)
            self._thread.start()
        return self

    def _follow(self) -> None:
        while not self._stop.wait(self.every_s):
            try:
                self.poll()
            except Exception as error:   # the server went away: say so in the view, and stop polling
                self.view.value = f'<div class="minicb-seats">stopped following: {error}</div>'
                return

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    @property
    def html(self) -> str:
        return self.view.value

    def _repr_mimebundle_(self, **kwargs):
        return widget_bundle(self, self.view, **kwargs)
