"""Views of a trace. Each is a pure function of the trace; widgets are thin wrappers over them.

render_* return HTML strings (inline SVG); SeatOccupancy, KVBlockMap and Timeline play them step by step in
Jupyter (ipywidgets, imported only when a widget is made); save_* write them out for pages and READMEs.
Playground re-simulates a workload under every serving knob (playground_run is its pure core), and
load_curve / plot_load_curve show latency against the arrival rate (plot_rate_sweep: a real server's, from
the benchmark client's sweep). ServerSeats follows a live server's seats. minicb.viz.charts holds the
lessons' other charts, each drawing what a lesson cell measured (plot_decode_batching, lesson 00's, is
exported here).
"""
from minicb.viz.charts import plot_decode_batching
from minicb.viz.export import save_gif, save_html, save_png
from minicb.viz.kvblocks import render_kv_blocks
from minicb.viz.live import ServerSeats
from minicb.viz.loadcurve import knee, load_curve, plot_load_curve, plot_rate_sweep
from minicb.viz.playground import Playground, PlaygroundResult, PlaygroundSettings, playground_run, render_result
from minicb.viz.seats import render_seats
from minicb.viz.text import occupancy_chart
from minicb.viz.timeline import latency_cdf, render_timeline, timeline_still
from minicb.viz.widgets import KVBlockMap, SeatOccupancy, Timeline

__all__ = ["SeatOccupancy", "KVBlockMap", "Timeline", "render_seats", "render_kv_blocks", "render_timeline",
           "latency_cdf", "timeline_still", "save_html", "save_gif", "save_png", "occupancy_chart", "Playground",
           "PlaygroundSettings",
           "PlaygroundResult", "playground_run", "render_result", "load_curve", "plot_load_curve", "knee",
           "plot_rate_sweep", "ServerSeats", "plot_decode_batching"]
